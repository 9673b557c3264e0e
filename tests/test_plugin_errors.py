"""The plugin's usage errors: one clear line and exit status 4, never a traceback.

Each case runs pytest in a subprocess on a tiny project whose suites/ holds a
device test, with pyverbs either blocked (as on a host without rdma-core) or
replaced by a small fake package written here (never a device in suites/).
"""

import json
import os
import textwrap
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent

SUITE_TEST = """
def test_needs_device(device, qp_types):
    assert device.name == "rxe0"
    assert [t.name for t in qp_types] == ["RC", "UD"]
"""

HOST_TEST = """
def test_host():
    assert True
"""

BLOCKED = "raise ImportError('pyverbs blocked for this test')\n"

FAKE = {
    "__init__.py": "",
    "pyverbs_error.py": """
        class PyverbsError(Exception):
            pass

        class PyverbsRDMAError(PyverbsError):
            def __init__(self, msg, error_code=-1):
                super().__init__(msg)
                self.error_code = error_code
    """,
    "device.py": """
        import os
        from types import SimpleNamespace as NS
        from pyverbs.pyverbs_error import PyverbsRDMAError

        PORT_STATE = int(os.environ.get("FAKE_PORT_STATE", "4"))

        def get_device_list():
            return [NS(name=b"rxe0"), NS(name=b"rxe1")]

        class GID:
            def __init__(self, text):
                self.gid = text

        class Context:
            def __init__(self, name):
                self.name = name

            def query_device(self):
                return NS(phys_port_cnt=1, max_qp_rd_atom=128, max_qp_init_rd_atom=128,
                          vendor_id=0xFFFFFF, vendor_part_id=0, fw_version="0.0.0",
                          node_guid="0000:0000:0000:0001")

            def query_port(self, port):
                if port != 1:
                    raise PyverbsRDMAError("no such port", 22)
                return NS(state=PORT_STATE, max_mtu=5, active_mtu=3, gid_tbl_len=2,
                          pkey_tbl_len=1, link_layer=2, lid=0)

            def query_gid(self, port, index):
                return GID("fe80:0000:0000:0000:0000:0000:0000:0001" if index == 0 else
                           "0000:0000:0000:0000:0000:0000:0000:0000")

            def query_gid_type(self, port, index):
                return 1

            def close(self):
                pass
    """,
    "pd.py": """
        class PD:
            def __init__(self, ctx):
                pass

            def close(self):
                pass
    """,
    "mr.py": """
        class MR:
            buf, lkey = 0, 0

            def __init__(self, pd, length, access):
                pass

            def close(self):
                pass
    """,
    "cq.py": """
        class CQ:
            def __init__(self, *args):
                pass

            def close(self):
                pass
    """,
    "qp.py": """
        from pyverbs.pyverbs_error import PyverbsRDMAError

        class QPCap:
            def __init__(self, **kw):
                pass

        class QPInitAttr:
            def __init__(self, qp_type, **kw):
                self.qp_type = qp_type

        class QP:
            count = 0

            def __init__(self, pd, init):
                if init.qp_type not in (2, 4):  # RC and UD only
                    raise PyverbsRDMAError("Failed to create QP", 95)
                QP.count += 1
                self.qp_num = QP.count

            def close(self):
                pass
    """,
    "addr.py": "",
    "wr.py": "",
}


def _project(pytester: pytest.Pytester, suite: str = SUITE_TEST, conftest: str = "") -> None:
    pytester.makeconftest('pytest_plugins = ["fixtures.plugin"]\n' + textwrap.dedent(conftest))
    (pytester.path / "suites").mkdir()
    (pytester.path / "suites" / "test_suite.py").write_text(textwrap.dedent(suite))
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_host.py").write_text(HOST_TEST)


def _pyverbs(pytester: pytest.Pytester, fake: bool) -> Path:
    pkg = pytester.path / "libs" / "pyverbs"
    pkg.mkdir(parents=True)
    files = FAKE if fake else {"__init__.py": BLOCKED}
    for name, text in files.items():
        (pkg / name).write_text(textwrap.dedent(text))
    return pkg.parent


