"""The suites' engine on the host, the device behind an executor (--executor; issue 25).

pytest runs the real suites and plugin in a subprocess, as `qpconform vm --host-engine`
runs them, against a fake device served by an executor thread on a unix socket (the
socket QEMU's virtio-serial chardev gives the host): a clean device passes, a planted
fault fails with its rule and shrinks, the pair suites skip saying why, and a host-engine
run that cannot work is one usage line.
"""

from __future__ import annotations

import json
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
from qpconform.vm import host_engine
from tests.fake_device import FakeDevice
from tests.remote_fake import fake_pairs, listening

ROOT = Path(__file__).resolve().parent.parent


def run_suites(tmp_path: Path, socket_path: Path, *args: str, device: str = "fake0",
               profile: str = "ci") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()  # not this test's own xdist worker's name
           if not k.startswith("PYTEST_XDIST") and k != "QPCONFORM_EXECUTORS"}
    env["QPCONFORM_OUT_DIR"] = str(tmp_path / "out")
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args, "--device", device, "--executor",
         str(socket_path), "--hypothesis-profile", profile, "-p", "no:cacheprovider", "-q",
         "-rs"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    return tmp_path / "executor.sock"


@pytest.mark.slow  # a whole run (or several) in a subprocess: CI's full set
def test_lone_and_pair_suites_run_here_against_the_executor(tmp_path: Path, sock: Path) -> None:
    device = FakeDevice()
    with listening(device, str(sock), make_pair=fake_pairs()):
        result = run_suites(tmp_path, sock, "suites/test_stateful.py", "suites/test_srq.py",
                            "suites/test_transitions.py", "-k", "RC or stateful or srq")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "qpconform verdict for fake0: CONFORMANT" in out
    skipped = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert not [line for line in skipped if "test_srq.py" in line], skipped
    run = json.loads((tmp_path / "out" / "run-host-main.json").read_text())
    assert any(s["verb"] == "post_srq_recv" for s in run["steps"]), "the SRQ pairs ran here"
    steps = int(re.search(r"; (\d+) steps;", out).group(1))
    assert steps > 100, out[-2000:]
    assert "checked steps/s" in out  # the throughput line, its plain loop from the executor
    assert device.live == []  # every QP destroyed through the session
    identity = json.loads((tmp_path / "out" / "run-host-main.json").read_text())["identity"]
    assert identity["engine"] == "on the host, the device behind an executor"  # no path
    assert identity["device"] == "fake0"


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


@pytest.mark.parametrize(("socket_there", "args", "says"), [
    (False, (), ["no executor socket at {sock}", "qpconform vm --host-engine"]),
    (True, ("-n", "2"), ["1 executor session(s) for -n 2", "--host-engine 2"]),
    (True, ("--peer-device", "rxe1"), ["--peer-device with --executor"]),
], ids=["no-socket", "one-session-for-two-workers", "peer-device"])
def test_a_run_that_cannot_work_is_one_usage_error(
    tmp_path: Path, sock: Path, socket_there: bool, args: tuple[str, ...], says: list[str]
) -> None:
    if socket_there:
        sock.touch()
    result = run_suites(tmp_path, sock, "suites/test_stateful.py", *args)
    assert result.returncode == 4
    for text in says:
        assert text.format(sock=sock) in result.stderr


def test_the_executor_must_serve_the_named_device(tmp_path: Path, sock: Path) -> None:
    with listening(FakeDevice(), str(sock)):
        result = run_suites(tmp_path, sock, "suites/test_stateful.py", device="rxe0")
    assert result.returncode == 4
    assert "serves fake0: give --device fake0" in result.stderr


# -------------------------------------------------- one run in two parts (scripts/conformance.sh)
@pytest.mark.slow  # a whole run (or several) in a subprocess: CI's full set
def test_two_parts_of_one_run_make_one_report(tmp_path: Path, sock: Path) -> None:
    """Two pytest sessions with the same QPCONFORM_RUN_ID (conformance.sh: the lone suites
    on the host, then the pair suites inside): the second keeps the first's records and
    its report is of both."""
    os.environ["QPCONFORM_RUN_ID"] = "20261204T000000Z-abcdef"
    try:
        with listening(FakeDevice(), str(sock)):
            first = run_suites(tmp_path, sock, "suites/test_transitions.py", "-k", "RC")
        sock.unlink()
        with listening(FakeDevice(), str(sock)):
            second = run_suites(tmp_path, sock, "suites/test_attributes.py", "-k", "RC",
                                "-n", "1")
    finally:
        del os.environ["QPCONFORM_RUN_ID"]
    assert first.returncode == 0 and second.returncode == 0, second.stdout[-2000:]
    out = tmp_path / "out"
    assert sorted(p.name for p in out.glob("run-*.json")) == [
        "run-host-gw0.json", "run-host-main.json"]
    steps = [int(re.search(r"; (\d+) steps;", r.stdout).group(1)) for r in (first, second)]
    assert steps[1] > steps[0]  # the second part's report counts the first part's steps too


