"""Rendering the Allure report never breaks the run: without Allure, or when it fails, the
report and the terminal say why (reports/allure_render.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from reports import allure_labels
from reports import cli as report_cli
from reports.allure_render import ALLURE_VERSION, GROUP_BY, config_text, render
from tests.test_reports_run import synthetic_run


def _results(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "0-result.json").write_text(json.dumps({"name": "t", "status": "failed"}))
    return folder


def _fake_allure(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "allure"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(0o755)
    return script


def test_the_bootstrap_installs_the_version_the_renderer_names() -> None:
    bootstrap = (Path(__file__).resolve().parents[1] / "scripts" / "bootstrap.sh").read_text()
    assert f"QPCONFORM_ALLURE_VERSION={ALLURE_VERSION}\n" in bootstrap


def test_the_config_makes_one_page_grouped_by_feature_and_rule() -> None:
    options = json.loads(config_text("q"))["plugins"]["awesome"]["options"]
    assert options["singleFile"] and options["groupBy"] == list(GROUP_BY) == ["feature", "rule"]


def test_without_allure_the_report_says_why_and_the_status_stays_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("QPCONFORM_ALLURE", str(tmp_path / "no-such-allure"))
    out = tmp_path / "out"
    synthetic_run(out)
    results = _results(out / "allure-results")
    status = report_cli.main(["--input", str(out), "--output", str(out), "--allure", str(results)])
    printed = capsys.readouterr().out
    assert status == 0
    assert "Allure report NOT rendered: Allure 3.18.0 is not installed" in printed
    assert "npm could not reach its registry" in printed
    report = json.loads((out / "report.json").read_text())
    assert report["allure"]["rendered"] is False
    page = (out / "report.html").read_text()
    assert "Allure report not rendered:" in page and "allure-report/index.html" not in page
    assert not (out / "allure-report").exists()


def test_a_failing_allure_is_reported_not_raised(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QPCONFORM_ALLURE", str(_fake_allure(tmp_path, "echo broken >&2; exit 3")))
    outcome = render(_results(tmp_path / "res"), tmp_path / "out")
    assert not outcome.rendered
    assert outcome.detail == "`allure generate` failed (exit 3): broken"


def test_a_slow_allure_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QPCONFORM_ALLURE", str(_fake_allure(tmp_path, "exec sleep 30")))
    outcome = render(_results(tmp_path / "res"), tmp_path / "out", timeout=0.5)
    assert not outcome.rendered and "took over" in outcome.detail


def test_a_render_replaces_the_earlier_page(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake writes index.html where --output says; the old page's files go."""
    fake = _fake_allure(tmp_path, 'while [ "$1" != --output ]; do shift; done\n'
                                  'mkdir -p "$2" && echo new > "$2/index.html"')
    monkeypatch.setenv("QPCONFORM_ALLURE", str(fake))
    old = tmp_path / "out" / "allure-report"
    old.mkdir(parents=True)
    (old / "stale.js").write_text("old")
    outcome = render(_results(tmp_path / "res"), tmp_path / "out")
    assert outcome.rendered and outcome.href == "allure-report/index.html"
    assert sorted(os.listdir(old)) == ["index.html"]


def test_no_results_is_said(tmp_path: Path) -> None:
    outcome = render(tmp_path / "none", tmp_path)
    assert not outcome.rendered and "no allure-pytest results" in outcome.detail


def test_a_divergence_gives_its_six_labels() -> None:
    record = {"rule_id": "r", "rule_kind": "must", "rule_layer": "core", "qp_type": "RC",
              "state": "INIT", "known_quirk": None}
    assert allure_labels.divergence_labels(record) == [
        ("rule", "r"), ("kind", "must"), ("layer", "core"), ("qp_type", "RC"),
        ("state", "INIT"), ("quirk", allure_labels.UNKNOWN_QUIRK)]
    known = allure_labels.divergence_labels({**record, "known_quirk": "rxe.q"})
    assert known[-1] == ("quirk", "rxe.q")
