"""The fleet matrix: many runs (devices, drivers, kernels, firmware) as one table of
behaviour x run.

Each run is read as the qualification report already reads it (reports/qualification.py:
a report.json, a run record, or a folder of one run's records), so a cell says what that
run's own report says. Rows are behaviours, in four sections:

- divergences: one row per rule some run diverged from (unknown divergences, and a "may"
  rule chosen both ways in one situation); in the other runs the cell says whether the
  rule held ("ok", exercised), was never exercised (and why), or is not in that run's model;
- quirks: one row per quirk id: how many divergences it matched, or stale, not provoked,
  unseen, not applicable to the run's kernel;
- characteristics: one row per "may" rule: what the device chose (either conforms);
- features: one row per optional feature (models/capabilities.py): has it, or lacks it.

Columns are runs, labelled by device identity (device, driver, kernel, rdma-core,
firmware). Runs are merged only when comparable with the first run given (the
reference): the same record schema and the same suite version (reports/suite_version.py;
records from before it was recorded compare with each other). Any other input is not
merged but listed, with its reason, as an excluded run on the page, in the JSON and on
the terminal: a fleet table must never silently mix rows that mean different things.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from reports.qualification import REPORT_KIND, REPORT_SCHEMA, build_report
from reports.run_record import KIND as RUN_KIND
from reports.run_record import SCHEMA as RUN_SCHEMA
from reports.run_record import find_runs, merge_runs

MATRIX_KIND = "qpconform-matrix"
MATRIX_SCHEMA = 1
SECTIONS = (
    ("divergences", "Divergences (unknown)"),
    ("quirks", "Quirks matched"),
    ("characteristics", "Characteristics (what the device chose under a may rule)"),
    ("features", "Optional features (capabilities)"),
)
#: The identity fields a column is labelled by, with their labels.
LABEL_FIELDS = (("device", ""), ("driver", ""), ("kernel", ""), ("rdma_core", "rdma-core "),
                ("fw_ver", "fw "))
#: What a report lists per quirk that matched nothing, and the cell's word for it.
QUIRK_STATES = (
    ("stale_quirks", "stale"),
    ("not_provoked_quirks", "not provoked"),
    ("unseen_quirks", "unseen"),
    ("not_applicable_quirks", "not applicable"),
)


class NotComparable(ValueError):
    """An input the matrix cannot merge (another kind, schema or suite version)."""


def read_run(path: str | os.PathLike[str]) -> dict[str, Any]:
    """One run as its qualification report: a report.json, a run record (run-*.json), or
    a folder of one run's records. NotComparable for anything else; OSError if absent."""
    p = Path(path)
    if p.is_dir():
        files = find_runs(p)
        if not files:
            raise NotComparable(f"{p}: no run records (run-*.json) in this folder")
        return build_report(merge_runs(files), base=p)
    try:
        data = json.loads(p.read_text())
    except ValueError as exc:
        raise NotComparable(f"{p}: not JSON ({exc})") from None
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind == REPORT_KIND:
        if data.get("schema") != REPORT_SCHEMA:
            raise NotComparable(
                f"{p}: report schema {data.get('schema')}, this qpconform reads {REPORT_SCHEMA}")
        return data
    if kind == RUN_KIND:
        if data.get("schema") != RUN_SCHEMA:
            raise NotComparable(
                f"{p}: run record schema {data.get('schema')}, this qpconform reads {RUN_SCHEMA}")
        return build_report(merge_runs([p]), base=p.parent)
    raise NotComparable(f"{p}: neither a qpconform report nor a run record (kind={kind!r})")


def suite_version_of(report: Mapping[str, Any]) -> str | None:
    """The suite version the run recorded (None: a record from before it was recorded)."""
    return report.get("settings", {}).get("suite_version")


def column_label(identity: Mapping[str, Any]) -> str:
    """ "rxe0 · rdma_rxe · 6.1.0-28-amd64 · rdma-core 44.0 · fw 0.0.0" (unknown fields: ?)."""
    return " · ".join(f"{prefix}{identity.get(key) or '?'}" for key, prefix in LABEL_FIELDS)


def _column(index: int, path: str, report: Mapping[str, Any]) -> dict[str, Any]:
    identity = report.get("identity", {})
    settings = report.get("settings", {})
    return {
        "id": f"run{index}",
        "path": path,
        "label": column_label(identity),
        "identity": {key: identity.get(key) for key, _ in LABEL_FIELDS},
        "driver_source": identity.get("driver_source") or identity.get("driver_origin"),
        "run_id": settings.get("run_id") or "",
        "started": report.get("run", {}).get("started"),
        "profile": settings.get("hypothesis_profile"),
        "variant": settings.get("variant"),
        "suite_version": suite_version_of(report),
        "verdict": report["verdict"]["text"],
        "verdict_code": report["verdict"]["code"],
        "steps": report["verdict"]["steps"],
    }


# ------------------------------------------------------------------------------ the cells
def _cell(text: str, status: str, detail: str = "") -> dict[str, str]:
    return {"text": text, "status": status, "detail": detail}