def _run(
    pytester: pytest.Pytester,
    *args: str,
    fake: bool = False,
    port_state: int = 4,
    out_dir: Path | None = None,
    suite: str = SUITE_TEST,
    conftest: str = "",
) -> pytest.RunResult:
    """pytest in a subprocess on the tiny project; records go to out_dir (default
    <project>/out, never the worktree's reports/out)."""
    _project(pytester, suite, conftest)
    libs = _pyverbs(pytester, fake)
    pytester._monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(libs), str(ROOT)]))
    pytester._monkeypatch.setenv("FAKE_PORT_STATE", str(port_state))
    pytester._monkeypatch.setenv("QPCONFORM_OUT_DIR", str(out_dir or pytester.path / "out"))
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def _usage_error(result: pytest.RunResult, message: str) -> None:
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    output = result.stdout.str() + result.stderr.str()
    assert message in output
    assert "Traceback" not in output


def test_suites_without_device_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "suites")
    _usage_error(
        result,
        "qpconform: --device is required to run the conformance suites "
        "(available: pyverbs not installed)",
    )


def test_suites_without_device_lists_devices(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "suites", fake=True)
    _usage_error(
        result, "--device is required to run the conformance suites (available: rxe0, rxe1)"
    )


def test_selected_suite_file_without_device(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "suites/test_suite.py::test_needs_device", fake=True)
    _usage_error(result, "--device is required")


def test_missing_pyverbs(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "suites", "--device", "rxe9")
    _usage_error(result, "pyverbs is not installed: apt-get install python3-pyverbs")


def test_unknown_device(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "suites", "--device", "rxe9", fake=True)
    _usage_error(result, "unknown RDMA device 'rxe9' (available: rxe0, rxe1)")


def test_port_not_active(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "suites", "--device", "rxe0", fake=True, port_state=1)
    _usage_error(result, "rxe0 has no ACTIVE port (ports: 1 (DOWN))")


def test_explicit_port_missing(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "suites", "--device", "rxe0", "--port", "2", fake=True)
    _usage_error(result, "rxe0 has no port 2 (ports: 1 (ACTIVE))")


def test_bad_gid_index(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "suites", "--device", "rxe0", "--gid-index", "1", fake=True)
    _usage_error(result, "GID index 1 of port 1 is not usable (usable: 0 (fe80:")


def test_missing_quirks_file(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "suites", "--device", "rxe0", "--quirks", "nope.toml", fake=True)
    _usage_error(result, "--quirks file 'nope.toml' does not exist")


def test_malformed_quirks_file_is_one_usage_error(pytester: pytest.Pytester) -> None:
    (pytester.path / "bad.toml").write_text(
        '[[quirk]]\nid = "x"\nrule = ""\nreason = "r"\nevidence = ["e"]\n'
    )
    result = _run(pytester, "suites", "--device", "rxe0", "--quirks", "bad.toml", fake=True)
    _usage_error(result, "bad quirk profile: bad.toml quirk #1: rule is required")
    assert "ERROR" not in result.stdout.str()


def test_a_budget_on_the_derandomized_profile_is_a_usage_error(
    pytester: pytest.Pytester,
) -> None:
    result = _run(pytester, "suites", "--device", "rxe0", "--hypothesis-profile", "ci",
                  "--stateful-budget", "30", fake=True)
    _usage_error(result, "--stateful-budget needs a random Hypothesis profile; 'ci' is")


def test_a_negative_budget_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "suites", "--device", "rxe0", "--stateful-budget", "-5", fake=True)
    _usage_error(result, "--stateful-budget -5: give seconds >= 0")


def test_quirks_strict_fails_only_on_stale_quirks() -> None:
    from fixtures.verdict import strict_failure

    stale = {"stale_quirks": [{"id": "rxe.a", "detail": ""}]}
    assert strict_failure(stale, strict=False) is None
    assert strict_failure({"stale_quirks": []}, strict=True) is None
    assert "1 stale quirk(s) fail the run: rxe.a" in str(strict_failure(stale, strict=True))


