"""`qpconform vm --host-engine N -- COMMAND`: COMMAND runs on this host, the device in the
guest behind N executor sessions (qpconform/adapters/executor.py), one per pytest process.

    qpconform vm --host-engine 2 -- python -m pytest suites/test_stateful.py \\
        suites/test_transitions.py --device rxe0 -n 2

The model, the engine and Hypothesis run at native speed; each checked step is a round
trip through a virtio-serial port (syzkaller's split of manager and executor).
COMMAND finds the sessions' sockets in QPCONFORM_EXECUTORS (the plugin's --executor) and
starts as soon as QEMU listens on them, so its start overlaps the guest's boot. The guest
powers off when every session has ended and the executor's leak check has run; a
session COMMAND never opened is ended here, so the guest does not wait for it.

`--then-in-guest 'SHELL COMMAND'` runs inside the same guest once every session and COMMAND
ended (what must run where the device is, without a second boot).

Exit status: COMMAND's when it failed, else the guest's (a leak, a kernel crash, a
timeout, the part inside: qpconform/vm/runner.py's statuses).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from qpconform.adapters import wire
from qpconform.vm import runner
from qpconform.vm.executor_vm import EXECUTORS_ENV as ENV
from qpconform.vm.executor_vm import served, session_ports

#: The suites whose tests each drive lone QPs, and the ones whose tests drive connected pairs
#: (loopback pairs the executor builds): together all of suites/, the lone ones first where a
#: run stops at its first failure (a broken driver is caught soonest by the transition sweep).
#: scripts/conformance.sh names the same; tests/test_host_engine.py checks both.
LONE_SUITES = ("suites/test_transitions.py", "suites/test_attributes.py",
               "suites/test_post_rules.py", "suites/test_stateful.py")
PAIR_SUITES = ("suites/test_error_handling.py", "suites/test_drain.py",
               "suites/test_operations.py", "suites/test_srq.py", "suites/test_shared_cq.py",
               "suites/test_memory_protection.py", "suites/test_traffic_stateful.py")
#: Every suite in the order a host-engine run takes them.
ALL_SUITES = LONE_SUITES + PAIR_SUITES

#: Drivers whose suites run with their engine on this host by default (scripts/conformance.sh,
#: the mutant gate, the soak). siw stays in the guest though the executor serves its pairs
#: (PEER_DEVICE; QPCONFORM_HOST_ENGINE=1 runs it so, 2 min 3 s against 3 min 4 s inside): at
#: 3x the lone machine's steps, a default-profile run on 6.1 meets the consequences of siw's
#: final ERROR that 6.1's query_qp hides (a flush missing on a QP the model thinks left ERR),
#: which the engine cannot follow (docs/measured.md, "Known hazards, the host engine's
#: shrink, siw's pairs through the executor"). tests/test_host_engine.py checks the script
#: names the same.
HOST_ENGINE_DRIVERS = frozenset({"rxe"})

#: Drivers whose pairs span two devices connected through rdma_cm (iWARP): the executor
#: opens the second one too (--peer-device) and connects each pair's ends there.
PEER_DEVICE = {"siw": "siw1"}

#: Seconds COMMAND may go on once the guest is gone (its sessions fail at once: it reports).
AFTER_GUEST = 30.0
#: Seconds to read the hello of a session COMMAND never opened, once it began to arrive.
UNUSED_HELLO = 10.0


class HostCommand:
    """COMMAND on this host, started once QEMU listens on every socket."""

    def __init__(self, command: list[str], sockets: list[Path],
                 ended: Path | None = None) -> None:
        """`ended`: a file written once COMMAND ended (the guest's next part waits for it)."""
        self.command, self.sockets, self.ended = command, sockets, ended
        self.proc: subprocess.Popen[bytes] | None = None
        self.status: int | None = None
        self.guest_gone = threading.Event()

    def run(self) -> None:
        """Wait for the sockets (or the guest's end), run COMMAND, end the unused sessions."""
        while not all(p.exists() for p in self.sockets):
            if self.guest_gone.wait(0.2):
                return  # no boot (an image build failed, a bad option): runner said why
        env = dict(os.environ, **{ENV: ",".join(str(p) for p in self.sockets)})
        print(f"qpconform vm: running on this host against the guest's executor: "
              f"{' '.join(self.command)}", file=sys.stderr, flush=True)
        try:
            self.proc = subprocess.Popen(self.command, env=env)
        except OSError as exc:
            print(f"qpconform vm: cannot run {self.command[0]!r} on this host: {exc}",
                  file=sys.stderr)
            self.status = runner.EXIT_INFRA
        else:
            self.status = self._wait()
        if self.ended is not None:  # before the unused sessions end: the guest goes on then
            with contextlib.suppress(OSError):  # then the guest's bounded wait says so
                self.ended.write_text(f"{self.status}\n")
        end_unused_sessions(self.sockets, self.guest_gone)

    def _wait(self) -> int:
        """COMMAND's status; once the guest is gone, AFTER_GUEST s more, then it is stopped."""
        assert self.proc is not None
        while True:
            with contextlib.suppress(subprocess.TimeoutExpired):
                return self.proc.wait(0.5)
            if self.guest_gone.is_set():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    return self.proc.wait(AFTER_GUEST)
                print(f"qpconform vm: the guest is gone and COMMAND still runs after "
                      f"{AFTER_GUEST:.0f} s: stopping it", file=sys.stderr)
                self.stop()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # pytest closes its sessions, writes reports
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def end_unused_sessions(paths: list[Path], guest_gone: threading.Event) -> None:
    """Say bye to each session COMMAND never opened (its executor waits for a host, up to
    HOST_BOUND), so the guest powers off now. A used session has nobody left to answer:
    its connection stays silent until the guest is gone."""
    waiting: dict[int, socket.socket] = {}
    for path in paths:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(path))
        except OSError:  # QEMU is gone: nothing to end
            sock.close()
            continue
        waiting[sock.fileno()] = sock
    try:
        while waiting and not guest_gone.is_set():
            for fd in select.select(list(waiting), [], [], 0.5)[0]:
                sock = waiting.pop(fd)
                with contextlib.suppress(Exception):  # a hello, or the end of the stream
                    wire.read_frame(fd, UNUSED_HELLO, "an unused executor session")
                    wire.write_frame(fd, ["bye"])
                    # its answer, read before closing: the guest's reply to a host end
                    # that closed would have to wait (the executor's REPLY_BOUND)
                    wire.read_frame(fd, UNUSED_HELLO, "an unused executor session")
                sock.close()
    finally:
        for sock in waiting.values():
            sock.close()


