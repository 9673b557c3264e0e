"""The qualification report as data: verdict, matrices, divergences, rule coverage.

`build_report(run)` turns a merged run record into the dict that both the HTML
page and report.json are made of, so the page shows nothing the JSON lacks.
Every rule the report can list comes from the model itself (`model_rules`):
coverage is measured against the model, not against a hand-kept list, and each rule never
exercised says why (models/catalog.py `why_not`: a QP type refused or not selected, a
feature the device lacks, or not reached), so the report can count the rules that apply
to the device (`applicable`) and the ones no test reached. The matrices are
reports/matrices.py's, the identity, settings and choice rows reports/report_rows.py's.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from models.capabilities import Capabilities
from models.catalog import (
    DEVICE_CHOSE,
    FEATURE_MISSING,
    GATED_BY_CHOICE,
    NOT_REACHED,
    TYPE_UNSUPPORTED,
    WHY_NOT,
    rule_scope,
    variant_rules,
    why_not,
)
from models.enums import QPType
from models.sources import Rule
from models.variant import Variant
from models.variant import variant as parse_variant
from qpconform.engine.timing import unsure
from reports.matrices import bare_name, post_matrix, run_qp_types, transition_matrices
from reports.quirk_matches import quirk_matches, with_provenance
from reports.report_rows import (
    choice_rows,
    device_name,
    identity_rows,
    missing_features,
    setting_rows,
    unreported_inconsistencies,
)

REPORT_SCHEMA = 1
REPORT_KIND = "qpconform-report"

CONFORMANT = "conformant"
KNOWN = "conformant-with-known-divergences"
NOT_CONFORMANT = "not-conformant"
INCONCLUSIVE = "inconclusive"
INCOMPLETE = "incomplete"
UNSURE = "conformant-timing-unsure"
VERDICT_TEXT = {
    INCOMPLETE: "Incomplete: the run stopped early or a test did not finish",
    CONFORMANT: "Conformant",
    KNOWN: "Conformant with known divergences",
    NOT_CONFORMANT: "Not conformant",
    INCONCLUSIVE: "Inconclusive: no step was exercised",
    UNSURE: "Conformant as far as seen, timing unsure: a window ended an observation before "
            "the slowest delivery of its kind, so something forbidden could have gone unseen",
}

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


def divergence_key(d: Mapping[str, Any]) -> str:
    """The identity of a divergence across runs: QP type, verb, rule and state."""
    return " | ".join(bare_name(d.get(k, "")) for k in ("qp_type", "verb", "rule_id", "state"))


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
        g["qp_type"], g["state"] = bare_name(g.get("qp_type", "")), bare_name(g.get("state", ""))
        g["shown_attrs"] = masked_attrs(g.get("attrs"), g.get("mask"))
        g["steps"] = [
            {**s, "shown_attrs": masked_attrs(s.get("attrs"), s.get("mask"))}
            for s in g.get("steps") or []
        ]
        g["reproducer_text"] = _reproducer_text(g.get("reproducer"), base)
    return out


def available_qp_types(run: Mapping[str, Any]) -> list[str]:
    """The QP types the run selected and the device could create (its `unsupported` ones
    refused create_qp), in ABI order."""
    refused = {bare_name(t) for t in run.get("unsupported", {})}
    return [t for t in run_qp_types(run) if t not in refused]


def _why_not_detail(
    reason: str, rule: Rule, run: Mapping[str, Any], capabilities: Capabilities
) -> str:
    """What a `why_not` reason rests on, in a few words."""
    scope = rule_scope(rule)
    if reason == TYPE_UNSUPPORTED:
        refused = {bare_name(t) for t in run.get("unsupported", {})}
        names = [t.name for t in QPType if t in scope.qp_types]
        return "; ".join(
            f"{t}: {'unsupported by the device' if t in refused else 'not selected'}"
            for t in names
        )
    if reason == FEATURE_MISSING:
        return "the device lacks " + ", ".join(
            f for f in sorted(scope.features) if not capabilities.has(f))
    if reason == DEVICE_CHOSE:
        gate, leads = GATED_BY_CHOICE[rule.id]
        chosen = run.get("choices", {}).get(gate, {})
        made = ", ".join(f"{c} {n}x" for c, n in sorted(chosen.items()))
        return f"only '{leads}' under {gate} leads here; the device chose {made}"
    return "applies to the device; no test of this run reached it"


def coverage(
    run: Mapping[str, Any],
    catalog: Mapping[str, Rule],
    capabilities: Capabilities | None = None,
) -> dict[str, Any]:
    """How often each rule of the model was exercised (in a step, by a choice the device made
    under it, or by a divergence from it); which never were, and why (a QP type the device
    refused or the run did not select, a feature the device lacks, or not reached:
    models/catalog.py `why_not`); which were unknown."""
    caps = capabilities if capabilities is not None else Capabilities()
    available = available_qp_types(run)
    counts: dict[str, int] = {}
    for s in run.get("steps", []):
        for rule_id, n in s.get("rules", {}).items():
            counts[rule_id] = counts.get(rule_id, 0) + n
    for rule_id, chosen in run.get("choices", {}).items():  # a "may" rule the device chose under
        if not counts.get(rule_id):  # (a name read back: no step of its own names it)
            counts[rule_id] = sum(chosen.values())
    broken = Counter(str(d.get("rule_id", "")) for d in run.get("divergences", []))
    for rule_id, n in broken.items():  # a rule the device broke (known or not) was checked,
        if rule_id and not counts.get(rule_id):  # also where no step listed it (a stray event)
            counts[rule_id] = n
    rules = []
    for r in catalog.values():
        row: dict[str, Any] = {
            **_rule_dict(r), "group": rule_group(r.id), "count": counts.get(r.id, 0)}
        if not row["count"]:
            row["why_not"] = why_not(r, available, caps, run.get("choices", {}))
            row["why_not_detail"] = _why_not_detail(row["why_not"], r, run, caps)
        rules.append(row)
    groups = []
    for name in RULE_GROUPS:
        members = [r for r in rules if r["group"] == name]
        if members:
            groups.append(
                {
                    "name": name,
                    "total": len(members),
                    "exercised": sum(1 for r in members if r["count"]),
                    "applicable": sum(1 for r in members if _applicable(r)),
                    "not_reached": sum(1 for r in members if r.get("why_not") == NOT_REACHED),
                }
            )
    exercised = sum(1 for r in rules if r["count"])
    applicable = sum(1 for r in rules if _applicable(r))
    return {
        "total": len(rules),
        "exercised": exercised,
        "percent": round(100 * exercised / len(rules), 1) if rules else 0.0,
        "applicable": applicable,
        "not_applicable": len(rules) - applicable,
        "applicable_percent": round(100 * exercised / applicable, 1) if applicable else 0.0,
        "why_not": {k: sum(1 for r in rules if r.get("why_not") == k) for k in WHY_NOT},
        "available_qp_types": available,
        "groups": groups,
        "rules": rules,
        "never": [r["id"] for r in rules if not r["count"]],
        "outside_model": dict(sorted((k, v) for k, v in counts.items() if k not in catalog)),
    }


def _applicable(row: Mapping[str, Any]) -> bool:
    """Exercised, or never exercised only because no test reached it."""
    return bool(row["count"]) or row.get("why_not") == NOT_REACHED


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
    timing = unsure(run.get("delivery", {}), run.get("windows_closed", {}),
                    run.get("delivery_slowest", {}))
    if timing and code in (CONFORMANT, KNOWN):
        code = UNSURE
    return {
        "code": code,
        "text": VERDICT_TEXT[code],
        "timing_unsure": "; ".join(timing),
        "windows_widened": list(run.get("windows_widened", [])),
        "steps": steps,
        "divergences": unknown,
        "known": known,
        "stale_quirks": len(run.get("stale_quirks", [])),
        "not_provoked_quirks": len(run.get("not_provoked_quirks", [])),
        "aborted": aborted or "",
        "leaked": run.get("settings", {}).get("leaked", ""),
    }


def build_report(run: Mapping[str, Any], base: str | Path | None = None) -> dict[str, Any]:
    """The whole qualification report as JSON data, from a merged run record.

    `base` is where relative reproducer paths are looked up (the run's directory).
    """
    settings = dict(run.get("settings", {}))
    variant = parse_variant(settings.get("variant", "linux"))  # the run record's name
    qp_types = run_qp_types(run)
    catalog = model_rules(variant, qp_types)
    divs = run.get("divergences", [])
    profile = run.get("quirk_profile", {})
    base_path = Path(base) if base is not None else None
    lacking = missing_features(divs, profile)
    lacked = [row["feature"] for row in lacking]
    if run.get("identity", {}).get("atomic_cap") == "none":  # the device says so itself
        lacked.append("ATOMICS")
    if run.get("identity", {}).get("max_srq") == "0":
        lacked.append("SRQ")
    if run.get("identity", {}).get("srq_resize") == "no":  # no IBV_DEVICE_SRQ_RESIZE
        lacked.append("SRQ_RESIZE")
    capabilities = Capabilities.of(variant, lacked)
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
        "coverage": coverage(run, catalog, capabilities),
        "choices": choice_rows(run.get("choices", {}), catalog, run.get("situations", {})),
        "inconsistent_choices": unreported_inconsistencies(run),
        "missing_features": lacking,
        "capabilities": capabilities.to_json(),
    }

