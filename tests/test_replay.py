"""Replay that replays: the line a run prints gives back its stateful sequences, and a
random-profile run calls a quirk it did not provoke "not provoked", not stale.

The stateful suites (suites/test_stateful.py, suites/test_traffic_stateful.py) run in a
subprocess on a tiny project as on a device, against the self-tests' fake device and
fake pair (the conftest below swaps them in for the pyverbs ones and logs every checked
step in order); the device options are validated on the fake pyverbs package of
tests/test_plugin_errors.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.test_plugin_errors import _run

pytest_plugins = ["pytester"]

STATEFUL_SUITE = """
from suites.test_stateful import test_qp_state_machine
from suites.test_traffic_stateful import test_traffic_state_machine
"""

FAKES = """
import json
import os

import pytest

import qpconform.bench
from reports.run_record import RunRecorder

qpconform.bench.modify_rate = lambda *args: 1.0  # no pyverbs modify loop on the fake
_step = RunRecorder.step


def _logged(self, qp_type, verb, state_before, target, rules, result):
    rules = list(rules)
    test = os.environ["PYTEST_CURRENT_TEST"].split(" ")[0]
    with open(os.environ["STEP_LOG"], "a") as log:
        log.write(json.dumps([test, qp_type, verb, state_before, target, result,
                              sorted(map(str, rules))], default=str) + "\\n")
    _step(self, qp_type, verb, state_before, target, rules, result)


RunRecorder.step = _logged


@pytest.fixture(scope="session")
def device():
    from tests.fake_device import FakeDevice

    return FakeDevice()


@pytest.fixture(scope="session")
def windows():
    from qpconform.engine.timing import Windows

    return Windows(quiet=0.0, must_wait=0.0, source="no windows on the fake")


@pytest.fixture
def make_pair(run_recorder):
    from qpconform.engine.pair import PairHarness
    from tests.fake_pair import FakePair

    made = []

    def factory(qp_type, settings=None, connect=True, srq_sides=(), shared_cq_sides=()):
        fake = FakePair(qp_type, srq_sides=frozenset(srq_sides),
                        shared_cq_sides=frozenset(shared_cq_sides))
        harness = PairHarness(fake, sink=None, time_scale=0.01, recorder=run_recorder)
        made.append(harness)
        if connect:
            harness.lifecycle.connect()
        return harness

    yield factory
    for harness in made:
        harness.close()
"""

#: A quirk nothing on a clean device matches.
NEVER_MATCHED = """
[[quirk]]
id = "t.never_matched"
rule = "attr.path_mtu.range"
kinds = ["outcome"]
observed = { outcome = "accepted" }
attrs = { path_mtu = 0 }
reason = "a quirk the self-test's run cannot provoke"
evidence = ["tests/test_replay.py"]
"""

DEVICE = ("suites", "--device", "rxe0", "--quirks", "never.toml")


def _steps(log: Path) -> dict[str, list[Any]]:
    """Each test's checked steps, in order (xdist workers write theirs interleaved)."""
    found: dict[str, list[Any]] = {}
    for line in log.read_text().splitlines():
        test, *step = json.loads(line)
        found.setdefault(test, []).append(step)
    return found


def _first(pytester: pytest.Pytester, log: str, *args: str) -> tuple[Any, dict[str, Any]]:
    """The stateful suites on the fakes: the run's result and its report.json."""
    (pytester.path / "never.toml").write_text(NEVER_MATCHED)
    pytester._monkeypatch.setenv("STEP_LOG", str(pytester.path / log))
    result = _run(pytester, *DEVICE, *args, fake=True, suite=STATEFUL_SUITE, conftest=FAKES)
    return result, json.loads((pytester.path / "out" / "report.json").read_text())


def _again(pytester: pytest.Pytester, log: str, *args: str) -> tuple[Any, dict[str, Any]]:
    """The same project run again (records start fresh: the same out folder)."""
    pytester._monkeypatch.setenv("STEP_LOG", str(pytester.path / log))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *DEVICE, *args)
    return result, json.loads((pytester.path / "out" / "report.json").read_text())


def _passed(result: Any) -> None:
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()


