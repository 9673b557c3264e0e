"""The fleet matrix (`qpconform report --matrix`): runs of several devices and kernels merged
into one table of behaviour x run, and the inputs it must not merge named.

The runs are tests/test_reports_run.py's synthetic two-worker runs (the real model's rule
ids and states), each given another identity, other characteristics and other features
the way a device run would record them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reports import cli as report_cli
from reports.fleet import build_matrix, column_label
from reports.fleet_page import write_matrix
from reports.html import write_reports
from reports.suite_version import suite_version
from tests.test_reports_run import IDENTITY, KNOWN_QUIRK, synthetic_run

SQD_RULE = "linux.transition.RC.RTS->SQD"
TIMEOUT_RULE = "attr.timeout.width"
VERSION = suite_version()


def _edit(folder: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Apply `change` to every run record of a run folder."""
    for path in sorted(folder.glob("run-*.json")):
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))


def _run(folder: Path, identity: dict[str, str], *, unknown: bool,
         choices: dict[str, dict[str, int]], version: str | None = VERSION) -> Path:
    """A synthetic run recorded on another device, choosing `choices` (in gw0)."""
    synthetic_run(folder, unknown=unknown)

    def change(data: dict[str, Any]) -> None:
        data["identity"] = {**IDENTITY, **identity}
        if version is not None:
            data["settings"]["suite_version"] = version
        if data["workers"] == ["gw0"]:
            data["choices"] = choices

    _edit(folder, change)
    return folder


@pytest.fixture
def fleet(tmp_path: Path) -> list[Path]:
    """rxe on 6.1 (an unknown divergence), rxe on 6.12 (none), an mlx5 without atomics
    (given as its report.json, the others as folders of run records)."""
    old = _run(tmp_path / "rxe-6.1", {}, unknown=True,
               choices={TIMEOUT_RULE: {"refused (EINVAL)": 2}})
    new = _run(tmp_path / "rxe-6.12", {"kernel": "6.12.9-amd64", "rdma_core": "52.0"},
               unknown=False, choices={TIMEOUT_RULE: {"accepted": 1}})
    nic = _run(tmp_path / "mlx5", {"device": "mlx5_0", "driver": "mlx5_ib",
                                   "fw_ver": "22.36.1010", "atomic_cap": "none"},
               unknown=False, choices={})
    _, _, report_json = write_reports([nic], nic)
    return [old, new, report_json]


def test_three_runs_merge_into_one_table_of_behaviour_by_run(fleet: list[Path]) -> None:
    matrix = build_matrix(fleet)
    assert matrix["kind"] == "qpconform-matrix" and matrix["excluded"] == []
    assert matrix["suite_version"] == VERSION
    labels = [c["label"] for c in matrix["columns"]]
    assert labels == [
        "rxe0 · rdma_rxe · 6.1.0-28-amd64 · rdma-core 44.0 · fw 0.0.0",
        "rxe0 · rdma_rxe · 6.12.9-amd64 · rdma-core 52.0 · fw 0.0.0",
        "mlx5_0 · mlx5_ib · 6.1.0-28-amd64 · rdma-core 44.0 · fw 22.36.1010",
    ]
    assert [c["verdict_code"] for c in matrix["columns"]] == [
        "not-conformant", "conformant-with-known-divergences",
        "conformant-with-known-divergences"]
    rows = {(r["section"], r["id"]): r["cells"] for r in matrix["rows"]}

    def texts(section: str, behaviour: str) -> list[str]:
        return [rows[(section, behaviour)][c]["text"] for c in ("run1", "run2", "run3")]

    # the divergence: only on 6.1; the others exercised the rule and it held
    assert texts("divergences", SQD_RULE) == ["✗ 1", "ok", "ok"]
    assert "RC modify in RTS" in rows[("divergences", SQD_RULE)]["run1"]["detail"]
    assert [r["id"] for r in matrix["rows"] if r["section"] == "divergences"] == [SQD_RULE]
    # quirks: matched everywhere, stale everywhere, not applicable to the kernel
    assert texts("quirks", KNOWN_QUIRK) == ["1 matched"] * 3
    assert texts("quirks", "rxe-sqd-no-drained-event") == ["stale"] * 3
    assert texts("quirks", "rxe.only_new_kernels") == ["not applicable"] * 3
    # characteristics: each device's choice under the may rule, none where not exercised
    assert texts("characteristics", TIMEOUT_RULE) == ["refused (EINVAL) 2", "accepted 1", ""]
    assert rows[("characteristics", TIMEOUT_RULE)]["run1"]["status"] == "choice"
    # features: the NIC says it has no atomics
    assert texts("features", "ATOMICS") == ["has", "has", "lacks"]
    assert texts("features", "SQD") == ["has"] * 3


