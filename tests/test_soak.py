"""qpconform soak: targets, the command each run executes, the table and the exit status."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from qpconform import soak
from qpconform.vm import host_engine
from reports.junit import read_junit


def test_a_target_names_release_driver_and_runs() -> None:
    assert soak.parse_target("trixie/siw:3") == soak.Target("trixie", "siw", 3)
    assert soak.parse_target("bookworm/rxe").runs == 5
    replay = soak.parse_target("trixie/rxe@408919583,3398264959")
    assert replay.seeds == (408919583, 3398264959) and replay.runs == 2


@pytest.mark.parametrize("bad", ["sid/rxe", "trixie/mlx5", "trixie", "trixie/rxe:0",
                                 "trixie/rxe:x", "trixie/rxe@", "trixie/rxe@1,x",
                                 "trixie/rxe:2@5"])
def test_a_bad_target_says_what_is_allowed(bad: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        soak.parse_target(bad)
    assert bad in str(caught.value)
    assert any(w in str(caught.value) for w in ("bookworm", "RUNS", "seeds"))


def test_each_run_is_the_main_job_with_its_seed() -> None:
    """rxe: every suite on this host against the guest's executor, lone-QP suites first (as
    scripts/conformance.sh); siw: inside the guest, its pairs across siw0 and siw1."""
    rxe_target = soak.Target("trixie", "rxe", 1)
    rxe = soak.pytest_command(rxe_target, 408919583, "default", [])
    suites = list(host_engine.ALL_SUITES)
    assert rxe[:3] == ["python", "-m", "pytest"] and rxe[3:3 + len(suites)] == suites
    assert "--hypothesis-seed=408919583" in rxe and rxe[rxe.index("--device") + 1] == "rxe0"
    assert "--peer-device" not in rxe and rxe[rxe.index("-n") + 1] == "2"
    assert soak.vm_options(rxe_target)[-2:] == ["--host-engine", "2"]  # a session per worker
    siw_target = soak.Target("bookworm", "siw", 1)
    siw = soak.pytest_command(siw_target, 1, "default", [])
    assert siw[:4] == ["python3", "-m", "pytest", "suites/"]
    assert siw[siw.index("--peer-device") + 1] == "siw1"
    assert "--host-engine" not in soak.vm_options(siw_target)


def test_the_replay_command_names_the_batches_each_stateful_test_ran() -> None:
    rxe = soak.Target("trixie", "rxe", 1)
    replay = soak.replay_command(rxe, 7, "default", [], "lone=4,traffic-RC=3")
    assert replay.startswith("qpconform vm --release trixie --driver rxe --host-engine 2 -- "
                             "python -m pytest suites/test_transitions.py")
    assert replay.endswith("--hypothesis-seed=7 -n 2 -p no:cacheprovider -q "
                           "--stateful-batches lone=4,traffic-RC=3")
    assert "--stateful-batches" not in soak.replay_command(rxe, 7, "default", [], "")


def test_the_soak_fails_when_any_run_has_an_unknown_divergence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake_run(target, seed, profile, extra, root, timeout):  # no VM in a self-test
        run = soak.SoakRun(target.name, seed, verdict="CONFORMANT", wall_seconds=1.0)
        if seed == 2:
            run.verdict = "NOT CONFORMANT"
            run.unknown = [{"test": "test_traffic_state_machine[UD]",
                            "rule": "pair.unreliable.dropped", "count": 2}]
            run.replay = "qpconform vm -- python3 -m pytest ... --hypothesis-seed=2"
        return run

    monkeypatch.setattr(soak, "run_one", fake_run)
    monkeypatch.setattr(soak, "PROJECT", tmp_path)
    md = tmp_path / "soak.md"
    status = soak.main([soak.Target("trixie", "rxe", 2)], [1, 2], "default", [], tmp_path, md,
                       60.0, "qpconform soak --seed 1 --seed 2")
    assert status == 1
    text = md.read_text()
    assert "`pair.unreliable.dropped` x2" in text and "1 of 2 runs conformant" in text
    assert "--hypothesis-seed=2" in text
    data = json.loads((tmp_path / "soak.json").read_text())
    assert [r["seed"] for r in data["runs"]] == [1, 2]
    monkeypatch.setattr(soak, "run_one", lambda *a: soak.SoakRun("trixie/rxe", 1, "CONFORMANT"))
    assert soak.main([soak.Target("trixie", "rxe", 1)], [1], "default", [], tmp_path, None,
                     60.0, "qpconform soak") == 0


def test_junit_counts_passed_failed_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(
        '<testsuites><testsuite time="3.5">'
        '<testcase classname="a" name="ok"/>'
        '<testcase classname="a" name="bad"><failure message="boom">trace</failure></testcase>'
        '<testcase classname="a" name="skip"><skipped message="why"/></testcase>'
        "</testsuite></testsuites>"
    )
    found = read_junit(path)
    assert (found.seconds, found.passed, found.failed) == (3.5, 1, [("a::bad", "boom")])
    assert read_junit(tmp_path / "absent.xml").passed == 0


def test_the_output_must_be_where_the_guest_can_write(tmp_path: Path) -> None:
    status = soak.main([soak.Target("trixie", "rxe", 1)], [1], "default", [], tmp_path / "x",
                       None, 60.0, "qpconform soak")
    assert status == 2


def test_a_derandomized_soak_takes_no_seed_and_busy_loops_stop_after() -> None:
    """--profile ci: every run draws the same examples (no --hypothesis-seed); --busy N:
    N processes spin beside the run and are gone after it, also when it fails."""
    target = soak.parse_target("bookworm/rxe:2")
    cmd = soak.pytest_command(target, 1, soak.DERANDOMIZED, [])
    assert not any(a.startswith("--hypothesis-seed") for a in cmd)
    assert "--hypothesis-seed=7" in soak.pytest_command(target, 7, "default", [])
    with pytest.raises(RuntimeError), soak.busy_loops(2) as spinning:
        assert [p.poll() for p in spinning] == [None, None]  # spinning
        raise RuntimeError("the run failed")
    assert all(p.returncode is not None for p in spinning)
    assert "2 busy loops" in soak.markdown([], "qpconform soak", soak.DERANDOMIZED, 2)


def test_busy_must_be_a_whole_number(capsys: pytest.CaptureFixture[str]) -> None:
    from qpconform import cli

    with pytest.raises(SystemExit):
        cli.main(["soak", "--busy", "two"])
    assert "give a whole number >= 0" in capsys.readouterr().err