@pytest.mark.slow  # a whole run (or several) in a subprocess: CI's full set
def test_the_printed_replay_line_replays_a_budgeted_run(pytester: pytest.Pytester) -> None:
    """A time budget decides how many batches run; the replay line names them, and a run
    with it checks the very same steps, test by test, and prints the same line."""
    result, report = _first(pytester, "budget.log", "--hypothesis-profile=quick",
                            "--hypothesis-seed=7", "--stateful-budget=2")
    _passed(result)
    replay = report["settings"]["replay"]
    assert replay.startswith("--hypothesis-seed=7 --hypothesis-profile=quick "
                             "--stateful-batches lone="), replay
    spec = replay.split(" --stateful-batches ")[1]
    assert [part.split("=")[0] for part in spec.split(",")] == [
        "lone", "traffic-RC", "traffic-UC", "traffic-UD"]
    assert report["settings"]["seed"] == f"7 (replay: {replay})"
    assert f"lone: {spec.split(',')[0].split('=')[1]} batches, " in (
        report["settings"]["stateful_spent"])
    result.stdout.fnmatch_lines([f"qpconform: replay these sequences with: {replay}"])
    assert not (pytester.path / ".hypothesis" / "examples").exists()  # a seed: no database

    again, replayed = _again(pytester, "replay.log", *replay.split())
    _passed(again)
    assert replayed["settings"]["replay"] == replay
    first, second = _steps(pytester.path / "budget.log"), _steps(pytester.path / "replay.log")
    assert len(first) == 4 and all(len(steps) > 20 for steps in first.values())
    assert second == first


@pytest.mark.slow  # a whole run (or several) in a subprocess: CI's full set
def test_xdist_workers_batches_reach_the_merged_record(pytester: pytest.Pytester) -> None:
    """Each worker runs some of the stateful tests; the merged record and its replay line
    name every test's batches, and the sequences are those of a serial run."""
    spec = "lone=2,traffic-RC=1,traffic-UC=2,traffic-UD=1"
    args = ("--hypothesis-profile=quick", "--hypothesis-seed=11", "--stateful-batches", spec)
    result, serial = _first(pytester, "serial.log", *args)
    _passed(result)
    assert serial["settings"]["stateful_batches"] == spec
    workers, merged = _again(pytester, "xdist.log", *args, "-n", "2")
    _passed(workers)
    assert merged["run"]["workers"] == ["gw0", "gw1"]
    assert merged["settings"]["stateful_batches"] == spec
    assert merged["settings"]["replay"] == (
        f"--hypothesis-seed=11 --hypothesis-profile=quick --stateful-batches {spec}")
    spent = merged["settings"]["stateful_spent"]
    assert [part.split(":")[0] for part in spent.split("; ")] == [
        "lone", "traffic-RC", "traffic-UC", "traffic-UD"]
    assert _steps(pytester.path / "xdist.log") == _steps(pytester.path / "serial.log")


def test_a_bad_stateful_batches_spec_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "suites", "--device", "rxe0", "--stateful-batches",
                  "lone=2,traffic=1", fake=True)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    output = result.stdout.str() + result.stderr.str()
    assert ("qpconform: --stateful-batches 'lone=2,traffic=1': unknown key 'traffic' (allowed: "
            "KEY=N, KEY one of lone, traffic-RC, traffic-UC, traffic-UD, N a whole number "
            ">= 1)") in output
    assert "Traceback" not in output


QUIRK_SUITE = """
def test_checks(quirks, run_recorder):
    assert [q.id for q in quirks] == ["t.never_matched"]
    run_recorder.step("RC", "modify", "RESET", "INIT", ["linux.transition.RC.RESET->INIT"],
                      "match")
"""


@pytest.mark.parametrize(
    ("options", "stale", "exit_code"),
    [
        ((), False, pytest.ExitCode.OK),  # the default profile: random
        (("--hypothesis-profile=quick",), False, pytest.ExitCode.OK),
        (("--quirks-strict",), True, pytest.ExitCode.TESTS_FAILED),
        (("--hypothesis-profile=ci",), True, pytest.ExitCode.OK),
        (("--hypothesis-profile=ci", "--quirks-strict"), True, pytest.ExitCode.TESTS_FAILED),
    ],
)
def test_a_random_run_calls_an_unmatched_quirk_not_provoked(
    pytester: pytest.Pytester, options: tuple[str, ...], stale: bool, exit_code: int
) -> None:
    """Stale means something only where the examples repeat (ci) or when asked for."""
    (pytester.path / "never.toml").write_text(NEVER_MATCHED)
    result = _run(pytester, "suites", "--device", "rxe0", "--quirks", "never.toml", *options,
                  fake=True, suite=QUIRK_SUITE)
    assert result.ret == exit_code, result.stdout.str() + result.stderr.str()
    report = json.loads((pytester.path / "out" / "report.json").read_text())
    ids = ["t.never_matched"]
    assert [q["id"] for q in report["stale_quirks"]] == (ids if stale else [])
    assert [q["id"] for q in report["not_provoked_quirks"]] == ([] if stale else ids)
    assert report["verdict"]["stale_quirks"] == (1 if stale else 0)
    assert report["verdict"]["not_provoked_quirks"] == (0 if stale else 1)
    verdict = "1 stale quirk(s)" if stale else "0 stale quirk(s), 1 not provoked in this run"
    result.stdout.fnmatch_lines([f"*: CONFORMANT (0 divergence(s), 0 known, {verdict}*"])
    page = (pytester.path / "out" / "report.html").read_text()
    assert ("Quirks not provoked in this run (1)" in page) is not stale
    assert f"Stale quirks ({1 if stale else 0})" in page
