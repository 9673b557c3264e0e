"""TAP output for kernel CI (`pytest suites/ --device rxe0 --tap`), read back by a TAP parser.

A tiny project runs the transition suite (suites/test_transitions.py) and one direct
checker test in a subprocess, as on a device, against the self-tests' fake device with a
planted fault (an invalid INIT->RTS is accepted) and UC not selected; the device options
are validated on the fake pyverbs package of tests/test_plugin_errors.py. tap.py's parser
(`tap.parser.Parser`, what pytest-tap writes with) reads the stream: the version and the
plan, one ok / not ok line per test, a skip with its reason, each divergence's record as
the diagnostics of its not ok line (not a traceback), and the verdict closing the stream.
"""

from __future__ import annotations

from typing import Any

import pytest
from tap.parser import Parser

from tests.test_plugin_errors import _run

pytest_plugins = ["pytester"]

SUITE = """
from models.enums import Attr, QPState, QPType
from suites.test_transitions import pytest_generate_tests, test_transition


def test_invalid_modify_directly(checker):
    qp = checker.open_qp(QPType.RC)
    qp.bring_to(QPState.INIT)
    qp.modify({"qp_state": int(QPState.RTS)}, Attr.STATE)  # INIT->RTS: invalid
"""

FAKES = """
import pytest

import fixtures.guards

fixtures.guards.device_present = lambda name: True  # the fake pyverbs' rxe0 is not in sysfs


@pytest.fixture(scope="session")
def device():
    from tests.fake_device import FakeDevice

    return FakeDevice(faults=["accept_illegal_transition"])


@pytest.fixture(scope="session")
def windows():
    from qpconform.engine.timing import Windows

    return Windows(quiet=0.0, must_wait=0.0, source="no windows on the fake")
"""

#: Four tests: a match, a sweep that diverges, a skipped QP type, a direct divergence.
SELECTED = ("RC-RESET-INIT-exact or RC-INIT-RTS-invalid or UC-RESET-INIT-exact "
            "or invalid_modify_directly")
SWEEP = "test_transition[RC-INIT-RTS-invalid]"
DIRECT = "test_invalid_modify_directly"


def _parse(text: str) -> list[Any]:
    return list(Parser().parse_text(text))


def _diagnostics_after(lines: list[Any], name: str) -> str:
    """The diagnostic lines that follow the test line of `name`, as text."""
    start = next(i for i, line in enumerate(lines)
                 if line.category == "test" and line.description.endswith(name))
    out = []
    for line in lines[start + 1:]:
        if line.category != "diagnostic":
            break
        out.append(line.text)
    return "\n".join(out)


def _check_tap(text: str, verdict: bool) -> None:
    """The stream or file: plan, results, skip, divergence diagnostics, (verdict)."""
    lines = _parse(text)
    categories = [line.category for line in lines]
    assert "unknown" not in categories, [line for line in lines if line.category == "unknown"]
    assert categories[:2] == ["version", "plan"], text
    assert lines[0].version == 13
    assert lines[1].expected_tests == 4
    tests = [line for line in lines if line.category == "test"]
    assert sorted(t.number for t in tests) == [1, 2, 3, 4]
    by_name = {t.description.rsplit("::", 1)[1]: t for t in tests}
    assert set(by_name) == {"test_transition[RC-RESET-INIT-exact]", SWEEP,
                            "test_transition[UC-RESET-INIT-exact]", DIRECT}
    assert by_name["test_transition[RC-RESET-INIT-exact]"].ok
    assert not by_name[SWEEP].ok and not by_name[DIRECT].ok
    skipped = by_name["test_transition[UC-RESET-INIT-exact]"]
    assert skipped.ok and skipped.skip
    assert skipped.directive.reason == "UC QPs are not selected or not supported by this device"

    for name in (SWEEP, DIRECT):  # each divergence's record is its not ok line's diagnostics
        diag = _diagnostics_after(lines, name)
        assert "QP divergence (unknown): RC in INIT, modify" in diag, diag
        assert "#   rule     : linux.transition.invalid.INIT->RTS: " in diag, diag
        assert "#   expected : refused (EINVAL), state stays INIT" in diag, diag
        assert "#   observed : accepted, state RTS" in diag, diag
        assert "Traceback" not in diag and "def test_" not in diag, diag
        assert "--- Captured" not in diag, diag  # no empty capture sections by default
    if not verdict:
        return
    # the verdict closes the stream: diagnostics after the last test line
    last_test = max(i for i, c in enumerate(categories) if c == "test")
    closing = [line.text for line in lines[last_test + 1:] if line.category == "diagnostic"]
    assert any(line.startswith("# qpconform verdict for fake0: NOT CONFORMANT (2 divergence(s)")
               for line in closing), closing
    assert any(line.startswith("# qpconform: replay these sequences with: ") for line in closing)


def _suites(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return _run(pytester, "suites", "--device", "rxe0", "--quirks", "none", "--qp-type", "RC",
                "--qp-type", "UD", "-k", SELECTED, *args, fake=True, suite=SUITE, conftest=FAKES)


def test_tap_stream_parses_with_plan_results_skip_divergence_and_verdict(
    pytester: pytest.Pytester,
) -> None:
    result = _suites(pytester, "--tap")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str() + result.stderr.str()
    _check_tap(result.stdout.str(), verdict=True)


@pytest.mark.slow  # a whole run (or several) in a subprocess: CI's full set
def test_a_parallel_run_writes_the_same_tap_into_a_file(pytester: pytest.Pytester) -> None:
    """Under pytest-xdist the divergence text is set in the worker and written by the
    controller; the stream itself is refused with -n (a usage error, one line)."""
    result = _suites(pytester, "--tap-combined", "--tap-outdir", "tap", "-n", "2")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str() + result.stderr.str()
    _check_tap((pytester.path / "tap" / "testresults.tap").read_text(), verdict=False)
    result.stdout.fnmatch_lines(["qpconform verdict for fake0: NOT CONFORMANT*"])

    refused = pytester.runpytest_subprocess(  # the same project again
        "-p", "no:cacheprovider", "suites", "--device", "rxe0", "--tap", "-n", "2")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR, refused.stdout.str()
    assert "qpconform: --tap streams TAP from one process: run it without -n" in (
        refused.stderr.str())
