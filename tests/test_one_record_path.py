"""One record path: a divergence is written once, to the run's store, and every report reads it.

A tiny project, run as on a device (the fake pyverbs of tests/test_plugin_errors.py),
has one test that writes one record to the run's store (reports/divergence.py) and then
raises a copy that differs from it: observed "as raised" instead of "as stored", and no
reproducer. Every report of the run must show the stored record and never the raised
copy: report.json, report.html, the reproducer script, the JUnit properties, the TAP
diagnostics, the Allure attachment. A second writer is absent: the run recorder has no
way to take a record, and a run record that carries records is refused.
"""

from __future__ import annotations

import html
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from tap.parser import Parser

from qpconform.engine.judge import StepRecorder
from qpconform.engine.records import Divergence
from reports.divergence import DivergenceStore
from reports.run_record import RunRecorder, load_run, merge_runs
from tests.test_plugin_errors import _run
from tests.test_tap_output import FAKES

pytest_plugins = ["pytester"]

RULE = "linux.transition.invalid.INIT->RTS"

SUITE = f"""
from qpconform.engine.judge import DivergenceError
from qpconform.engine.records import Divergence
from reports.divergence import OUT_DIR, DivergenceStore
from reports.reproducer import write_reproducer


def test_one_divergence(device, run_recorder):
    record = Divergence(
        qp_type="RC", state="INIT", verb="modify", attrs={{"qp_state": 3}}, mask=["STATE"],
        expected="refused (EINVAL), state stays INIT", observed="as stored",
        rule_id="{RULE}", rule_summary="INIT->RTS is not a transition",
        source="linux drivers/infiniband/core/verbs.c: ib_modify_qp_is_ok", device={{}},
        steps=[{{"verb": "modify", "expected": "refused", "observed": "as stored"}}],
        test="suites/test_one.py::test_one_divergence", rule_kind="must", rule_layer="core",
    )
    stored = record.with_(reproducer=str(write_reproducer(record, OUT_DIR / "reproducers")))
    DivergenceStore().add(stored)
    raise DivergenceError(stored.with_(observed="as raised", reproducer=None))
"""


def _allure_divergence(results: Path) -> str:
    [result] = [json.loads(p.read_text()) for p in results.glob("*-result.json")]
    [source] = [a["source"] for a in result["attachments"] if a["name"] == "divergence"]
    assert any(a["name"].endswith(".py") for a in result["attachments"])  # the reproducer
    return (results / source).read_text()


def test_every_report_reads_the_one_store(pytester: pytest.Pytester) -> None:
    pytest.importorskip("allure_pytest")
    result = _run(pytester, "suites", "--device", "rxe0", "--quirks", "none",
                  "--junitxml", "junit.xml", "--alluredir", "allure",
                  "--tap-combined", "--tap-outdir", "tap",
                  fake=True, suite=SUITE, conftest=FAKES)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str() + result.stderr.str()
    out = pytester.path / "out"
    [stored] = DivergenceStore(out).records()  # written once
    assert stored.observed == "as stored" and stored.reproducer
    script = Path(stored.reproducer)

    report = json.loads((out / "report.json").read_text())
    [shown] = report["divergences"]
    assert (shown["rule_id"], shown["observed"]) == (RULE, "as stored")
    assert shown["reproducer_href"] == f"reproducers/{script.name}"
    page = html.unescape((out / "report.html").read_text())
    junit = html.unescape((pytester.path / "junit.xml").read_text())
    properties = {p.get("name"): p.get("value")
                  for p in ET.fromstring(junit).iter("property")}
    assert properties["rule"] == RULE and properties["reproducer"] == str(script)
    tap = (pytester.path / "tap" / "testresults.tap").read_text()
    assert [line.ok for line in Parser().parse_text(tap) if line.category == "test"] == [False]
    texts = {
        "report.html": page, "reproducer": script.read_text(), "TAP": tap, "JUnit": junit,
        "Allure": _allure_divergence(pytester.path / "allure"),
    }
    for name, text in texts.items():
        assert RULE in text and "as stored" in text, name
        assert "as raised" not in text, f"{name} shows the raised copy, not the stored record"


def _record() -> Divergence:
    return Divergence("RC", "INIT", "modify", {}, [], "refused", "accepted", RULE, "s", "src",
                      {}, [])


def test_the_run_recorder_takes_no_record(tmp_path: Path) -> None:
    """The recorder counts steps; no method takes a record (the engine's protocol neither)."""
    assert not hasattr(RunRecorder({}, {}), "divergence")
    assert "divergence" not in dir(StepRecorder)
    path = RunRecorder({}, {}).write(tmp_path / "run-main.json")
    assert "divergences" not in load_run(path)


def test_a_run_record_that_carries_records_is_refused(tmp_path: Path) -> None:
    path = RunRecorder({}, {}).write(tmp_path / "run-main.json")
    data = json.loads(path.read_text())
    data["divergences"] = [_record().to_dict()]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"one store, .*divergences\.json"):
        merge_runs([path])


def test_the_merged_run_reads_the_store_beside_the_records(tmp_path: Path) -> None:
    DivergenceStore(tmp_path / "divergences.json").add(_record())
    run = RunRecorder({}, {}).write(tmp_path / "run-main.json")
    assert [d["rule_id"] for d in merge_runs([run])["divergences"]] == [RULE]


def test_a_record_round_trips_through_json() -> None:
    record = _record().with_(known_quirk="q", context={"situation": "x"})
    assert Divergence.from_json(record.to_json()) == record
    with pytest.raises(AttributeError):
        record.observed = "changed"  # type: ignore[misc]