@pytest.mark.parametrize("in_the_way", ["a file", "a file above it"])
def test_an_out_dir_that_cannot_take_files_is_one_usage_error(
    pytester: pytest.Pytester, in_the_way: str
) -> None:
    """Found before any test (a run whose report would be lost must not start). A file in
    the way fails for root too, where a 0o500 folder would not (test_report_writes
    covers EACCES itself)."""
    (pytester.path / "taken").write_text("")
    out = pytester.path / "taken" if in_the_way == "a file" else pytester.path / "taken" / "out"
    result = _run(pytester, "suites", "--device", "rxe0", fake=True, out_dir=out)
    _usage_error(
        result,
        f"qpconform: the report folder {out} cannot take the run's records: it is not a folder "
        "(a file is in the way); make it a writable folder or set QPCONFORM_OUT_DIR to one",
    )
    assert "passed" not in result.stdout.str() and "ERROR" in result.stderr.str()


RECORDING_SUITE = """
from qpconform.engine.records import Divergence
from reports.divergence import OUT_DIR, DivergenceStore

def test_records_a_divergence(run_recorder):
    DivergenceStore(OUT_DIR / "divergences.json").add(Divergence(
        qp_type="RC", state="INIT", verb="modify", attrs={}, mask=["STATE"], expected="refused",
        observed="accepted", rule_id="r.x", rule_summary="s", source="src", device={},
        steps=[]))

def test_later(run_recorder):
    pass
"""

#: conftest text: os.fsync and os.pwrite fail with ENOSPC on files whose name has NAME in it.
FULL_DISK = """
import errno, os

def _full(real):
    def call(fd, *args):
        if {name!r} in os.readlink(f"/proc/self/fd/{{fd}}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, *args)
    return call

os.fsync, os.pwrite = _full(os.fsync), _full(os.pwrite)
"""


def _one_clear_error(result: pytest.RunResult, path: Path, times: int = 1) -> None:
    output = result.stdout.str() + result.stderr.str()
    assert (
        f"qpconform: ERROR: cannot write {path}: No space left on device (ENOSPC); free space "
        "on that disk, or write the reports elsewhere (QPCONFORM_OUT_DIR=DIR" in output
    ), output
    assert "the run's report is missing or incomplete: the run fails" in output
    assert "Traceback" not in output and "INTERNALERROR" not in output
    assert "raise write_error" not in output  # no traceback in pytest's format either
    # pytest's short summary ("FAILED test - message") cuts the message at the terminal's width,
    # so whether it repeats the path depends on COLUMNS: left out of the count
    said = [line for line in output.splitlines() if not line.startswith("FAILED ")]
    assert sum(line.count(f"cannot write {path}") for line in said) == times


def test_a_full_disk_at_the_report_keeps_the_previous_one(pytester: pytest.Pytester) -> None:
    out = pytester.path / "out"
    out.mkdir()
    (out / "report.json").write_text("previous\n")
    result = _run(pytester, "suites", "--device", "rxe0", fake=True, suite=RECORDING_SUITE,
                  conftest=FULL_DISK.format(name="report.json"))
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.assert_outcomes(passed=2)
    _one_clear_error(result, out / "report.json")
    assert (out / "report.json").read_text() == "previous\n"
    assert not (out / "report.html").exists() and not list(out.glob("*.tmp"))


@pytest.mark.slow  # a whole run (or several) in a subprocess: CI's full set
def test_a_worker_that_cannot_write_its_record_fails_the_run(pytester: pytest.Pytester) -> None:
    """Under xdist the worker's error reaches the controller, which writes no report
    without that worker's records (one worker: the handoff is the same, the test faster)."""
    out = pytester.path / "out"
    result = _run(pytester, "suites", "--device", "rxe0", "-n", "1", fake=True,
                  suite=RECORDING_SUITE, conftest=FULL_DISK.format(name="run-gw"))
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    output = result.stdout.str()
    assert "qpconform: ERROR: cannot write " in output and "run-gw" in output, output
    assert "No space left on device (ENOSPC)" in output and "Traceback" not in output
    assert not (out / "report.json").exists() and not list(out.glob("*.tmp"))


