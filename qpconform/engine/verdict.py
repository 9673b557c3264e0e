"""The verdict on one verb: its step logged, its outcome compared with the model's
expectation, the model committed and what is now due booked in the QP's ledger; the
choices "may" rules leave the device, held to one per situation; and a known divergence
followed (`follow_state`: the model takes the device's state and, entering ERR, books the
flushes the device now owes)."""

from __future__ import annotations

from typing import Any

from models import rules, srq
from models.enums import Attr, QPState
from models.outcomes import Expectation, Outcome
from models.sources import Rule

from . import blame
from .choices import CONSISTENT_RULES, situation
from .delivery_windows import DeliveryWindows
from .device import VerbResult
from .hazards import CONDITIONS, HazardAvoided, hazards_holding
from .ledger import Required
from .quirks import Quirk
from .rule_set import RuleSet
from .steplog import StepLog
from .text import (
    describe_expectation,
    describe_result,
    errno_name,
    mask_names,
    masked_attrs,
    outcome_tags,
)
from .track import Track

#: Entering one of these states (or leaving SQD) can raise an event late or forbid one
#: (SQ_DRAINED, an error event after a move to ERR or SQE): such a step opens the event
#: window. WRs that must never run (refused, discarded by RESET) and every delivered
#: completion (its duplicate) open the completion window.
EVENT_STATES = frozenset({QPState.SQD, QPState.SQE, QPState.ERR})


class Verdict:
    """Concludes each verb against the model and follows what a known divergence changed."""

    def __init__(self, engine: RuleSet, log: StepLog, windows: DeliveryWindows) -> None:
        self.engine = engine
        self.log = log
        self.windows = windows

    def conclude(
        self,
        track: Track,
        exp: Expectation,
        res: VerbResult,
        step: dict[str, Any],
        seen: QPState | None = None,
    ) -> tuple[int, Quirk | None]:
        """Log a verb, compare its outcome, commit the model, book what is due.

        Returns the step's index and the quirk that covered a wrong outcome (if any).
        """
        engine = self.engine
        given, mask = step.get("attrs"), step.get("mask")
        blamed = blame.explained(track, exp, res, step, seen)
        idx = self.log.step(track, exp, res, step, seen)
        track.blamed = idx if blamed else None
        if res.accepted and exp.verb == "modify" and given is not None and mask is not None:
            track.held.update(masked_attrs(given, Attr(int(mask))))
        known: Quirk | None = None
        if res.killed or not exp.allows(res.accepted, res.errno):
            tags = outcome_tags(res) + ([f"state={seen.name}"] if seen is not None else [])
            d = engine.divergence(
                track, "outcome", exp.rule, idx, describe_expectation(exp),
                describe_result(res, seen), tags, verb=exp.verb,
            )
            known = engine.diverge(track, blame.named(d, blamed, engine.judge.quirks))
        if exp.outcome is Outcome.EITHER and known is None and not res.killed:
            chosen = "accepted" if res.accepted else f"refused ({errno_name(res.errno)})"
            known = self.choose(track, exp.rule, chosen, idx)
        track.model.apply(exp, res.accepted)
        self.moved(track, exp.state_before, track.model.state, idx, exp.verb == "modify")
        if res.accepted and _self_move(exp, track.steps[idx], track.model.state):
            track.self_moves.append((idx, track.model.state.name))
        if res.accepted:
            track.ledger.expect(exp, idx)
        never = len(track.ledger.never)
        track.ledger.note_never_run(track.model.queues.never_run, exp, idx)
        if len(track.ledger.never) > never:  # a WR that must never run: watch that it does not
            track.owe_quiet(idx, self.windows.window("completion"))
        return idx, known

    def avoid_hazard(
        self, track: Track, exp: Expectation, attrs: dict[str, int], mask: Attr
    ) -> None:
        """Raise HazardAvoided, recording a known divergence, when a hazard of this run holds
        for the modify about to be sent (qpconform/engine/hazards.py); else nothing."""
        judge = self.engine.judge
        hazards = hazards_holding(
            judge.quirks, track.held, track.model.state, attrs, mask, track.qp_type
        )
        if not hazards:
            return
        sent = masked_attrs(attrs, mask)
        compared = CONDITIONS[str(hazards[0].hazard)].fields
        holds = ", ".join(f"{f}={track.held[f]}" for f in compared if f in track.held)
        d = self.engine.divergence(
            track, "hazard", exp.rule, len(track.steps), describe_expectation(exp),
            f"not sent: a known hazard of this device (the QP holds {holds})",
            [f"hazard={hazards[0].hazard}"], verb="modify", attrs=sent, mask=mask_names(mask),
        )
        quirk = next((q for q in hazards if q.matches(d)), None)
        if quirk is None:  # its other conditions (QP types, ...) leave this modify out
            return
        judge.verdict(d, [])  # known; no step of the log is marked: nothing was sent
        raise HazardAvoided(quirk, judge.known[-1])  # the judged record, as stored

    def moved(
        self, track: Track, before: QPState, after: QPState, step: int, modify: bool = False
    ) -> None:
        """Record a state change. A change, or any modify, into SQD, ERR or SQE or out of SQD
        can raise an event late (SQD->SQD may start a new drain): the event window opens."""
        track.moved(before, after, step)
        if (before != after or modify) and (after in EVENT_STATES or before == QPState.SQD):
            track.owe_events(step, self.windows.window("event"))

    def follow_state(self, track: Track, state: QPState, origin: int) -> None:
        """A known divergence left the QP in `state`: the model follows, and entering ERR
        books the flushes the device now owes."""
        before = track.model.state
        owed = track.model.err_events(before) if state == QPState.ERR else ()
        for c in track.model.follow(state):
            track.ledger.add_due(c, rules.FLUSH_ON_ERROR, origin)
        for e in owed:  # an SRQ's QP entering ERR: Last WQE Reached
            track.ledger.required.append(Required(e, srq.LAST_WQE_REACHED, origin))
        self.moved(track, before, state, origin)

    def choose(
        self, track: Track, rule: Rule, chosen: str, idx: int, key: str | None = None
    ) -> Quirk | None:
        """Record the device's choice under a "may" rule for the step `idx`; for a value
        rule, a different choice in the very same situation before is a divergence (kind
        "inconsistent"): either outcome conforms, choosing both does not
        (qpconform/engine/choices.py; `key`: the situation, when the step's verb and
        attributes are not it). Returns the quirk that knows it, if any."""
        engine = self.engine
        recorder = engine.judge.recorder
        if rule.id not in CONSISTENT_RULES:  # a choice that may depend on timing: recorded
            self.log.record_choice(rule, chosen)
            return None
        if recorder is None:
            return None
        key = key or situation(track.qp_type.name, track.steps[idx])
        where = f"{engine.judge.test or 'this run'}, step {idx + 1}"
        earlier = recorder.choice(rule.id, chosen, key, where)
        if earlier is None:
            return None
        before, at = earlier
        d = engine.divergence(
            track, "inconsistent", rule, idx,
            f"the same choice as before in this situation ({rule.kind} rule): {before} "
            f"(first at {at})",
            chosen, [f"choice={chosen}"],
        )
        d.context["situation"] = key
        return engine.diverge(track, d)


def _self_move(exp: Expectation, step: dict[str, Any], now: QPState) -> bool:
    """Was this an accepted modify with STATE to the state the QP was already in?"""
    return (
        exp.verb == "modify" and "STATE" in step.get("mask", ())
        and exp.state_before == exp.state_if_accepted == now
    )
