"""Per-quirk accounting for the report: what each quirk of the profile matched, and where.

A quirk is a hole in a gate; the report shows how wide each one turned out to be
in this run (how many divergences, of which kinds, on which tests), next to the
quirks that matched nothing (stale) and those not applicable to the run.

Every entry also says where it comes from (`with_provenance`): seen on a device
("observed") or predicted by reading the driver source ("source"). A source entry
that matched something in this run is thereby confirmed; one that matched nothing
is stale like any other, but the report says it was only a prediction.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

OBSERVED_LABEL = "observed"
PREDICTED_LABEL = "predicted from source"
CONFIRMED_LABEL = "predicted from source, confirmed (observed)"


def provenance_label(provenance: str, matched: bool) -> str:
    """How the report names an entry's origin: a source entry that matched is confirmed."""
    if provenance != "source":
        return OBSERVED_LABEL
    return CONFIRMED_LABEL if matched else PREDICTED_LABEL


def with_provenance(
    entries: list[Mapping[str, Any]], profile: Mapping[str, Mapping[str, str]], matched: bool
) -> list[dict[str, Any]]:
    """Quirk entries of the report ({"id": ...}) with their provenance, its label and the
    feature the entry says the device lacks (records without a profile map: observed)."""
    out = []
    for e in entries:
        known = profile.get(str(e["id"]), {})
        provenance = known.get("provenance", "observed")
        out.append({
            **e,
            "provenance": provenance,
            "provenance_label": provenance_label(provenance, matched),
            "feature": known.get("feature"),
        })
    return out


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