#: Seconds the guest's --then-in-guest part waits, once every session ended, for COMMAND
#: on the host to end too (its report is written then: the two parts share the records).
HOST_PART_END = 120


def guest_command(device: str, ports: dict[str, Path], then_in_guest: str = "",
                  host_ended: Path | None = None, peer: str | None = None) -> list[str]:
    """The guest's command: the executor serving `ports` (its iWARP pairs across `device`
    and `peer`), then `then_in_guest` (a shell command) once every session ended and
    COMMAND on the host wrote `host_ended` (bounded wait); the worse status of the two."""
    executor = ["python3", "-m", "qpconform.adapters.executor", "--device", device,
                *(["--peer-device", peer] if peer else []), *served(ports)]
    if not then_in_guest:
        return executor
    wait = ""
    if host_ended is not None:
        marker = shlex.quote(str(host_ended))
        wait = (f"i=0; while [ ! -e {marker} ] && [ $i -lt {HOST_PART_END * 5} ]; do "
                "sleep 0.2; i=$((i+1)); done\n"
                f"[ -e {marker} ] || echo 'qpconform vm: COMMAND on the host has not ended "
                f"{HOST_PART_END} s after its sessions: going on' >&2\n")
    script = (f"{shlex.join(executor)}; served=$?\n{wait}"
              'echo "qpconform vm: every session ended; in the guest now: $0" >&2\n'
              'sh -c "$0"; then=$?\n'
              '[ "$served" -ne 0 ] && exit "$served"; exit "$then"')
    return ["sh", "-c", script, then_in_guest]


def run(opts: runner.VmOptions, sessions: int, device: str, then_in_guest: str = "",
        peer: str | None = None) -> int:
    """Boot the guest with `sessions` executor sessions serving `device` (and `peer`, the
    second device of iWARP pairs), run opts.command here against them (and `then_in_guest`
    inside once they ended), and return the worse of the statuses."""
    tmp = Path(tempfile.mkdtemp(prefix="qpconform-host-engine-"))
    ports = session_ports(tmp, sessions)
    host_ended = runner.log_dir_of(opts) / "host-part-ended" if then_in_guest else None
    if host_ended is not None:
        host_ended.unlink(missing_ok=True)
    guest = dataclasses.replace(
        opts,
        command=guest_command(device, ports, then_in_guest, host_ended, peer),
        ports={**opts.ports, **ports},
    )
    host = HostCommand(opts.command, list(ports.values()), host_ended)
    thread = threading.Thread(target=host.run, name="host-command", daemon=True)
    thread.start()
    started = time.monotonic()
    try:
        guest_status = runner.run_or_report(guest)
    finally:
        host.guest_gone.set()
        try:
            thread.join()
        except KeyboardInterrupt:
            host.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        if host_ended is not None:  # the guest's part has read it: no stray file in the logs
            host_ended.unlink(missing_ok=True)
    took = time.monotonic() - started
    if host.status is None:
        return guest_status
    print(f"qpconform vm: COMMAND on this host exited with status {host.status}; the guest's "
          f"{'executor and the part inside' if then_in_guest else 'executor'} with "
          f"{guest_status} ({took:.0f} s in all)", file=sys.stderr)
    return host.status or guest_status
