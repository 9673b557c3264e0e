"""The suites' engine on the host, the device behind an executor (--executor; issue 25).

pytest runs the real suites and plugin in a subprocess, as `qpconform vm --host-engine`
runs them, against a fake device served by an executor thread on a unix socket (the
socket QEMU's virtio-serial chardev gives the host): a clean device passes, a planted
fault fails with its rule and shrinks, the pair suites skip saying why, and a host-engine
run that cannot work is one usage line.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from qpconform.adapters import wire
from tests.fake_device import FakeDevice
from tests.remote_fake import listening
from vm import host_engine

ROOT = Path(__file__).resolve().parent.parent


def run_suites(tmp_path: Path, socket_path: Path, *args: str, device: str = "fake0",
               profile: str = "ci") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, QPCONFORM_OUT_DIR=str(tmp_path / "out"))
    env.pop("QPCONFORM_EXECUTORS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args, "--device", device, "--executor",
         str(socket_path), "--hypothesis-profile", profile, "-p", "no:cacheprovider", "-q",
         "-rs"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    return tmp_path / "executor.sock"


def test_the_lone_suites_run_here_and_the_pair_suites_skip_saying_why(
    tmp_path: Path, sock: Path
) -> None:
    device = FakeDevice()
    with listening(device, str(sock)):
        result = run_suites(tmp_path, sock, "suites/test_stateful.py", "suites/test_srq.py",
                            "suites/test_transitions.py", "-k", "RC or stateful or srq")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "qpconform verdict for fake0: CONFORMANT" in out
    assert "a connected pair needs the device in this process" in out  # -rs: in the summary
    steps = int(re.search(r"; (\d+) steps;", out).group(1))
    assert steps > 100, out[-2000:]
    assert "checked steps/s" in out  # the throughput line, its plain loop from the executor
    assert device.live == []  # every QP destroyed through the session


def test_a_planted_fault_fails_with_its_rule_and_is_no_lost_device(
    tmp_path: Path, sock: Path
) -> None:
    with listening(FakeDevice(["accept_illegal_transition"]), str(sock)):
        result = run_suites(tmp_path, sock, "suites/test_transitions.py", "-k", "RC")
    out = result.stdout + result.stderr
    assert result.returncode == 1, out[-3000:]
    assert "linux.transition.invalid." in out
    assert "NOT CONFORMANT" in out
    assert "stopped early" not in out and "is gone" not in out  # a divergence, not a loss


def test_the_stateful_machine_shrinks_through_the_executor(tmp_path: Path, sock: Path) -> None:
    with listening(FakeDevice(["misreport_state"]), str(sock)):
        result = run_suites(tmp_path, sock, "suites/test_stateful.py", "--hypothesis-seed",
                            "1", "--stateful-batches", "lone=2", profile="default")
    out = result.stdout + result.stderr
    assert result.returncode == 1, out[-3000:]
    verbs = int(re.search(r"steps \((\d+) verbs?\)", out).group(1))
    assert verbs <= 3, out[-3000:]


def test_no_socket_is_a_usage_error(tmp_path: Path, sock: Path) -> None:
    result = run_suites(tmp_path, sock, "suites/test_stateful.py")
    assert result.returncode == 4
    assert f"no executor socket at {sock}" in result.stderr
    assert "qpconform vm --host-engine" in result.stderr


def test_one_session_per_process_or_a_usage_error(tmp_path: Path, sock: Path) -> None:
    sock.touch()
    result = run_suites(tmp_path, sock, "suites/test_stateful.py", "-n", "2")
    assert result.returncode == 4
    assert "1 executor session(s) for -n 2" in result.stderr
    assert "--host-engine 2" in result.stderr


def test_a_peer_device_cannot_cross_the_wire(tmp_path: Path, sock: Path) -> None:
    sock.touch()
    result = run_suites(tmp_path, sock, "suites/test_stateful.py", "--peer-device", "rxe1")
    assert result.returncode == 4
    assert "--peer-device with --executor" in result.stderr


def test_the_executor_must_serve_the_named_device(tmp_path: Path, sock: Path) -> None:
    with listening(FakeDevice(), str(sock)):
        result = run_suites(tmp_path, sock, "suites/test_stateful.py", device="rxe0")
    assert result.returncode == 4
    assert "serves fake0: give --device fake0" in result.stderr


# ------------------------------------------------------------------ qpconform vm --host-engine
@pytest.fixture
def silent_and_waiting(tmp_path: Path) -> Iterator[tuple[Path, Path, list[object]]]:
    """Two sockets as QEMU offers them: behind the first a session already used (nobody
    answers), behind the second an executor still waiting for its host (says hello)."""
    used, unused = tmp_path / "used.sock", tmp_path / "unused.sock"
    said: list[object] = []
    servers = []
    for path in (used, unused):
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(path))
        server.listen(1)
        servers.append(server)

    def silent() -> None:
        conn, _ = servers[0].accept()
        said.append("silent connected")
        conn.recv(1)  # nothing comes: returns at close

    def waiting() -> None:
        conn, _ = servers[1].accept()
        time.sleep(0.5)  # a guest still booting
        wire.write_frame(conn.fileno(), ["ok", {"name": "rxe0"}, None])
        said.append(wire.read_frame(conn.fileno(), 5.0))
        conn.close()

    threads = [threading.Thread(target=f, daemon=True) for f in (silent, waiting)]
    for t in threads:
        t.start()
    yield used, unused, said
    for server in servers:
        server.close()


def test_an_unused_session_is_ended_a_used_one_waited_out(silent_and_waiting) -> None:
    used, unused, said = silent_and_waiting
    gone = threading.Event()
    threading.Timer(2.0, gone.set).start()  # the guest powers off once the unused one ends
    started = time.monotonic()
    host_engine.end_unused_sessions([used, unused], gone)
    assert ["bye"] in said
    assert 1.5 < time.monotonic() - started < 5.0  # the silent one waited until the guest went


def test_command_starts_once_qemu_listens_and_sees_the_sockets(tmp_path: Path) -> None:
    sockets = [tmp_path / "a.sock", tmp_path / "b.sock"]
    seen = tmp_path / "seen"
    command = HostCommandProbe(sockets, seen)
    thread = threading.Thread(target=command.host.run, daemon=True)
    thread.start()
    time.sleep(0.5)
    assert not seen.exists()  # no socket yet: QEMU not started
    for path in sockets:
        path.touch()  # a plain file: the unused-session step cannot connect, and skips it
    thread.join(10)
    assert command.host.status == 0
    assert seen.read_text() == ",".join(map(str, sockets))


def test_command_never_starts_when_the_guest_never_came(tmp_path: Path) -> None:
    command = HostCommandProbe([tmp_path / "never.sock"], tmp_path / "seen")
    command.host.guest_gone.set()
    command.host.run()
    assert command.host.status is None and not (tmp_path / "seen").exists()


class HostCommandProbe:
    """A HostCommand whose COMMAND writes the QPCONFORM_EXECUTORS it was given."""

    def __init__(self, sockets: list[Path], seen: Path) -> None:
        script = f"import os; open({str(seen)!r}, 'w').write(os.environ['{host_engine.ENV}'])"
        self.host = host_engine.HostCommand([sys.executable, "-c", script], sockets)
