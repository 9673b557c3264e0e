"""Boot the guest with QEMU: accelerator choice, boot watchdog, live console, cleanup.

The guest's serial console is QEMU's stdout.  The host streams it live,
strips the guest init's marker lines (see qpconform/vm/guest_init.sh) and uses them:
``QPCONFORM-BOOTED`` stops the boot watchdog, ``QPCONFORM-EXIT`` carries the
command's status.  A kernel crash on the console (an oops, a panic: qpconform/vm/kernel_log.py
CRASHES) stops the guest CRASH_GRACE seconds later, unless it reported its status by
then, and cuts the console's echo after CRASH_ECHO more lines.  Every QEMU process runs
in its own session and is killed (process group, SIGKILL) on every way out: normal end,
timeout, Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from qpconform.vm import kernel_log

BOOTED = b"QPCONFORM-BOOTED"
EXITED = b"QPCONFORM-EXIT"

# How long QEMU may take to power off after the guest reported its status.
POWEROFF_GRACE = 20.0
# How long a guest whose kernel crashed may still take to report its status (its command
# failing on its own); after that it is stopped, not waited for until the run's timeout.
CRASH_GRACE = 30.0
# Console lines echoed after a kernel crash (the whole console stays in the log file).
CRASH_ECHO = 200


@dataclass
class Share:
    """A 9p share: host directory -> mount tag."""

    path: Path
    tag: str
    readonly: bool = False


@dataclass
class SerialPort:
    """A virtio-serial port: the guest sees /dev/vportNpM named `name`; the host connects
    to the unix socket `path` (QEMU listens; the executor's transport)."""

    name: str
    path: Path


@dataclass
class GuestSpec:
    """Everything QEMU needs, independent of the accelerator."""

    kernel: Path
    initrd: Path | None
    disk: Path  # the per-run overlay; never the cached image
    append: str
    memory_mb: int = 2048
    cpus: int = 2
    shares: list[Share] = field(default_factory=list)
    extra_disks: list[Path] = field(default_factory=list)  # read-only raw images
    ports: list[SerialPort] = field(default_factory=list)
    qemu: str = "qemu-system-x86_64"


def build_argv(spec: GuestSpec, accel: str) -> list[str]:
    """QEMU argv: no network (-nic none), console on stdio, no monitor, no reboot."""
    argv = [spec.qemu, "-accel", accel]
    if accel == "kvm":
        argv += ["-cpu", "host"]
    argv += [
        "-m",
        str(spec.memory_mb),
        "-smp",
        str(spec.cpus),
        "-display",
        "none",
        "-monitor",
        "none",
        "-serial",
        "stdio",
        "-no-reboot",
        "-nic",
        "none",
        "-kernel",
        str(spec.kernel),
    ]
    if spec.initrd is not None:
        argv += ["-initrd", str(spec.initrd)]
    argv += [
        "-append",
        spec.append,
        "-drive",
        f"file={spec.disk},if=virtio,format=qcow2,cache=unsafe",
    ]
    for disk in spec.extra_disks:
        argv += ["-drive", f"file={disk},if=virtio,format=raw,readonly=on"]
    for share in spec.shares:
        opts = f"local,path={share.path},mount_tag={share.tag},security_model=none"
        if share.readonly:
            opts += ",readonly=on"
        argv += ["-virtfs", opts]
    if spec.ports:
        argv += ["-device", "virtio-serial-pci"]
    for i, port in enumerate(spec.ports):
        argv += [
            "-chardev", f"socket,id=qpcport{i},path={port.path},server=on,wait=off",
            "-device", f"virtserialport,chardev=qpcport{i},name={port.name}",
        ]
    return argv


def create_overlay(qemu_img: str, base: Path, overlay: Path) -> None:
    """A qcow2 overlay so the cached raw image is never written."""
    subprocess.run(
        [
            qemu_img,
            "create",
            "-q",
            "-f",
            "qcow2",
            "-b",
            str(base.resolve()),
            "-F",
            "raw",
            str(overlay),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def kvm_usable(dev: str = "/dev/kvm") -> bool:
    """/dev/kvm exists and we may open it (it can still fail to boot: see boot())."""
    return os.path.exists(dev) and os.access(dev, os.R_OK | os.W_OK)


@dataclass
class Outcome:
    """How one QEMU run ended."""

    kind: str  # "exited" (status known) | "boot-timeout" | "timeout" | "died" | "crashed"
    status: int | None = None
    qemu_returncode: int | None = None
    boot_seconds: float | None = None
    message: str = ""
    boot_output: bytes = b""


class ConsoleFilter:
    """Turns raw console bytes into live output, watching for marker lines.

    Output before the BOOTED marker (firmware and kernel noise) is held back
    and only kept for error messages.  Partial lines are written at once so
    progress output (pytest dots) shows live; a partial line that may be the
    start of a marker is held until it is complete.
    """

    def __init__(self, nonce: str, out: BinaryIO, log: BinaryIO | None = None):
        self.nonce = nonce.encode()
        self.out = out
        self.log = log
        self.pending = b""
        self.shown = b""  # the part of the current line already written
        self.booted = False
        self.status: int | None = None
        self.preboot = bytearray()
        self.crashed_at: float | None = None  # time.monotonic() of a kernel crash report
        self.crash_line = ""
        self.echo_left = CRASH_ECHO  # lines echoed after the crash report

    def _watch(self, line: bytes) -> None:
        """Note the first kernel crash report after the boot; count the echo after it."""
        if self.crashed_at is not None:
            if self.echo_left == 0:
                self._emit(b"qpconform vm: console echo cut after the kernel crash report; "
                           b"the rest is in the console log\n")
            self.echo_left -= 1
        elif self.booted:
            text = line.decode(errors="replace")
            if kernel_log.crash(text):
                self.crashed_at = time.monotonic()
                self.crash_line = text.strip()[:200]

    def _emit(self, data: bytes) -> None:
        if not data:
            return
        if self.status is not None:
            return  # only power-off noise follows the exit marker
        if self.echo_left < 0:
            return  # a crashed kernel's flood
        if self.booted:
            self.out.write(data)
            self.out.flush()
        else:
            self.preboot += data

    def _marker(self, line: bytes) -> bool:
        words = line.strip().split()
        if len(words) >= 2 and words[1] == self.nonce:
            if words[0] == BOOTED:
                self.booted = True
                return True
            if words[0] == EXITED and len(words) == 3 and words[2].isdigit():
                self.status = int(words[2])
                return True
        return False

    def feed(self, data: bytes) -> None:
        if self.log is not None:
            self.log.write(data)
            self.log.flush()
        self.pending += data
        while b"\n" in self.pending:
            line, self.pending = self.pending.split(b"\n", 1)
            line = line.rstrip(b"\r")
            if not self.shown and self._marker(line):
                continue
            self._watch(self.shown + line)  # the whole line, also when shown in parts
            self._emit(line + b"\n")
            self.shown = b""
        tail = self.pending.rstrip(b"\r")
        if tail and (self.shown or not self._could_be_marker(tail)):
            self._emit(tail)
            self.shown += tail
            self.pending = self.pending[len(tail) :]

    @staticmethod
    def _could_be_marker(partial: bytes) -> bool:
        for marker in (BOOTED, EXITED):
            n = min(len(partial), len(marker))
            if partial[:n] == marker[:n]:
                return True
        return False


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()


def run(
    argv: list[str],
    nonce: str,
    boot_timeout: float,
    deadline: float,
    out: BinaryIO,
    log: BinaryIO | None = None,
) -> Outcome:
    """Run QEMU until the guest reports its status, the boot watchdog or deadline fires.

    ``deadline`` is a time.monotonic() value for the whole run.  QEMU never
    outlives this call.
    """
    started = time.monotonic()
    console = ConsoleFilter(nonce, out, log)
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    boot_seconds = None
    exit_seen_at = None
    try:
        fd = proc.stdout.fileno()
        while True:
            now = time.monotonic()
            if console.booted and boot_seconds is None:
                boot_seconds = now - started
            if console.status is not None and exit_seen_at is None:
                exit_seen_at = now
            limits = [deadline]
            if not console.booted:
                limits.append(started + boot_timeout)
            if exit_seen_at is not None:
                limits.append(exit_seen_at + POWEROFF_GRACE)
            elif console.crashed_at is not None:
                limits.append(console.crashed_at + CRASH_GRACE)
            wait = min(limits) - now
            if wait <= 0:
                if exit_seen_at is not None:
                    break  # status known; QEMU is just slow to power off
                if console.crashed_at is not None and now >= console.crashed_at + CRASH_GRACE:
                    return Outcome(
                        "crashed",
                        boot_seconds=boot_seconds,
                        message=f"the guest kernel crashed ({console.crash_line}); stopped "
                        f"the guest {CRASH_GRACE:.0f} s later",
                    )
                if not console.booted and started + boot_timeout <= now < deadline:
                    return Outcome(
                        "boot-timeout",
                        boot_output=bytes(console.preboot),
                        message=f"no boot marker within {boot_timeout:.0f} s",
                    )
                return Outcome(
                    "timeout",
                    boot_seconds=boot_seconds,
                    boot_output=bytes(console.preboot),
                    message="the run did not finish before its timeout",
                )
            ready, _, _ = select.select([fd], [], [], min(wait, 1.0))
            if not ready:
                continue
            data = os.read(fd, 65536)
            if not data:
                break  # QEMU closed its stdout: it exited
            console.feed(data)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        if console.status is not None:
            return Outcome(
                "exited",
                status=console.status,
                qemu_returncode=proc.poll(),
                boot_seconds=boot_seconds,
            )
        if console.crashed_at is not None:  # a panic reboots the guest: QEMU ends
            return Outcome(
                "crashed",
                qemu_returncode=proc.poll(),
                boot_seconds=boot_seconds,
                message=f"the guest kernel crashed ({console.crash_line}); QEMU ended",
            )
        return Outcome(
            "died",
            qemu_returncode=proc.poll(),
            boot_seconds=boot_seconds,
            boot_output=bytes(console.preboot),
            message="QEMU ended before the guest reported a status",
        )
    finally:
        _kill(proc)


def boot(
    spec_for: callable,
    accels: list[str],
    nonce: str,
    boot_timeouts: dict[str, float],
    deadline: float,
    out: BinaryIO,
    log: BinaryIO | None = None,
    note=lambda msg: print(f"qpconform vm: {msg}", file=sys.stderr, flush=True),
) -> tuple[str, Outcome]:
    """Try each accelerator in turn; a boot timeout moves on to the next one.

    ``spec_for(accel)`` returns a fresh GuestSpec (a new overlay per attempt).
    Returns the accelerator used and its outcome.
    """
    outcome = Outcome("died", message="no accelerator to try")
    accel = accels[0] if accels else "none"
    attempts, retried, index = list(accels), False, 0
    while index < len(attempts):
        accel = attempts[index]
        argv = build_argv(spec_for(accel), accel)
        outcome = run(argv, nonce, boot_timeouts.get(accel, 120.0), deadline, out, log)
        failed_boot = outcome.kind == "boot-timeout" or (
            outcome.kind == "died" and outcome.boot_seconds is None
        )
        last_try = index == len(attempts) - 1
        timeout = boot_timeouts.get(accel, 120.0)
        time_for_one_more = deadline - time.monotonic() > timeout
        if failed_boot and last_try and not retried and time_for_one_more and (
            _panicked(outcome) or outcome.kind == "boot-timeout"
        ):
            # a guest that panics or hangs before userspace (seen under TCG: an int3 in early
            # init; once in CI a bookworm guest silent for 180 s after three good boots) says
            # nothing about the run: boot it once more, saying so; a second failure is reported
            retried = True
            attempts.append(accel)
            what = (
                "kernel panicked while booting"
                if _panicked(outcome)
                else f"gave no sign of life within {timeout:.0f} s"
            )
            note(f"{accel.upper()} guest {what} (last console line: {_last_line(outcome)}); "
                 "booting it once more")
            index += 1
            continue
        if not failed_boot or last_try:
            return accel, outcome
        if outcome.kind == "boot-timeout":
            why = f"gave no sign of life within {timeout:.0f} s; killed it"
        else:
            last = outcome.boot_output.decode(errors="replace").strip().splitlines()[-1:]
            why = f"QEMU ended before the guest booted (status {outcome.qemu_returncode}"
            why += f": {last[0][:200]})" if last else ")"
        note(f"{accel.upper()} guest {why}; falling back to {attempts[index + 1].upper()}")
        index += 1
    return accel, outcome


def _panicked(outcome: Outcome) -> bool:
    return outcome.kind == "died" and b"Kernel panic" in outcome.boot_output


def _last_line(outcome: Outcome) -> str:
    lines = outcome.boot_output.decode(errors="replace").strip().splitlines()
    return lines[-1][:200] if lines else "no output"
