"""A VM whose command is a device executor, reached through a virtio-serial port: the
host half (`qpconform bench --vm`, the host engine) starts it, connects, and stops it.

The VM runs as a child `qpconform vm` process (its own signal handling, console log and
cleanup); the port's unix socket lives in a private temporary folder.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

#: The environment variable naming the sessions' sockets to a host COMMAND (`qpconform vm
#: --host-engine`, qpconform/vm/host_engine.py); the plugin reads it (fixtures/executor_session.py).
EXECUTORS_ENV = "QPCONFORM_EXECUTORS"


def port_names(sessions: int) -> list[str]:
    """The guest's port names for `sessions` host sessions: qpconform.0, qpconform.1, ..."""
    return [f"qpconform.{i}" for i in range(sessions)]


def session_ports(folder: Path, sessions: int) -> dict[str, Path]:
    """Each session's guest port name and host unix socket (in `folder`)."""
    return {name: folder / f"executor.{i}.sock" for i, name in enumerate(port_names(sessions))}


def served(ports: dict[str, Path]) -> list[str]:
    """The executor's options that serve these ports (one --port-name each)."""
    return [arg for name in ports for arg in ("--port-name", name)]


class ExecutorVM:
    """`qpconform vm --serial-port ... -- COMMAND` in the background, with one port (and
    one host unix socket, `sockets[i]`) per session; COMMAND gets a `--port-name` for
    each."""

    def __init__(self, release: str, command: list[str], driver: str = "rxe",
                 timeout: float = 3600.0, sessions: int = 1) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="qpconform-exec-"))
        ports = session_ports(self.tmp, sessions)
        self.sockets = list(ports.values())
        serial = [arg for name, sock in ports.items()
                  for arg in ("--serial-port", f"{name}={sock}")]
        argv = [sys.executable, "-m", "qpconform", "vm", "--release", release,
                "--driver", driver, "--timeout", str(timeout), *serial,
                "--", *command, *served(ports)]
        # its own session: a Ctrl-C here reaches it through stop(), not twice
        self.proc = subprocess.Popen(argv, start_new_session=True)

    def gone(self) -> str | None:
        """Why the VM is gone (for a wait that must not outlive it), or None."""
        code = self.proc.poll()
        return None if code is None else f"the VM exited with status {code} before its " \
            "executor said hello (see reports/out/guest-console.txt)"

    def stop(self, grace: float = 120.0) -> int:
        """Wait for the VM to power off (the executor ended), else stop it; its status."""
        try:
            return self.proc.wait(grace)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            os.killpg(self.proc.pid, signal.SIGTERM)  # qpconform vm kills QEMU on SIGTERM
            return self.proc.wait(30)
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)