def _divergence_cells(report: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """Per rule id: the run's unknown divergences on it (occurrences, where)."""
    found: dict[str, list[Mapping[str, Any]]] = {}
    for d in report.get("divergences", []):
        found.setdefault(str(d.get("rule_id")), []).append(d)
    cells = {}
    for rule_id, entries in found.items():
        count = sum(int(e.get("occurrences", 1)) for e in entries)
        where = "; ".join(
            f"{e.get('qp_type')} {e.get('verb')} in {e.get('state')}: expected "
            f"{e.get('expected')}, observed {e.get('observed')}" for e in entries)
        cells[rule_id] = _cell(f"✗ {count}", "divergence", where)
    for row in report.get("inconsistent_choices", []):
        cells.setdefault(str(row["rule"]), _cell("✗ both ways", "divergence", row["situation"]))
    return cells


def _rule_held(report: Mapping[str, Any], rule_id: str) -> dict[str, str]:
    """A divergence row's cell for a run without that divergence."""
    for rule in report.get("coverage", {}).get("rules", []):
        if rule["id"] == rule_id:
            if rule["count"]:
                return _cell("ok", "match", f"exercised {rule['count']} time(s)")
            why = rule.get("why_not", "")
            return _cell("–", "unexercised", f"{why}: {rule.get('why_not_detail', '')}")
    return _cell("n/a", "absent", "not a rule of this run's model variant")


def _quirk_cells(report: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    cells: dict[str, dict[str, str]] = {}
    for q in report.get("quirk_matches", []):
        kinds = ", ".join(f"{k} {n}" for k, n in q.get("kinds", {}).items())
        cells[q["id"]] = _cell(f"{q['matches']} matched", "known", kinds)
    for key, word in QUIRK_STATES:
        for q in report.get(key, []):
            cells.setdefault(q["id"], _cell(word, word.replace(" ", "-"), q.get("detail", "")))
    return cells


def _choice_cells(report: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    cells = {}
    for row in report.get("choices", []):
        text = "; ".join(f"{chosen} {n}" for chosen, n in row["choices"].items())
        if row.get("consistent", True):
            by = " (by situation)" if row.get("by_situation") else ""
            cells[row["rule"]] = _cell(text + by, "choice", row.get("summary", ""))
        else:
            detail = "chose both ways in: " + "; ".join(row["inconsistent_situations"])
            cells[row["rule"]] = _cell(text, "divergence", detail)
    return cells


def _feature_cells(report: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    evidence = {row["feature"]: row["quirk"] for row in report.get("missing_features", [])}
    cells = {}
    for feature, has in report.get("capabilities", {}).items():
        if has:
            cells[feature] = _cell("has", "match")
        else:
            why = evidence.get(feature)
            cells[feature] = _cell("lacks", "lacks", f"quirk {why}" if why else "")
    return cells


# ------------------------------------------------------------------------------ the matrix
def _rows(reports: list[tuple[str, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    per_run = {
        col: {
            "divergences": _divergence_cells(r),
            "quirks": _quirk_cells(r),
            "characteristics": _choice_cells(r),
            "features": _feature_cells(r),
        }
        for col, r in reports
    }
    rows = []
    for section, _ in SECTIONS:
        ids = sorted({i for cells in per_run.values() for i in cells[section]})
        for behaviour in ids:
            cells = {}
            for col, report in reports:
                cell = per_run[col][section].get(behaviour)
                if cell is None:
                    cell = (_rule_held(report, behaviour) if section == "divergences"
                            else _cell("", "none"))
                cells[col] = cell
            rows.append({"section": section, "id": behaviour, "cells": cells})
    return rows


def build_matrix(paths: Iterable[str | os.PathLike[str]]) -> dict[str, Any]:
    """The matrix of the comparable runs among `paths` (in the order given), and the
    excluded ones with their reasons. FileNotFoundError for a path that does not exist;
    ValueError when no input is a comparable run."""
    included: list[tuple[str, dict[str, Any]]] = []
    excluded: list[dict[str, str]] = []
    for path in map(str, paths):
        if not Path(path).exists():
            raise FileNotFoundError(f"{path}: no such file or folder")
        try:
            report = read_run(path)
        except NotComparable as exc:
            excluded.append({"path": path, "reason": str(exc)})
            continue
        if included:
            ref_path, ref = included[0]
            mine, theirs = suite_version_of(report), suite_version_of(ref)
            if mine != theirs:
                excluded.append({"path": path, "reason": (
                    f"suite version {mine or 'not recorded'}, the matrix's (from {ref_path}) is "
                    f"{theirs or 'not recorded'}: its rows may mean other rules")})
                continue
        included.append((path, report))
    if not included:
        raise ValueError("no comparable run among the inputs: "
                         + "; ".join(e["reason"] for e in excluded))
    columns = [_column(i, path, r) for i, (path, r) in enumerate(included, 1)]
    keyed = [(c["id"], r) for c, (_, r) in zip(columns, included, strict=True)]
    return {
        "kind": MATRIX_KIND,
        "schema": MATRIX_SCHEMA,
        "suite_version": suite_version_of(included[0][1]),
        "sections": [{"id": s, "title": t} for s, t in SECTIONS],
        "columns": columns,
        "rows": _rows(keyed),
        "excluded": excluded,
    }


def summary_text(matrix: Mapping[str, Any]) -> str:
    """A few lines for the terminal: the columns, the row counts, the excluded runs."""
    out = [f"fleet matrix: {len(matrix['columns'])} run(s), suite version "
           f"{matrix['suite_version'] or 'not recorded'}"]
    for c in matrix["columns"]:
        out.append(f"  {c['id']}: {c['label']}: {c['verdict']} ({c['path']})")
    counts = {s["id"]: 0 for s in matrix["sections"]}
    for row in matrix["rows"]:
        counts[row["section"]] += 1
    out.append("rows: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    for e in matrix["excluded"]:
        out.append(f"EXCLUDED (not comparable): {e['path']}: {e['reason']}")
    return "\n".join(out) + "\n"
