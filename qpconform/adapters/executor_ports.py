"""The virtio-serial ports the guest's executor serves its host sessions on: which /dev
node QEMU gave a port name, and whether the host end has been opened yet."""

from __future__ import annotations

import glob
import select
import time
from pathlib import Path

#: Seconds a port's executor waits for the host to connect before it gives up (the host
#: connects its sessions when it starts, or when its benchmark or worker reaches them).
HOST_BOUND = 600.0


def find_port(name: str) -> str:
    """The /dev node of the virtio-serial port QEMU named `name` (no udev in the guest:
    /sys/class/virtio-ports/vportNpM/name says which node it is)."""
    for entry in glob.glob("/sys/class/virtio-ports/*/name"):
        if Path(entry).read_text().strip() == name:
            return "/dev/" + Path(entry).parent.name
    found = sorted(Path(p).read_text().strip() for p in glob.glob(
        "/sys/class/virtio-ports/*/name"))
    raise SystemExit(f"qpconform executor: no virtio-serial port named {name!r} "
                     f"(the guest has: {', '.join(found) or 'none'}); is virtio_console loaded?")


def await_host(fd: int, bound: float) -> bool:
    """Wait until the host end of a virtio-serial port is open (the port polls HUP until
    then, and a write blocks), at most `bound` s: a session the host never reaches (a
    benchmark that failed, a worker that never started) ends with a message instead of
    keeping the guest up until it is killed."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    deadline = time.monotonic() + bound
    while True:
        ready = poller.poll(100)
        if ready and not ready[0][1] & select.POLLHUP:
            return True
        if time.monotonic() > deadline:
            return False
        if ready:  # HUP is level-triggered: nap instead of spinning on it
            time.sleep(0.05)