def test_a_later_part_keeps_its_runs_records_and_drops_another_runs(tmp_path: Path) -> None:
    from fixtures.verdict import start_fresh
    from reports.run_record import KIND, SCHEMA

    def record(name: str, run_id: str, kind: str = KIND) -> Path:
        path = tmp_path / name
        path.write_text(json.dumps({"kind": kind, "schema": SCHEMA,
                                    "settings": {"run_id": run_id}}))
        return path

    ours, theirs = record("run-host-gw0.json", "A"), record("run-gw0.json", "B")
    stranger = record("run-gw1.json", "A", kind="something else")  # no run record: it goes
    (tmp_path / "divergences.json").write_text("[]")
    start_fresh(tmp_path, "A")
    assert ours.exists() and not theirs.exists() and not stranger.exists()
    assert (tmp_path / "divergences.json").exists()  # the first part's divergences
    start_fresh(tmp_path, "C")  # a part of a new run: nothing of A's is kept
    assert not ours.exists() and not (tmp_path / "divergences.json").exists()


def test_the_parts_junit_files_become_one(tmp_path: Path) -> None:
    from reports.junit import main, read_junit

    for name, case in (("host", "test_transitions"), ("guest", "test_srq")):
        (tmp_path / f"junit-{name}.xml").write_text(
            f'<testsuites><testsuite name="pytest" tests="1" time="2.0">'
            f'<testcase name="{case}"/></testsuite></testsuites>')
    merged = tmp_path / "junit.xml"
    assert main([str(merged), str(tmp_path / "junit-host.xml"),
                 str(tmp_path / "junit-guest.xml")]) == 0
    summary = read_junit(merged)
    assert summary.passed == 2 and summary.seconds == 4.0
    assert not (tmp_path / "junit-host.xml").exists()


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
        wire.write_frame(conn.fileno(), ["ok", None, None])  # the executor's answer to bye
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


def test_a_reply_nobody_takes_ends_the_session_instead_of_blocking() -> None:
    """The guest's write to a port whose host end closed blocks for ever: bounded, it
    ends the session (the guest powers off) instead of hanging the run."""
    from qpconform.adapters import executor

    guest, host = socket.socketpair()
    with guest, host:
        started = time.monotonic()
        with pytest.raises(wire.WireTimeout):  # the host does not read: the bound
            wire.write_frame(guest.fileno(), ["ok", "x" * (8 << 20), None], 0.5)
        assert time.monotonic() - started < 5
        host.close()
        assert executor.send(guest.fileno(), ["ok", None, None]) is False  # the host left


def test_lone_and_pair_suites_are_all_of_suites_and_the_main_command_names_the_same() -> None:
    """A suite added to suites/ must go to one part, or the two-part runs (the main
    command, the mutant gate) would never run it."""
    shipped = {f"suites/{p.name}" for p in (ROOT / "suites").glob("test_*.py")}
    lone, pair = set(host_engine.LONE_SUITES), set(host_engine.PAIR_SUITES)
    assert lone | pair == shipped and not lone & pair
    script = (ROOT / "scripts" / "conformance.sh").read_text()
    for name, suites in (("lone_suites", host_engine.LONE_SUITES),
                         ("pair_suites", host_engine.PAIR_SUITES)):
        listed = re.search(rf"{name}=\(([^)]*)\)", script)
        assert listed, f"scripts/conformance.sh no longer names {name}"
        assert tuple(listed.group(1).split()) == suites, name


def test_the_main_command_and_the_mutant_gate_run_the_same_drivers_on_the_host() -> None:
    """Which drivers' suites run with their engine here is decided in the script's case and
    in qpconform.vm.host_engine.HOST_ENGINE_DRIVERS (the mutant gate's and the soak's): they must
    agree."""
    from qpconform.mutants import run

    assert run.HOST_ENGINE_DRIVERS is host_engine.HOST_ENGINE_DRIVERS
    script = (ROOT / "scripts" / "conformance.sh").read_text()
    cases = re.findall(r"^\s+(\w+)\) vm_device=.*host_engine=([01]) ;;", script, re.MULTILINE)
    assert {name for name, _ in cases} == {"rxe", "siw"}, cases
    assert {name for name, on in cases if on == "1"} == set(host_engine.HOST_ENGINE_DRIVERS)


