"""`qpconform report --same`: runs of one profile must give one verdict and one set of
divergences; any difference is named and fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reports.cli import main
from reports.determinism import compare_runs, signature


def _run(folder: Path, code: str, records: list[dict]) -> Path:
    folder.mkdir(parents=True)
    (folder / "report.json").write_text(json.dumps({"verdict": {"code": code}}))
    (folder / "divergences.json").write_text(json.dumps(records))
    return folder


UNKNOWN = {"id": "abc123", "rule_id": "ibta.err.flush", "qp_type": "RC", "verb": "modify",
           "state": "ERR"}
KNOWN = {"id": "def456", "rule_id": "attr.readback", "qp_type": "UD", "verb": "query",
         "state": "RTS", "known_quirk": "rxe.qkey"}


def test_identical_runs_are_the_same(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    runs = [_run(tmp_path / f"r{i}", "known", [KNOWN, {**KNOWN, "id": f"other{i}"}])
            for i in range(3)]
    same, text = compare_runs(runs)
    assert same and "SAME: 3 runs" in text
    assert main(["--same", *map(str, runs)]) == 0
    assert "1 distinct known" in capsys.readouterr().out  # known ones compared by key


def test_a_new_unknown_divergence_or_verdict_is_named(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", "known", [KNOWN])
    b = _run(tmp_path / "b", "not-conformant", [KNOWN, UNKNOWN])
    same, text = compare_runs([a, b])
    assert not same
    assert "verdict differs from the first run: known" in text
    assert "unknown only here: abc123 / ibta.err.flush" in text
    assert main(["--same", str(a), str(b)]) == 1


def test_a_quirk_no_longer_matched_is_named(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", "known", [KNOWN])
    b = _run(tmp_path / "b", "known", [])
    same, text = compare_runs([a, b])
    assert not same and "quirks only in the first run: rxe.qkey / attr.readback" in text


def test_a_quirk_matched_at_another_step_is_shown_but_the_same(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", "known", [KNOWN])
    b = _run(tmp_path / "b", "known", [KNOWN, {**KNOWN, "id": "x", "verb": "modify"}])
    same, text = compare_runs([a, b])
    assert same, text
    assert "known only here (where a quirk matched: informational): UD | modify" in text


def test_a_folder_without_a_report_is_a_clear_error(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no readable qpconform report"):
        signature(tmp_path / "empty")
    assert main(["--same", str(tmp_path / "empty"), str(tmp_path / "empty")]) == 2
    assert "no readable qpconform report" in capsys.readouterr().err
    with pytest.raises(ValueError, match="at least two"):
        compare_runs([tmp_path])