def test_a_full_disk_mid_run_stops_the_run(pytester: pytest.Pytester) -> None:
    out = pytester.path / "out"
    result = _run(pytester, "suites", "--device", "rxe0", fake=True, suite=RECORDING_SUITE,
                  conftest=FULL_DISK.format(name="divergences.json"))
    result.assert_outcomes(failed=1)  # test_later never runs
    assert result.ret != pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [f"*Interrupted: qpconform: cannot write {out / 'divergences.json'}: No space left on "
         "device (ENOSPC)*the run stops here*"]
    )
    # the test's failure, the summary's error line and pytest's "Interrupted" line
    _one_clear_error(result, out / "divergences.json", times=3)


def test_a_device_run_starts_from_fresh_records(tmp_path: Path) -> None:
    from fixtures.verdict import start_fresh

    for name in ("run-main.json", "run-gw0.json", "divergences.json", "divergences.json.lock",
                 "report.html", "reproducers/abc.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("old")
    start_fresh(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]


def test_host_tests_need_no_device(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "tests")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1)


@pytest.mark.slow  # a whole run (or several) in a subprocess: CI's full set
def test_host_tests_leave_a_device_runs_reports_alone(pytester: pytest.Pytester) -> None:
    """A session without --device (the self-tests) neither rebuilds nor prints the report
    of the device run whose records sit in the out dir."""
    out = pytester.path / "out"
    first = _run(pytester, "suites", "--device", "rxe0", fake=True, out_dir=out,
                 suite=RECORDING_SUITE)
    assert "qpconform verdict" in first.stdout.str()
    report = out / "report.json"
    before = sorted(p.name for p in out.iterdir())
    report.write_text("{}")  # anything the host session rewrote would show
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "tests")  # same env
    assert result.ret == pytest.ExitCode.OK
    assert report.read_text() == "{}" and "report.json" in before
    assert "qpconform verdict" not in result.stdout.str()


def test_device_run_reports_untested_qp_types(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "suites", "--device", "rxe0", fake=True)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*qpconform: rxe0 (rdma_rxe) port 1 gid_index 0*",
            "*QP types not tested*",
            "RAW_PACKET: RAW_PACKET unsupported by rxe0: create -> EOPNOTSUPP*",
        ]
    )


def test_requested_unsupported_type_only_skips(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "suites", "--device", "rxe0", "--qp-type", "UC", "-rs", fake=True)
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*no selected QP type is supported: UC unsupported by rxe0*"])


SEED_TEST = """
import json
import os
from pathlib import Path


def test_seed(batch_seeds):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    Path(os.environ["SEED_OUT"], worker).write_text(str(next(batch_seeds)))
"""


def _batch_seeds(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, set[str]]:
    """Run SEED_TEST; the first batch seed each process used."""
    out = pytester.path / "seed-out"
    out.mkdir()
    pytester._monkeypatch.setenv("SEED_OUT", str(out))
    result = _run(pytester, "suites", "--device", "rxe0", *args, fake=True, suite=SEED_TEST)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
    return result, {p.read_text() for p in out.iterdir()}


def test_the_run_seed_is_shown_and_replayed(pytester: pytest.Pytester) -> None:
    from fixtures import seeds

    result, used = _batch_seeds(pytester, "--hypothesis-seed=31")
    result.stdout.fnmatch_lines([
        "qpconform: seed 31 (replay: --hypothesis-seed=31 --hypothesis-profile=default plus "
        "the --stateful-batches printed at the end of the run)",
    ])
    assert used == {str(seeds.derive(31, "suites/test_suite.py::test_seed", 0))}


def test_the_ci_profile_is_derandomized_without_a_seed(pytester: pytest.Pytester) -> None:
    result, used = _batch_seeds(pytester, "--hypothesis-profile=ci")
    result.stdout.fnmatch_lines(["qpconform: seed derandomized (profile ci*"])
    assert used == {"None"}


@pytest.mark.slow  # a whole run (or several) in a subprocess: CI's full set
def test_xdist_workers_take_the_controllers_random_seed(pytester: pytest.Pytester) -> None:
    import re

    from fixtures import seeds

    result, used = _batch_seeds(pytester, "-n", "2")
    shown = re.search(r"qpconform: seed (\d+) \(replay", result.stdout.str())
    assert shown, result.stdout.str()
    assert used == {str(seeds.derive(int(shown.group(1)), "suites/test_suite.py::test_seed", 0))}


