"""The report's matrices: modify over the transition table, the posts over the states.

`transition_matrices` (per QP type, current x next state) and `post_matrix` (post_send and
post_recv x state) say for each cell what the model expects and what the run's steps did
there; reports/qualification.py puts them into the report, and reads the QP types and
states of a run record with `bare_name` and `run_qp_types` too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from models import rules as model_rules_module
from models.catalog import POST_VERBS, post_expectation
from models.enums import STATES, QPType
from models.variant import Variant
from models.variant import variant as parse_variant


def bare_name(value: Any) -> str:
    """ "QPType.RC" or QPType.RC -> "RC" (records may carry either)."""
    text = getattr(value, "name", None) or str(value)
    return text.rsplit(".", 1)[-1] if text.startswith(("QPType.", "QPState.")) else text


def run_qp_types(run: Mapping[str, Any]) -> list[str]:
    """The QP types of the run: from its settings, else those its steps used; in ABI order."""
    named = {bare_name(t) for t in run.get("settings", {}).get("qp_types", [])}
    named |= {bare_name(s["qp_type"]) for s in run.get("steps", [])}
    named |= {bare_name(t) for t in run.get("unsupported", {})}
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
        cur = bare_name(step["state_before"])
        nxt = bare_name(step["target"]) if step.get("target") is not None else cur
        pairs[(cur, nxt)] = pairs.get((cur, nxt), 0) + rest
    return pairs


def transition_matrices(run: Mapping[str, Any], variant: Variant | str) -> list[dict[str, Any]]:
    """Per QP type, current state x next state: legal or not, and what modify did there."""
    table = parse_variant(variant).table
    states = [s.name for s in STATES]
    out = []
    for qp_name in run_qp_types(run):
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
            if bare_name(s["qp_type"]) != qp_name or s["verb"] != "modify":
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
        cell = cells.get(s["verb"], {}).get(bare_name(s["state_before"]))
        if cell is None:
            continue
        cell["total"] += s["count"]
        cell[s["result"]] += s["count"]
        qp = bare_name(s["qp_type"])
        cell["per_type"][qp] = cell["per_type"].get(qp, 0) + s["count"]
    for row in cells.values():
        for cell in row.values():
            cell["status"] = _status(cell)
    return {"verbs": list(POST_VERBS), "states": states, "cells": cells}
