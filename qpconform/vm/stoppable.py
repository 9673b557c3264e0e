"""Long host tools (mmdebstrap) that a Ctrl-C stops cleanly, their children included.

mmdebstrap in root mode mounts /proc, /sys and device nodes inside the new root and
unmounts them in its own SIGINT/SIGTERM handler. subprocess.run answers a
KeyboardInterrupt with SIGKILL at once, which cuts that cleanup short: the mounts
stay on the host, and apt or dpkg below mmdebstrap run on as orphans (after a
SIGTERM to the runner nothing else signals them at all). So the tool runs in a
process group of its own; an interrupt sends the whole group SIGINT (what a
terminal's Ctrl-C sends), gives the tool GRACE seconds to clean up, then kills
whatever is left of the group. Then the build folder is removed, unless something
is still mounted in it: deleting through a mount would delete on the host.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Seconds an interrupted tool gets to undo its mounts before its group is killed.
GRACE = 30.0
MOUNTINFO = Path("/proc/self/mountinfo")


def _note(msg: str) -> None:
    print(f"qpconform vm: {msg}", file=sys.stderr, flush=True)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _exited(pid: int) -> bool:
    """Has the child exited? Without reaping it: while it is a zombie its process group
    id cannot be reused, so killing the group afterwards cannot hit a stranger."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def stop(proc: subprocess.Popen, grace: float) -> None:
    """SIGINT to the group, up to `grace` s for its leader to exit, SIGKILL to the rest."""
    _signal_group(proc.pid, signal.SIGINT)
    name = Path(str(proc.args[0])).name if isinstance(proc.args, list) else "the tool"
    _note(f"interrupted: {name} gets up to {grace:.0f} s to clean up (Ctrl-C again: kill it)")
    deadline = time.monotonic() + grace
    try:
        while time.monotonic() < deadline and not _exited(proc.pid):
            time.sleep(0.05)
    except KeyboardInterrupt:
        pass  # a second Ctrl-C: no more waiting
    finally:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


def _default_sigint() -> None:
    """In the child: SIGINT back to its default. A runner started as a background job
    (a CI script's `&`) inherits SIGINT ignored, and a shell cannot trap a signal ignored
    on entry: the tool would never get to clean up."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run(argv: list[str], grace: float | None = None) -> subprocess.CompletedProcess[str]:
    """Run argv in its own process group; its status and output (stdout and stderr
    together). An interrupt (KeyboardInterrupt: Ctrl-C, or SIGTERM in the VM runner)
    stops the whole group (see `stop`), then goes on."""
    with tempfile.TemporaryFile() as output:  # a file, not a pipe: no orphan can hold it
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_default_sigint,
        )
        try:
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        except BaseException:
            stop(proc, GRACE if grace is None else grace)
            raise
        proc.wait()
        output.seek(0)
        text = output.read().decode(errors="replace")
    return subprocess.CompletedProcess(argv, proc.returncode, text)


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts_under(directory: Path, mountinfo: Path = MOUNTINFO) -> list[str]:
    """The mount points at or below directory (from /proc/self/mountinfo)."""
    base = str(directory.resolve())
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return []
    points = [_unescape(line.split()[4]) for line in lines if len(line.split()) > 4]
    return [p for p in points if p == base or p.startswith(base + os.sep)]


def remove_tree(directory: Path, mountinfo: Path = MOUNTINFO) -> bool:
    """Remove a build folder, unless something is still mounted in it (then say how to
    remove it by hand). True if it is gone."""
    mounts = mounts_under(directory, mountinfo)
    if mounts:
        _note(
            f"left {directory}: still mounted in it: {', '.join(mounts)}; as root, umount "
            f"those, then rm -rf {directory}"
        )
        return False
    shutil.rmtree(directory, ignore_errors=True)
    return not directory.exists()
