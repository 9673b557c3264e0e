"""The qualification report as data: verdict, matrices, divergences, rule coverage.

`build_report(run)` turns a merged run record into the dict that both the HTML
page and report.json are made of, so the page shows nothing the JSON lacks.
Every rule the report can list comes from the model itself (`model_rules`):
coverage is measured against the model, not against a hand-kept list.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from models import rules as model_rules_module
from models.capabilities import Capabilities
from models.catalog import POST_VERBS, post_expectation, variant_rules
from models.enums import STATES, QPType
from models.sources import Rule
from models.variant import Variant
from models.variant import variant as parse_variant
from qpconform.engine.choices import inconsistent
from reports.quirk_matches import quirk_matches, with_provenance

REPORT_SCHEMA = 1
REPORT_KIND = "qpconform-report"

CONFORMANT = "conformant"
KNOWN = "conformant-with-known-divergences"
NOT_CONFORMANT = "not-conformant"
INCONCLUSIVE = "inconclusive"
INCOMPLETE = "incomplete"
VERDICT_TEXT = {
    INCOMPLETE: "Incomplete: the run stopped early or a test did not finish",
    CONFORMANT: "Conformant",
    KNOWN: "Conformant with known divergences",
    NOT_CONFORMANT: "Not conformant",
    INCONCLUSIVE: "Inconclusive: no step was exercised",
}

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

RULE_GROUPS = (
    "transitions",
    "required and extra mask bits",
    "invalid transitions",
    "modify checks",
    "attribute values",
    "post rules",
    "error handling",
    "drain",
    "completions and lifecycle",
)


def rule_group(rule_id: str) -> str:
    """The report section a rule belongs to, from its id."""
    if ".transition.invalid." in rule_id:
        return "invalid transitions"
    if ".transition." in rule_id and rule_id.endswith((".required", ".extra")):
        return "required and extra mask bits"
    if ".transition." in rule_id:
        return "transitions"
    if rule_id.startswith("attr."):
        return "attribute values"
    if rule_id.startswith(("ibta.post_send.", "ibta.post_recv.", "ibta.sqd.hold")):
        return "post rules"
    if rule_id.startswith(("iwarp.post_send.", "iwarp.post_recv.")):
        return "post rules"
    if rule_id.startswith(("ibta.sqd.", "pair.sqd.")):
        return "drain"
    if rule_id.startswith(("ibta.err.", "ibta.sqe.", "pair.rc.", "pair.uc.", "pair.bad_",
                           "pair.unreliable.", "pair.completion_error.")):
        return "error handling"
    if rule_id.startswith("iwarp.err."):
        return "error handling"
    if rule_id.startswith(("uverbs.", "linux.cur_state.", "iwarp.cur_state.", "iwarp.modify.")):
        return "modify checks"
    return "completions and lifecycle"


def _name(value: Any) -> str:
    """ "QPType.RC" or QPType.RC -> "RC" (records may carry either)."""
    text = getattr(value, "name", None) or str(value)
    return text.rsplit(".", 1)[-1] if text.startswith(("QPType.", "QPState.")) else text


def model_rules(variant: Variant | str, qp_types: Iterable[str] | None = None) -> dict[str, Rule]:
    """Every rule of one model variant that a run on these QP types can exercise
    (models/catalog.py), in the report's order: by section, then by id."""
    found = variant_rules(variant, qp_types)
    return dict(sorted(found.items(), key=lambda kv: (RULE_GROUPS.index(rule_group(kv[0])), kv[0])))


def _rule_dict(rule: Rule) -> dict[str, str]:
    return {
        "id": rule.id,
        "summary": rule.summary,
        "source": str(rule.source),
        "quote": rule.source.quote,
        "kind": rule.kind or "",
        "layer": rule.layer or "",
    }


def _qp_types(run: Mapping[str, Any]) -> list[str]:
    """The QP types of the run: from its settings, else those its steps used; in ABI order."""
    named = {_name(t) for t in run.get("settings", {}).get("qp_types", [])}
    named |= {_name(s["qp_type"]) for s in run.get("steps", [])}
    named |= {_name(t) for t in run.get("unsupported", {})}
    known = [t.name for t in QPType if t.name in named]
    return known or [t.name for t in QPType]


def _empty_counts() -> dict[str, int]:
    return {"total": 0, "match": 0, "known": 0, "divergence": 0}


