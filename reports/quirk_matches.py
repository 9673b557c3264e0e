"""Per-quirk accounting for the report: what each quirk of the profile matched, and where.

A quirk is a hole in a gate; the report shows how wide each one turned out to be
in this run (how many divergences, of which kinds, on which tests), next to the
quirks that matched nothing (stale) and those not applicable to the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def quirk_matches(divs: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per quirk: how many divergences it matched, of which kinds, and on which tests."""
    found: dict[str, dict[str, Any]] = {}
    for d in divs:
        quirk = d.get("known_quirk")
        if not quirk:
            continue
        entry = found.setdefault(quirk, {"id": quirk, "matches": 0, "kinds": {}, "tests": set()})
        entry["matches"] += 1
        kind = str(d.get("kind", "?"))
        entry["kinds"][kind] = entry["kinds"].get(kind, 0) + 1
        if d.get("test"):
            entry["tests"].add(str(d["test"]))
    return [
        {**e, "tests": sorted(e["tests"]), "kinds": dict(sorted(e["kinds"].items()))}
        for e in sorted(found.values(), key=lambda e: (-e["matches"], e["id"]))
    ]
