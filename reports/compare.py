"""What changed between two runs: new and fixed divergences, coverage gained and lost.

Works on report.json files (or on run records, which it turns into reports first),
so a driver change can be judged against the last good run of the same device.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reports.atomic import write_atomic_many
from reports.qualification import REPORT_KIND, build_report, divergence_key
from reports.run_record import KIND as RUN_KIND
from reports.run_record import merge_runs


def load_report(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A report.json, or a run record (run-*.json) built into a report."""
    data = json.loads(Path(path).read_text())
    if data.get("kind") == REPORT_KIND:
        return data
    if data.get("kind") == RUN_KIND:
        return build_report(merge_runs([path]), base=Path(path).parent)
    raise ValueError(f"{path}: neither a qpconform report nor a run record")


def _keys(entries: list[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {e.get("key") or divergence_key(e): e for e in entries}


def _ids(report: Mapping[str, Any], key: str) -> set[str]:
    """The quirk ids a report lists under `key` (none in a report that predates the key)."""
    return {q["id"] for q in report.get(key, [])}


def _brief(e: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "key": e.get("key") or divergence_key(e),
        "rule_id": e.get("rule_id"),
        "expected": e.get("expected"),
        "observed": e.get("observed"),
        "known_quirk": e.get("known_quirk"),
    }


def compare(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """The differences from report A (before) to report B (after)."""
    div_a, div_b = _keys(a["divergences"]), _keys(b["divergences"])
    known_a, known_b = _keys(a["known"]), _keys(b["known"])
    cov_a = {r["id"]: r["count"] for r in a["coverage"]["rules"]}
    cov_b = {r["id"]: r["count"] for r in b["coverage"]["rules"]}
    ident_a, ident_b = a.get("identity", {}), b.get("identity", {})
    stale_a, stale_b = _ids(a, "stale_quirks"), _ids(b, "stale_quirks")
    not_provoked_a = _ids(a, "not_provoked_quirks")
    not_provoked_b = _ids(b, "not_provoked_quirks")
    return {
        "a": {
            "device": a.get("device_name"),
            "generated": a.get("generated"),
            "verdict": a["verdict"]["text"],
        },
        "b": {
            "device": b.get("device_name"),
            "generated": b.get("generated"),
            "verdict": b["verdict"]["text"],
        },
        "verdict_changed": a["verdict"]["code"] != b["verdict"]["code"],
        "identity_changes": {
            k: [ident_a.get(k), ident_b.get(k)]
            for k in sorted(set(ident_a) | set(ident_b))
            if ident_a.get(k) != ident_b.get(k)
        },
        "new_divergences": [_brief(div_b[k]) for k in sorted(set(div_b) - set(div_a))],
        "fixed_divergences": [_brief(div_a[k]) for k in sorted(set(div_a) - set(div_b))],
        "still_divergent": sorted(set(div_a) & set(div_b)),
        "new_known": [_brief(known_b[k]) for k in sorted(set(known_b) - set(known_a))],
        "gone_known": [_brief(known_a[k]) for k in sorted(set(known_a) - set(known_b))],
        "new_stale_quirks": sorted(stale_b - stale_a),
        "new_not_provoked_quirks": sorted(not_provoked_b - not_provoked_a),
        "coverage": {
            "a": [a["coverage"]["exercised"], a["coverage"]["total"]],
            "b": [b["coverage"]["exercised"], b["coverage"]["total"]],
            "newly_exercised": sorted(k for k, n in cov_b.items() if n and not cov_a.get(k)),
            "no_longer_exercised": sorted(k for k, n in cov_a.items() if n and not cov_b.get(k)),
        },
    }


def has_changes(diff: Mapping[str, Any]) -> bool:
    """Did anything a person should look at change? (A quirk a random run did not provoke
    is no change: the next run may provoke it.)"""
    cov = diff["coverage"]
    return bool(
        diff["verdict_changed"]
        or diff["new_divergences"]
        or diff["fixed_divergences"]
        or diff["new_known"]
        or diff["gone_known"]
        or diff["new_stale_quirks"]
        or cov["newly_exercised"]
        or cov["no_longer_exercised"]
        or diff["identity_changes"]
    )


def format_text(diff: Mapping[str, Any]) -> str:
    """The comparison as plain text for a terminal or a CI log."""
    a, b, cov = diff["a"], diff["b"], diff["coverage"]
    out = [
        f"A: {a['device']} ({a['generated']}): {a['verdict']}",
        f"B: {b['device']} ({b['generated']}): {b['verdict']}",
    ]
    if diff["verdict_changed"]:
        out.append(f"verdict changed: {a['verdict']} -> {b['verdict']}")
    for key, (old, new) in diff["identity_changes"].items():
        out.append(f"identity {key}: {old} -> {new}")

    def section(title: str, entries: list[Any]) -> None:
        out.append(f"{title} ({len(entries)}):")
        for e in entries:
            if isinstance(e, Mapping):
                out.append(f"  {e['key']}")
                out.append(f"      expected {e['expected']}; observed {e['observed']}")
            else:
                out.append(f"  {e}")

    section("NEW divergences", diff["new_divergences"])
    section("FIXED divergences", diff["fixed_divergences"])
    out.append(f"still divergent: {len(diff['still_divergent'])}")
    if diff["new_known"] or diff["gone_known"]:
        section("new known divergences", diff["new_known"])
        section("known divergences gone", diff["gone_known"])
    if diff["new_stale_quirks"]:
        section("newly stale quirks", diff["new_stale_quirks"])
    if diff.get("new_not_provoked_quirks"):  # informational: a random run's, not stale
        section("quirks not provoked in B's run (random profile: not stale)",
                diff["new_not_provoked_quirks"])
    out.append(f"coverage: {cov['a'][0]}/{cov['a'][1]} -> {cov['b'][0]}/{cov['b'][1]} rules")
    section("rules newly exercised", cov["newly_exercised"])
    section("rules no longer exercised", cov["no_longer_exercised"])
    if not has_changes(diff):
        out.append("no differences")
    return "\n".join(out) + "\n"


def write_compare(
    path_a: str | os.PathLike[str],
    path_b: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
) -> tuple[dict[str, Any], str]:
    """Compare two reports; write compare.txt and compare.json into out_dir."""
    diff = compare(load_report(path_a), load_report(path_b))
    text = format_text(diff)
    out = Path(out_dir)
    write_atomic_many(
        {
            out / "compare.txt": text,
            out / "compare.json": json.dumps(diff, indent=1, sort_keys=True) + "\n",
        }
    )
    return diff, text