@pytest.mark.parametrize("ci_variable", [("CI", "true"), ("GITHUB_ACTIONS", "true")])
def test_the_default_profile_stays_random_under_a_ci_variable(
    pytester: pytest.Pytester, ci_variable: tuple[str, str]
) -> None:
    """Hypothesis derandomizes its own default when it sees a CI variable; ours stays random."""
    pytester._monkeypatch.setenv(*ci_variable)
    result, used = _batch_seeds(pytester)
    result.stdout.fnmatch_lines(["qpconform: seed * (replay: --hypothesis-seed=*)"])
    assert used != {"None"}


UNFINISHED_SUITE = """
import time

from hypothesis import given, settings, strategies as st

def test_checks(run_recorder):
    run_recorder.step("RC", "modify", "RESET", "INIT", ["r.x"], "match")

def test_hangs(run_recorder):
    time.sleep({sleep})


@settings(max_examples=1000, deadline=None, database=None)
@given(st.integers())
def test_hypothesis_runs_past_its_bound(run_recorder, value):
    time.sleep(0.05)
"""


@pytest.mark.parametrize("how", ["timeout", "error"])
def test_a_test_that_did_not_finish_makes_the_verdict_incomplete(
    pytester: pytest.Pytester, how: str
) -> None:
    """A timed-out or crashed suite test checked nothing: never "conformant"."""
    suite = UNFINISHED_SUITE.format(sleep=30 if how == "timeout" else "'not a number'")
    present = "import fixtures.guards\nfixtures.guards.device_present = lambda name: True\n"
    result = _run(pytester, "suites", "--device", "rxe0", "--timeout=2", fake=True, suite=suite,
                  conftest=present)  # the fake rxe0 is not in sysfs: not a lost device here
    result.assert_outcomes(passed=1, failed=2)
    report = json.loads((pytester.path / "out" / "report.json").read_text())
    assert report["verdict"]["code"] == "incomplete", report["verdict"]
    # a timeout inside Hypothesis is a timeout, not a failing example replayed as "Flaky"
    failures = result.stdout.str().split("_ test_hypothesis_runs_past_its_bound _")[1]
    assert "SuiteTestTimedOut: Timeout (>2.0s)" in failures
    assert "Flaky" not in result.stdout.str()
    assert "suites/test_suite.py::test_hangs (call)" in report["verdict"]["aborted"]
    assert ("Timeout" if how == "timeout" else "TypeError") in report["verdict"]["aborted"]
    result.stdout.fnmatch_lines(["*INCOMPLETE*test_hangs*"])


STATEFUL_PAST_ITS_BOUND = """
import signal

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

EXAMPLES = []


class Few(RuleBasedStateMachine):
    \"\"\"Two choices a step: after a few examples every first step is one Hypothesis has
    seen go on, so an example cut short there stops where an earlier one drew more.\"\"\"

    def __init__(self):
        super().__init__()
        EXAMPLES.append(self)
        self.steps = 0

    @rule(value=st.sampled_from([1, 2]))
    def step(self, value):
        self.steps += 1
        if len(EXAMPLES) > 30 and self.steps == 1:  # the bound runs out here, as SIGALRM would
            signal.getsignal(signal.SIGALRM)(signal.SIGALRM, None)


def test_stateful_runs_past_its_bound(run_recorder):
    Few.TestCase.settings = settings(max_examples=1000, deadline=None, database=None,
                                     stateful_step_count=5)
    Few.TestCase().runTest()

def test_after(run_recorder):
    run_recorder.step("RC", "modify", "RESET", "INIT", ["r.x"], "match")
"""


def test_a_stateful_test_past_its_bound_is_timed_out_not_flaky(pytester: pytest.Pytester) -> None:
    """The time bound inside a stateful test, in a step whose draws an earlier example went
    past: a timeout, never FlakyStrategyDefinition (seen in CI), and the run goes on."""
    present = "import fixtures.guards\nfixtures.guards.device_present = lambda name: True\n"
    result = _run(pytester, "suites", "--device", "rxe0", "--timeout=60", fake=True,
                  suite=STATEFUL_PAST_ITS_BOUND, conftest=present)
    result.assert_outcomes(passed=1, failed=1)
    assert "SuiteTestTimedOut: Timeout (>60.0s)" in result.stdout.str()
    assert "Flaky" not in result.stdout.str()