def test_runs_that_are_not_comparable_are_named_not_merged(
    fleet: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    newer = _run(tmp_path / "newer-schema", {}, unknown=False, choices={})
    _edit(newer, lambda data: data.update(schema=3))
    other = _run(tmp_path / "other-suite", {"kernel": "6.15.0"}, unknown=False, choices={},
                 version="0.0.9+rules.0123456789")
    stray = tmp_path / "notes.json"
    stray.write_text('{"kind": "something-else"}')
    out = tmp_path / "matrix"
    status = report_cli.main(["--matrix", *map(str, fleet), str(newer / "run-gw0.json"),
                              str(other), str(stray), "--output", str(out)])
    printed = capsys.readouterr().out
    assert status == 0, printed
    matrix = json.loads((out / "matrix.json").read_text())
    assert len(matrix["columns"]) == 3
    reasons = {Path(e["path"]).name: e["reason"] for e in matrix["excluded"]}
    assert set(reasons) == {"run-gw0.json", "other-suite", "notes.json"}
    assert "run record schema 3, this qpconform reads 2" in reasons["run-gw0.json"]
    assert (f"suite version 0.0.9+rules.0123456789, the matrix's (from {fleet[0]}) is "
            f"{VERSION}") in reasons["other-suite"]
    assert "neither a qpconform report nor a run record" in reasons["notes.json"]
    for name in reasons:
        assert any(line.startswith("EXCLUDED (not comparable): ") and name in line
                   for line in printed.splitlines()), printed
    page = (out / "matrix.html").read_text()
    assert "Excluded runs, not comparable (3)" in page
    assert "other-suite" in page and "0.0.9+rules.0123456789" in page

    # nothing comparable at all: an error, not an empty table
    assert report_cli.main(["--matrix", str(stray), "--output", str(out)]) == 2
    assert "no comparable run among the inputs" in capsys.readouterr().err


def test_records_from_before_the_suite_version_compare_with_each_other(tmp_path: Path) -> None:
    """Run records written before suite_version was recorded (every real run until then)
    merge with each other, and not with a run that records one."""
    a = _run(tmp_path / "a", {}, unknown=True, choices={}, version=None)
    b = _run(tmp_path / "b", {"kernel": "6.12.9-amd64"}, unknown=False, choices={}, version=None)
    c = _run(tmp_path / "c", {"kernel": "6.13"}, unknown=False, choices={})
    matrix = build_matrix([a, b, c])
    assert [col["path"] for col in matrix["columns"]] == [str(a), str(b)]
    assert matrix["suite_version"] is None
    assert "suite version " + VERSION in matrix["excluded"][0]["reason"]
    assert "is not recorded" in matrix["excluded"][0]["reason"]


def test_a_missing_input_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        write_matrix([tmp_path / "absent.json"], tmp_path)


def test_column_label_marks_unknown_fields() -> None:
    assert column_label({"device": "bnxt_re0", "kernel": "6.8"}) == (
        "bnxt_re0 · ? · 6.8 · rdma-core ? · fw ?")
