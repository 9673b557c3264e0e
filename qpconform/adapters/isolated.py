"""A verb made in a forked child, for a call that may kill the process making it.

libsiw's post_recv on the QP of an SRQ divides by the QP's receive queue size, 0 there:
made in the test process, SIGFPE ends the whole session before anything is observed. Made
in a child, the parent sees the signal and reports it as the verb's outcome (a
divergence, never a lost session). The child shares the QP's memory mappings (the
kernel's queues are MAP_SHARED), so what an accepted post writes there the parent's QP
has too. The wait is bounded: a child still running after `timeout` is killed and the
call reported as hung.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import time
import warnings
from collections.abc import Callable

from qpconform.engine.device import VerbResult

#: Seconds a post may take in the child before it is called hung.
CHILD_TIMEOUT = 10.0
#: The child's exit status when the call raised instead of returning a VerbResult.
_RAISED = 70


def call_in_child(verb: Callable[[], VerbResult], timeout: float = CHILD_TIMEOUT) -> VerbResult:
    """`verb()` in a forked child: its VerbResult, or a refusal saying how the child died
    (`killed` names the signal, or "hung")."""
    read_fd, write_fd = os.pipe()
    with warnings.catch_warnings():  # a threaded parent: the child makes one call and _exits
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            os.close(read_fd)
            faulthandler.disable()  # the signal is the parent's to report, not a dump here
            res = verb()
            os.write(write_fd, json.dumps([res.accepted, res.errno, res.detail]).encode())
        except BaseException:
            code = _RAISED
        finally:
            os._exit(code)
    os.close(write_fd)
    try:
        status = _wait(pid, timeout)
        data = _read_all(read_fd)
    finally:
        os.close(read_fd)
    if status is None:
        return VerbResult(False, None, f"the call did not return within {timeout:.0f} s",
                          killed="hung")
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return VerbResult(False, None, f"the calling process was killed by {name}", killed=name)
    if os.WEXITSTATUS(status) != 0 or not data:
        raise RuntimeError(f"the child making the call failed (exit {os.WEXITSTATUS(status)})")
    accepted, errno, detail = json.loads(data)
    return VerbResult(bool(accepted), errno, detail)


def _wait(pid: int, timeout: float) -> int | None:
    """The child's wait status, or None when it ran past `timeout` (then it is killed).
    Also on an interrupt the child is killed and reaped: nothing is left behind."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            time.sleep(0.002)
    except BaseException:
        _kill(pid)
        raise
    _kill(pid)
    return None


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    return b"".join(chunks)