SWALLOWED_STOP = """
import gc
import signal

import pytest


def _stop_inside_a_gc_callback(signum):
    \"\"\"Run the signal's handler where the interpreter would: inside a gc callback, whose
    exception Python prints as "Exception ignored" and drops.\"\"\"
    handler = signal.getsignal(signum)

    def callback(phase, info):
        gc.callbacks.remove(callback)
        handler(signum, None)

    gc.callbacks.append(callback)
    gc.collect()


def test_stopped(run_recorder):
    {arm}
    _stop_inside_a_gc_callback(signal.{signal})
    run_recorder.step("RC", "modify", "RESET", "INIT", ["r.x"], "match")

def test_after(run_recorder):
    run_recorder.step("RC", "modify", "RESET", "INIT", ["r.x"], "match")
"""


@pytest.mark.parametrize("how", ["interrupt", "timeout"])
def test_a_stop_a_gc_callback_swallowed_is_still_delivered(
    pytester: pytest.Pytester, how: str
) -> None:
    """Ctrl-C (or the time bound) that lands in a gc callback is not lost (seen in CI: the
    interrupted run passed): Ctrl-C ends the run, the bound fails its test."""
    arm = "signal.signal(signal.SIGALRM, signal.getsignal(signal.SIGALRM))"
    suite = SWALLOWED_STOP.format(arm=arm, signal="SIGINT" if how == "interrupt" else "SIGALRM")
    present = "import fixtures.guards\nfixtures.guards.device_present = lambda name: True\n"
    # Ctrl-C live as in a terminal, even when this run's parent ignores SIGINT (a background
    # job does: Python then keeps SIG_IGN, and qpconform leaves an ignored SIGINT alone)
    present += "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
    result = _run(pytester, "suites", "--device", "rxe0", "--timeout=60", fake=True, suite=suite,
                  conftest=present)
    report = json.loads((pytester.path / "out" / "report.json").read_text())
    assert report["verdict"]["code"] == "incomplete", report["verdict"]
    if how == "interrupt":
        assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
        assert "test_after" not in result.stdout.str()
    else:
        result.assert_outcomes(passed=1, failed=1)
        assert "SuiteTestTimedOut: Timeout (>60.0s)" in result.stdout.str()


def test_a_test_that_failed_on_a_divergence_did_finish(pytester: pytest.Pytester) -> None:
    """A sweep that fails with "N of M cases diverged" (pytest.fail) or an assertion ran to
    its end: its verdict comes from its divergences, not "incomplete"."""
    suite = """
import pytest

def test_sweep(run_recorder):
    run_recorder.step("RC", "modify", "RESET", "INIT", ["r.x"], "match")
    pytest.fail("1 of 1 cases diverged from the model")

def test_assertion(run_recorder):
    assert 1 == 2
"""
    present = "import fixtures.guards\nfixtures.guards.device_present = lambda name: True\n"
    result = _run(pytester, "suites", "--device", "rxe0", fake=True, suite=suite,
                  conftest=present)
    result.assert_outcomes(failed=2)
    report = json.loads((pytester.path / "out" / "report.json").read_text())
    assert report["verdict"]["code"] != "incomplete", report["verdict"]
    assert not report["verdict"]["aborted"]


@pytest.mark.slow  # a whole run (or several) in a subprocess: CI's full set
def test_every_record_of_a_run_carries_its_run_id(pytester: pytest.Pytester) -> None:
    """The controller's run id reaches each xdist worker's record; the report shows it."""
    result = _run(pytester, "suites", "--device", "rxe0", "-n", "2", fake=True,
                  suite=RECORDING_SUITE.replace("r.x", "linux.transition.RC.RESET->INIT"))
    out = pytester.path / "out"
    ids = {json.loads(p.read_text())["settings"]["run_id"] for p in out.glob("run-gw*.json")}
    assert len(ids) == 1 and ids != {""}, (ids, result.stdout.str())
    report = json.loads((out / "report.json").read_text())
    assert report["settings"]["run_id"] in ids