def test_the_main_command_names_the_drivers_it_can_run_in_the_vm() -> None:
    result = subprocess.run(["bash", "scripts/conformance.sh"], cwd=ROOT, text=True,
                            capture_output=True, env=dict(os.environ, QPCONFORM_DRIVER="mlx5"),
                            timeout=30)
    assert result.returncode == 2
    assert "QPCONFORM_DRIVER=mlx5 is not one of: rxe, siw" in result.stderr


# ------------------------------------------------------------------ --then-in-guest: one boot
def _run_guest_script(tmp_path: Path, executor_status: int, then: str,
                      host_ended: Path | None) -> subprocess.CompletedProcess[str]:
    """The guest's command as the guest runs it, with a stand-in python3 for the executor
    (it exits with `executor_status`, as the real one does after its leak check)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "python3"
    fake.write_text(f"#!/bin/sh\necho executor-ran >> {tmp_path / 'order'}\n"
                    f"exit {executor_status}\n")
    fake.chmod(0o755)
    argv = host_engine.guest_command("rxe0", {"qpconform.0": tmp_path / "s0"}, then, host_ended)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("executor_status", "then_status", "status"),
                         [(0, 0, 0), (0, 3, 3), (1, 0, 1), (1, 3, 1)])
def test_the_guest_runs_its_part_after_the_sessions_and_keeps_the_worse_status(
    tmp_path: Path, executor_status: int, then_status: int, status: int
) -> None:
    ended = tmp_path / "host-part-ended"
    ended.write_text("0\n")  # the host's COMMAND already ended
    then = f"echo then-ran >> {tmp_path / 'order'}; exit {then_status}"
    result = _run_guest_script(tmp_path, executor_status, then, ended)
    assert result.returncode == status, result.stderr
    assert (tmp_path / "order").read_text().split() == ["executor-ran", "then-ran"]
    assert "has not ended" not in result.stderr


def test_the_guest_part_waits_for_the_host_part_to_end_and_no_longer_than_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host's COMMAND writes the run's report after its sessions ended: the guest's
    part (which adds to the same records) starts once it has, or after the bound."""
    ended = tmp_path / "host-part-ended"
    threading.Timer(1.0, lambda: ended.write_text("0\n")).start()
    started = time.monotonic()
    result = _run_guest_script(tmp_path, 0, "exit 0", ended)
    assert result.returncode == 0 and 0.9 < time.monotonic() - started < 10, result.stderr
    monkeypatch.setattr(host_engine, "HOST_PART_END", 1)
    started = time.monotonic()
    result = _run_guest_script(tmp_path, 0, "exit 0", tmp_path / "never-written")
    assert result.returncode == 0 and time.monotonic() - started < 10
    assert "COMMAND on the host has not ended 1 s after its sessions: going on" in result.stderr


def test_without_a_guest_part_the_guest_runs_the_executor_alone() -> None:
    argv = host_engine.guest_command("rxe0", {"qpconform.0": Path("/s0")})
    assert argv[:3] == ["python3", "-m", "qpconform.adapters.executor"]


def test_the_host_command_says_when_it_ended_while_the_guest_still_runs(
    silent_and_waiting, tmp_path: Path
) -> None:
    """The end is said at once, not after the used sessions fall silent with the guest's
    power-off: the guest's own part waits for it (a first version made it wait its 120 s)."""
    used, unused, _ = silent_and_waiting
    ended = tmp_path / "host-part-ended"
    command = host_engine.HostCommand([sys.executable, "-c", "raise SystemExit(4)"],
                                      [used, unused], ended)
    thread = threading.Thread(target=command.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not ended.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ended.read_text() == "4\n" and command.status == 4
    assert thread.is_alive()  # still with the used session: the guest is up
    command.guest_gone.set()
    thread.join(5)
    assert not thread.is_alive()


def test_then_in_guest_needs_the_host_engine(capsys: pytest.CaptureFixture[str]) -> None:
    from qpconform import cli

    assert cli.main(["vm", "--then-in-guest", "true", "--", "true"]) == 2
    assert "--then-in-guest goes with --host-engine N" in capsys.readouterr().err


def test_a_run_on_a_local_device_needs_no_msgpack() -> None:
    """The wire (msgpack) is imported only by a host-engine run: the plugin and every suite
    load on a host without it (a run on this host's own device, or inside the guest)."""
    code = ("import sys; sys.modules['msgpack'] = None\n"
            "import importlib, pathlib\n"
            "for m in ['fixtures.plugin', 'fixtures.device_fixtures', 'fixtures.stops',\n"
            "          'fixtures.report_labels', 'fixtures.tap_output']:\n"
            "    importlib.import_module(m)\n"
            "for p in sorted(pathlib.Path('suites').glob('test_*.py')):\n"
            "    importlib.import_module('suites.' + p.stem)\n"
            "print('loaded without msgpack')\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0 and "loaded without msgpack" in result.stdout, result.stderr
