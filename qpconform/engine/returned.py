"""The lone QP's returned values, judged by models/returned.py: what create_qp and its CQs'
create_cq wrote back (when the checker opens the QP) and what every query_qp the checker
already makes reports beside the state (its init_attr.cap and cur_qp_state). No verb is
added: the values ride on the calls the lone engine makes anyway (lone.py).

A known divergence here is followed by not judging that field again for this QP, so one
bug is reported once.
"""

from __future__ import annotations

from typing import Any

from models import returned
from models.enums import QPState
from models.sources import Rule

from .core import Engine
from .device import Created, QueryResult
from .track import Track


def created_of(handle: Any) -> Created | None:
    """What the handle says creating it handed back (a device that reads none: None)."""
    found = getattr(handle, "created", None)
    return found if isinstance(found, Created) else None


def judge_created(chk: Engine, track: Track, created: Created | None) -> None:
    """create_qp's written-back caps and the CQs' cqe against what was asked; logged as one
    run-record step ("create") naming the rules checked. An unknown divergence raises."""
    if created is None:
        return
    checked: list[Rule] = [returned.CREATE_CAP]
    misses = returned.created_cap(created.asked, created.cap)
    if created.cqe:
        checked.append(returned.CQ_CQE)
        misses += returned.cqe_short(created.cqe_asked, created.cqe)
    result = "match"
    if misses:  # a step a reproducer replays: its create is checked the same way
        track.steps.append({
            "verb": "create", "qp_type": track.qp_type.name, "returned": {
                "asked": dict(created.asked, cqe=created.cqe_asked),
                "cap": dict(created.cap), "cqe": dict(created.cqe)},
            "expected": "; ".join(f"{name} {allowed}" for _, name, allowed, _ in misses),
            "observed": "; ".join(f"{name}={got}" for _, name, _, got in misses),
        })
    for rule, name, allowed, got in misses:
        d = chk.divergence(
            track, "readback", rule, track.last(), f"{name} {allowed}",
            f"create returned {name}={got}",
            [f"field={name}", "read=lower"], verb="create", attrs={}, mask=[],
        )
        d.context["asked"] = dict(created.asked, cqe=created.cqe_asked)
        result = "divergence"
        if chk.diverge(track, d) is not None:
            result = "known"
    if chk.judge.recorder is not None:
        chk.judge.recorder.step(
            track.qp_type.name, "create", QPState.RESET.name, None, [r.id for r in checked],
            result,
        )


def query_rules(created: Created | None, found: QueryResult) -> tuple[Rule, ...]:
    """The rules a query_qp result lets the checker judge (for the step's run record)."""
    rules: list[Rule] = []
    if "cur_qp_state" in found.attrs:
        rules.append(returned.CUR_STATE)
    if created is not None and found.cap is not None:
        rules += [returned.QUERY_CAP, returned.QUERY_INLINE]
    return tuple(rules)


def judge_query(
    chk: Engine, track: Track, created: Created | None, found: QueryResult, origin: int,
    followed: set[str],
) -> None:
    """One query_qp's cur_qp_state and init_attr.cap (the step `origin` made it). A field in
    `followed` (a known divergence seen before on this QP) is not judged again; a known one
    is added to it."""
    misses: list[returned.Miss] = []
    cur = found.attrs.get("cur_qp_state")
    if cur is not None and "cur_qp_state" not in followed:
        allowed = returned.cur_state_allowed(found.state)
        if cur in allowed:
            if found.state != QPState.RESET:  # in RESET both choices read the same
                how = "as qp_state" if cur == found.state else "RESET (not written)"
                chk.log.record_choice(returned.CUR_STATE, how)
        else:
            shown = "|".join(QPState(v).name for v in sorted(allowed))
            misses.append((returned.CUR_STATE, "cur_qp_state", shown, cur))
    if created is not None and found.cap is not None:
        misses += returned.queried_cap(created.asked, created.cap, found.cap)
    for rule, name, allowed, got in misses:
        if name in followed:
            continue
        tags = [f"field={name}"]
        if rule is returned.QUERY_CAP and created is not None and name in created.cap:
            tags.append("read=higher" if got > created.cap[name] else "read=lower")
        d = chk.divergence(
            track, "readback", rule, origin, f"{name} {allowed}", f"query_qp {name}={got}",
            tags,
        )
        if chk.diverge(track, d) is not None:
            followed.add(name)