def _status(counts: Mapping[str, int]) -> str:
    """A cell's colour class: the worst thing that happened in it."""
    if counts["divergence"]:
        return "divergence"
    if counts["known"]:
        return "known"
    return "match" if counts["total"] else "unexercised"


_PAIR_RULE = re.compile(r"^\w+\.transition\.(?:invalid|[A-Z_]+)\.([A-Z]+)->([A-Z]+)$")


def modify_pairs(step: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    """How an aggregated modify step splits over table pairs (current, requested state).

    The table rule each modify consulted names its pair, whatever `target` says; the
    steps that never reached the table (mask or range refusals) fall back to
    state_before -> target.
    """
    pairs: dict[tuple[str, str], int] = {}
    for rule_id, n in step.get("rules", {}).items():
        found = _PAIR_RULE.match(rule_id)
        if found:
            pairs[found.groups()] = pairs.get(found.groups(), 0) + n
    rest = step["count"] - sum(pairs.values())
    if rest > 0:
        cur = _name(step["state_before"])
        nxt = _name(step["target"]) if step.get("target") is not None else cur
        pairs[(cur, nxt)] = pairs.get((cur, nxt), 0) + rest
    return pairs


def transition_matrices(run: Mapping[str, Any], variant: Variant | str) -> list[dict[str, Any]]:
    """Per QP type, current state x next state: legal or not, and what modify did there."""
    table = parse_variant(variant).table
    states = [s.name for s in STATES]
    out = []
    for qp_name in _qp_types(run):
        qp_type = QPType[qp_name]
        cells: dict[str, dict[str, dict[str, Any]]] = {}
        for cur in STATES:
            for nxt in STATES:
                entry = table.lookup(qp_type, cur, nxt)
                rule = entry.rule if entry else table.invalid_rule(cur, nxt, qp_type)
                cells.setdefault(cur.name, {})[nxt.name] = {
                    "legal": entry is not None,
                    "rule": rule.id,
                    **_empty_counts(),
                }
        for s in run.get("steps", []):
            if _name(s["qp_type"]) != qp_name or s["verb"] != "modify":
                continue
            for (cur, nxt), n in modify_pairs(s).items():
                cell = cells.get(cur, {}).get(nxt)
                if cell is not None:  # else a state outside the seven: in coverage only
                    cell["total"] += n
                    cell[s["result"]] += n
        for row in cells.values():
            for cell in row.values():
                cell["status"] = _status(cell)
        totals = _empty_counts()
        for row in cells.values():
            for cell in row.values():
                for k in totals:
                    totals[k] += cell[k]
        legal = [c for row in cells.values() for c in row.values() if c["legal"]]
        out.append(
            {
                "qp_type": qp_name,
                "unsupported": run.get("unsupported", {}).get(qp_name),
                "states": states,
                "cells": cells,
                "totals": totals,
                "legal_exercised": sum(1 for c in legal if c["total"]),
                "legal_total": len(legal),
            }
        )
    return out


def _short(exp: Any) -> str:
    """One word for a post expectation, for a matrix cell."""
    if exp.outcome.value == "refuse":
        return "refused"
    if exp.completions:
        return "flushed"
    if exp.rule.id == model_rules_module.SQD_HOLDS_NEW_SENDS.id:
        return "held"
    return "started" if exp.verb == "post_send" else "queued"


def post_matrix(run: Mapping[str, Any], variant: Variant | str) -> dict[str, Any]:
    """post_send/post_recv x state, over every QP type: what the model expects, what happened."""
    states = [s.name for s in STATES]
    cells: dict[str, dict[str, dict[str, Any]]] = {}
    for verb in POST_VERBS:
        for state in STATES:
            exp = post_expectation(QPType.RC, verb, state, variant)
            cells.setdefault(verb, {})[state.name] = {
                "rule": exp.rule.id,
                "expect": exp.rule.summary,
                "short": _short(exp),
                "accepted": exp.outcome.value != "refuse",
                "per_type": {},
                **_empty_counts(),
            }
    for s in run.get("steps", []):
        cell = cells.get(s["verb"], {}).get(_name(s["state_before"]))
        if cell is None:
            continue
        cell["total"] += s["count"]
        cell[s["result"]] += s["count"]
        qp = _name(s["qp_type"])
        cell["per_type"][qp] = cell["per_type"].get(qp, 0) + s["count"]
    for row in cells.values():
        for cell in row.values():
            cell["status"] = _status(cell)
    return {"verbs": list(POST_VERBS), "states": states, "cells": cells}


def divergence_key(d: Mapping[str, Any]) -> str:
    """The identity of a divergence across runs: QP type, verb, rule and state."""
    return " | ".join(_name(d.get(k, "")) for k in ("qp_type", "verb", "rule_id", "state"))


def _reproducer_text(path: str | None, base: Path | None) -> str | None:
    if not path:
        return None
    p = Path(path)
    for candidate in (p, (base / p) if base else p):
        try:
            return candidate.read_text()[:20000]
        except OSError:
            continue
    return None


#: The attribute fields each mask bit selects, to show only what a step actually set.
MASK_FIELDS = {
    "STATE": ("qp_state",),
    "CUR_STATE": ("cur_qp_state",),
    "EN_SQD_ASYNC_NOTIFY": ("en_sqd_async_notify",),
    "ACCESS_FLAGS": ("qp_access_flags",),
    "PKEY_INDEX": ("pkey_index",),
    "PORT": ("port_num",),
    "QKEY": ("qkey",),
    "AV": ("ah_port_num", "ah_sgid_index"),
    "PATH_MTU": ("path_mtu",),
    "TIMEOUT": ("timeout",),
    "RETRY_CNT": ("retry_cnt",),
    "RNR_RETRY": ("rnr_retry",),
    "RQ_PSN": ("rq_psn",),
    "MAX_QP_RD_ATOMIC": ("max_rd_atomic",),
    "ALT_PATH": ("alt_port_num", "alt_timeout", "alt_ah_port_num"),
    "MIN_RNR_TIMER": ("min_rnr_timer",),
    "SQ_PSN": ("sq_psn",),
    "MAX_DEST_RD_ATOMIC": ("max_dest_rd_atomic",),
    "PATH_MIG_STATE": ("path_mig_state",),
    "DEST_QPN": ("dest_qp_num",),
    "RATE_LIMIT": ("rate_limit",),
}


def masked_attrs(attrs: Mapping[str, Any] | None, mask: Any) -> dict[str, Any]:
    """The attributes a mask selects (all of them when the mask is not a list of names)."""
    attrs = dict(attrs or {})
    if not isinstance(mask, list | tuple):
        return attrs
    fields = {f for bit in mask for f in MASK_FIELDS.get(str(bit), ())}
    return {k: v for k, v in attrs.items() if k in fields}


def group_divergences(
    divergences: Iterable[Mapping[str, Any]], base: Path | None = None
) -> list[dict[str, Any]]:
    """One entry per distinct divergence (by key), keeping the shortest step sequence."""
    groups: dict[str, dict[str, Any]] = {}
    for d in divergences:
        key = divergence_key(d)
        g = groups.get(key)
        steps = d.get("steps") or []
        if g is None:
            g = groups[key] = {**d, "key": key, "occurrences": 0, "tests": []}
        elif len(steps) < len(g.get("steps") or []):
            g.update({**d, "key": key, "occurrences": g["occurrences"], "tests": g["tests"]})
        g["occurrences"] += 1
        if d.get("test") and d["test"] not in g["tests"]:
            g["tests"].append(d["test"])
    out = sorted(groups.values(), key=lambda g: g["key"])
    for g in out:
        g["qp_type"], g["state"] = _name(g.get("qp_type", "")), _name(g.get("state", ""))
        g["shown_attrs"] = masked_attrs(g.get("attrs"), g.get("mask"))
        g["steps"] = [
            {**s, "shown_attrs": masked_attrs(s.get("attrs"), s.get("mask"))}
            for s in g.get("steps") or []
        ]
        g["reproducer_text"] = _reproducer_text(g.get("reproducer"), base)
    return out


def coverage(run: Mapping[str, Any], catalog: Mapping[str, Rule]) -> dict[str, Any]:
    """How often each rule of the model was exercised; which never were; which were unknown."""
    counts: dict[str, int] = {}
    for s in run.get("steps", []):
        for rule_id, n in s.get("rules", {}).items():
            counts[rule_id] = counts.get(rule_id, 0) + n
    rules = [
        {**_rule_dict(r), "group": rule_group(r.id), "count": counts.get(r.id, 0)}
        for r in catalog.values()
    ]
    groups = []
    for name in RULE_GROUPS:
        members = [r for r in rules if r["group"] == name]
        if members:
            groups.append(
                {
                    "name": name,
                    "total": len(members),
                    "exercised": sum(1 for r in members if r["count"]),
                }
            )
    exercised = sum(1 for r in rules if r["count"])
    return {
        "total": len(rules),
        "exercised": exercised,
        "percent": round(100 * exercised / len(rules), 1) if rules else 0.0,
        "groups": groups,
        "rules": rules,
        "never": [r["id"] for r in rules if not r["count"]],
        "outside_model": dict(sorted((k, v) for k, v in counts.items() if k not in catalog)),
    }


def verdict(run: Mapping[str, Any]) -> dict[str, Any]:
    """Conformant, conformant with known divergences, not conformant (or inconclusive)."""
    divs = run.get("divergences", [])
    unknown = sum(1 for d in divs if not d.get("known_quirk"))
    unknown += len(unreported_inconsistencies(run))
    known_steps = sum(s["count"] for s in run.get("steps", []) if s["result"] == "known")
    known = max(known_steps, sum(1 for d in divs if d.get("known_quirk")))
    steps = sum(s["count"] for s in run.get("steps", []))
    aborted = run.get("settings", {}).get("aborted") or run.get("settings", {}).get("unfinished")
    if unknown or any(s["result"] == "divergence" for s in run.get("steps", [])):
        code = NOT_CONFORMANT
    elif aborted:
        code = INCOMPLETE
    elif known:
        code = KNOWN
    elif steps == 0:
        code = INCONCLUSIVE
    else:
        code = CONFORMANT
    return {
        "code": code,
        "text": VERDICT_TEXT[code],
        "steps": steps,
        "divergences": unknown,
        "known": known,
        "stale_quirks": len(run.get("stale_quirks", [])),
        "not_provoked_quirks": len(run.get("not_provoked_quirks", [])),
        "aborted": aborted or "",
        "leaked": run.get("settings", {}).get("leaked", ""),
    }


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


def build_report(run: Mapping[str, Any], base: str | Path | None = None) -> dict[str, Any]:
    """The whole qualification report as JSON data, from a merged run record.

    `base` is where relative reproducer paths are looked up (the run's directory).
    """
    settings = dict(run.get("settings", {}))
    variant = parse_variant(settings.get("variant", "linux"))  # the run record's name
    qp_types = _qp_types(run)
    catalog = model_rules(variant, qp_types)
    divs = run.get("divergences", [])
    profile = run.get("quirk_profile", {})
    base_path = Path(base) if base is not None else None
    lacking = missing_features(divs, profile)
    return {
        "schema": REPORT_SCHEMA,
        "kind": REPORT_KIND,
        "generated": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "run": {
            "started": run.get("started"),
            "finished": run.get("finished"),
            "workers": run.get("workers", []),
        },
        "device_name": device_name(run.get("identity", {})),
        "identity": dict(run.get("identity", {})),
        "identity_rows": identity_rows(run.get("identity", {})),
        "setting_rows": setting_rows(settings, run.get("started")),
        "settings": {**settings, "variant": variant.name, "qp_types": qp_types},
        "verdict": verdict(run),
        "transitions": transition_matrices(run, variant),
        "post": post_matrix(run, variant),
        "divergences": group_divergences([d for d in divs if not d.get("known_quirk")], base_path),
        "known": group_divergences([d for d in divs if d.get("known_quirk")], base_path),
        "stale_quirks": with_provenance(run.get("stale_quirks", []), profile, False),
        "quirk_matches": with_provenance(quirk_matches(divs), profile, True),
        "not_applicable_quirks": with_provenance(
            run.get("not_applicable_quirks", []), profile, False
        ),
        "unseen_quirks": with_provenance(run.get("unseen_quirks", []), profile, False),
        "not_provoked_quirks": with_provenance(
            run.get("not_provoked_quirks", []), profile, False
        ),
        "unsupported": dict(run.get("unsupported", {})),
        "coverage": coverage(run, catalog),
        "choices": choice_rows(run.get("choices", {}), catalog, run.get("situations", {})),
        "inconsistent_choices": unreported_inconsistencies(run),
        "missing_features": lacking,
        "capabilities": Capabilities.of(variant, [row["feature"] for row in lacking]).to_json(),
    }


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

