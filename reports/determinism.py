"""Did N runs of the same profile on the same kernel give the same verdict and divergences?

A gate that flips between runs of the same seed is noise, so the derandomized `ci`
profile must repeat itself. Each run folder holds the report.json and divergences.json
of one run. What must be the same: the verdict, the unknown divergences (id and rule:
what fails the gate) and the quirks the run matched (quirk and rule). Where a known
divergence showed (its distinct key: QP type, verb, rule, state) is listed when it
varies but does not fail the check: a quirk for a race in the driver (rxe's drain
against an RNR-NAKed send, say) matches at whichever step the race went that way.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reports.divergence import read_divergences
from reports.qualification import divergence_key


def signature(run_dir: str | Path) -> dict[str, Any]:
    """What must repeat between runs: verdict code, unknown and known divergences."""
    folder = Path(run_dir)
    report_path = folder / "report.json"
    try:
        report = json.loads(report_path.read_text())
        code = report["verdict"]["code"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{report_path}: no readable qpconform report ({exc})") from None
    records = read_divergences(folder / "divergences.json")
    unknown = {(d.get("id", ""), d.get("rule_id", "")) for d in records
               if not d.get("known_quirk")}
    known = [d for d in records if d.get("known_quirk")]
    return {
        "verdict": code,
        "unknown": sorted(unknown),
        "quirks": sorted({(d["known_quirk"], d.get("rule_id", "")) for d in known}),
        "known": sorted({(divergence_key(d), d["known_quirk"]) for d in known}),
    }


def compare_runs(run_dirs: Sequence[str | Path]) -> tuple[bool, str]:
    """(all the same?, a text that lists each run and every difference from the first)."""
    if len(run_dirs) < 2:
        raise ValueError("give at least two run folders to compare")
    sigs = [signature(d) for d in run_dirs]
    first = sigs[0]
    lines = []
    same = True
    for folder, sig in zip(run_dirs, sigs, strict=True):
        lines.append(f"{folder}: verdict {sig['verdict']}, {len(sig['unknown'])} unknown, "
                     f"{len(sig['quirks'])} quirks matched, {len(sig['known'])} distinct known "
                     "divergences")
        for part in ("verdict", "unknown", "quirks", "known"):
            if sig[part] == first[part]:
                continue
            same = same and part == "known"
            if part == "verdict":
                lines.append(f"  verdict differs from the first run: {first['verdict']}")
                continue
            note = " (where a quirk matched: informational)" if part == "known" else ""
            ours, theirs = set(map(tuple, sig[part])), set(map(tuple, first[part]))
            lines += [f"  {part} only here{note}: {' / '.join(x)}" for x in sorted(ours - theirs)]
            lines += [f"  {part} only in the first run{note}: {' / '.join(x)}"
                      for x in sorted(theirs - ours)]
    lines.append(f"{'SAME' if same else 'DIFFERENT'}: {len(sigs)} runs (verdict, unknown "
                 "divergences, quirks matched)")
    return same, "\n".join(lines) + "\n"
