"""The report's rows: the device identity, the run settings, the device's choices.

`identity_rows` and `setting_rows` list the fields a qualification must show, in display
order, marking the missing ones; `choice_rows` and `unreported_inconsistencies` say what the
device chose under each "may" rule and where it chose both ways; `missing_features` lists
the optional features it lacks. reports/qualification.py puts them into the report.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from models.sources import Rule
from qpconform.engine.choices import inconsistent

#: Identity fields a qualification must show, in display order, with their labels.
IDENTITY_FIELDS = (
    ("device", "Device"),
    ("vendor_id", "Vendor ID"),
    ("vendor_part_id", "Part ID"),
    ("fw_ver", "Firmware"),
    ("node_guid", "Node GUID"),
    ("driver", "Driver"),
    ("kernel", "Kernel"),
    ("rdma_core", "rdma-core"),
    ("pyverbs", "pyverbs"),
    ("link_layer", "Link layer"),
    ("active_mtu", "Active MTU"),
    ("port", "Port"),
    ("gid_index", "GID index"),
)
_IDENTITY_ALIASES = {"firmware": "fw_ver", "name": "device"}
#: Run settings a qualification must show, in display order, with their labels.
SETTING_FIELDS = (
    ("date", "Date"),
    ("run_id", "Run id"),
    ("hypothesis_profile", "Hypothesis profile"),
    ("seed", "Hypothesis seed"),
    ("replay", "Replay options"),
    ("max_examples", "Max examples"),
    ("stateful_step_count", "Steps per example"),
    ("quirks", "Quirk file"),
)


def device_name(identity: Mapping[str, Any]) -> str:
    """The device's name, whichever key the identity uses."""
    return str(identity.get("device") or identity.get("name") or "unknown device")


def setting_rows(settings: Mapping[str, Any], started: str | None) -> list[dict[str, Any]]:
    """Run settings in display order: required fields first (marked when missing)."""
    values = dict(settings)
    if not values.get("date") and started:
        values["date"] = started[:10]
    rows = [
        {"key": k, "label": label, "value": values.get(k), "missing": values.get(k) in (None, "")}
        for k, label in SETTING_FIELDS
    ]
    shown = {k for k, _ in SETTING_FIELDS} | {
        "variant", "variant_reason", "qp_types", "hypothesis_seed"}
    rows += [
        {"key": k, "label": k, "value": v, "missing": False}
        for k, v in sorted(values.items())
        if k not in shown
    ]
    return rows


def identity_rows(identity: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The device identity in display order: required fields first (marked when missing)."""
    norm = {_IDENTITY_ALIASES.get(k, k): v for k, v in identity.items()}
    rows = [
        {"key": k, "label": label, "value": norm.get(k), "missing": norm.get(k) in (None, "")}
        for k, label in IDENTITY_FIELDS
    ]
    shown = {k for k, _ in IDENTITY_FIELDS}
    rows += [
        {"key": k, "label": k, "value": v, "missing": False}
        for k, v in sorted(norm.items())
        if k not in shown
    ]
    return rows


def choice_rows(
    choices: Mapping[str, Mapping[str, int]],
    catalog: Mapping[str, Rule],
    situations: Mapping[str, Mapping[str, Mapping[str, str]]] | None = None,
) -> list[dict[str, Any]]:
    """The device's characteristics: what it chose under each "may" rule, and whether it
    chose the same way in the same situation every time (qpconform/engine/choices.py): a
    rule chosen both ways in different situations (by value, by transition) is consistent."""
    mixed_by_rule: dict[str, list[str]] = {}
    for row in inconsistent(situations or {}):
        mixed_by_rule.setdefault(row["rule"], []).append(row["situation"])
    rows = []
    for rule_id, seen in sorted(choices.items()):
        rule = catalog.get(rule_id)
        mixed = mixed_by_rule.get(rule_id, [])
        rows.append({
            "rule": rule_id,
            "summary": rule.summary if rule is not None else "",
            "choices": dict(sorted(seen.items(), key=lambda kv: -kv[1])),
            "consistent": not mixed,
            "by_situation": len(seen) > 1 and not mixed,
            "inconsistent_situations": sorted(mixed),
        })
    return rows


def unreported_inconsistencies(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Situations chosen both ways that no divergence reported: two pytest-xdist workers
    each saw one choice, so neither could tell (a run with them fails, see fixtures/verdict.py)."""
    reported = {
        (d.get("rule_id"), d.get("context", {}).get("situation"))
        for d in run.get("divergences", []) if d.get("kind") == "inconsistent"
    }
    return [row for row in inconsistent(run.get("situations", {}))
            if (row["rule"], row["situation"]) not in reported]


def missing_features(
    divs: Iterable[Mapping[str, Any]], profile: Mapping[str, Mapping[str, str]]
) -> list[dict[str, str]]:
    """Capability rows: optional features the device lacks, from the quirks (with a
    `feature`) that matched in this run; reported once each, not as divergences."""
    rows: dict[str, dict[str, str]] = {}
    for d in divs:
        quirk = d.get("known_quirk")
        feature = profile.get(quirk or "", {}).get("feature")
        if quirk and feature and feature not in rows:
            rows[feature] = {"feature": feature, "quirk": quirk,
                             "provenance": profile[quirk].get("provenance", "observed")}
    return [rows[k] for k in sorted(rows)]
