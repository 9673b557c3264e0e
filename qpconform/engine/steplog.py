"""The engine's records of what it did: each QP's step log (what a reproducer replays,
including the settle steps that say what was due and what was seen) and the run record's
steps and choices, each step written with its result once the verdict is known."""

from __future__ import annotations

import time
from typing import Any

from models import rules, srq
from models.enums import Attr, QPState
from models.operations import UNSIGNALED_FLUSH_UNRETIRED
from models.outcomes import Expectation
from models.qp import QPModel
from models.sources import Rule

from .device import VerbResult
from .ledger import QUEUES, event_rule
from .rule_set import RuleSet
from .text import describe_expectation, describe_result, mask_names, masked_attrs
from .track import Track

#: A run-record step waiting for its result: QP type, verb, state before, target, rule ids.
Pending = tuple[str, str, str, str | None, list[str]]


class StepLog:
    """Writes the step logs of the engine's tracks and the run record's steps."""

    def __init__(self, engine: RuleSet) -> None:
        self.engine = engine
        #: run-record steps queued by `note`, written with their result by `flush_notes`
        self.pending: list[Pending] = []

    def step(
        self,
        track: Track,
        exp: Expectation,
        res: VerbResult,
        step: dict[str, Any],
        seen: QPState | None = None,
    ) -> int:
        """Append one verb to the track's step log (what a reproducer replays)."""
        self.engine.active_at = track.active_at = time.monotonic()
        entry: dict[str, Any] = {"verb": exp.verb}
        if track.side is not None:
            entry["side"] = track.side
        attrs, mask = step.pop("attrs", None), step.pop("mask", None)
        if exp.verb == "modify" and mask is not None:
            mask = Attr(int(mask))
            entry["attrs"] = masked_attrs(attrs or {}, mask)
            entry.update(mask=mask_names(mask), mask_value=int(mask))
        entry.update(step)
        entry.update(
            expected=describe_expectation(exp),
            observed=describe_result(res, seen),
            rule=exp.rule.id,
            expect={
                "outcome": exp.outcome.value,
                "errnos": None if exp.errnos is None else sorted(exp.errnos),
                "state_before": exp.state_before.name,
                "state_if_accepted": exp.state_if_accepted.name,
            },
            result={
                "accepted": res.accepted,
                "errno": res.errno,
                "state": None if seen is None else seen.name,
            },
        )
        reads = _state_names(track.model, exp)
        if reads is not None:  # a variant with more than one name for a state (iwarp)
            entry["expect"]["reads"] = reads
        track.steps.append(entry)
        return len(track.steps) - 1

    # ------------------------------------------------------------------- settle steps
    def open_settle(self, window: float) -> None:
        """Log a settle step on every track: what is due, and (later) what was seen."""
        for track in self.engine.tracks():
            ledger = track.ledger
            step = {
                "verb": "settle",
                "window": window,
                "completions": [
                    [d.completion.wr_id, d.completion.queue, d.completion.status.name]
                    for q in QUEUES
                    for d in ledger.due[q]
                ],
                "never_run": sorted(ledger.never),
                "events": [e.event.name for e in ledger.required],
                "expected": ledger.due_text() or "nothing",
                "observed": "",
                "seen": [],
            }
            if track.side is not None:
                step["side"] = track.side
            track.settle_step = step
            track.steps.append(step)

    def close_settle(self) -> None:
        """Finish the settle steps; drop those where nothing was due or seen."""
        for track in self.engine.tracks():
            step, track.settle_step = track.settle_step, None
            if step is None:
                continue
            step["observed"] = ", ".join(step["seen"]) or "nothing"
            empty = not (step["completions"] or step["events"] or step["seen"])
            if empty and track.steps and track.steps[-1] is step:
                track.steps.pop()

    def saw(self, track: Track, text: str) -> None:
        """Add what was delivered to the track's open settle step (if any)."""
        if track.settle_step is not None:
            track.settle_step["seen"].append(text)
            track.settle_step["observed"] = ", ".join(track.settle_step["seen"])

    # --------------------------------------------------------------------- run record
    def record_choice(self, rule: Rule, chosen: str) -> None:
        """What the device did where a "may" rule lets it choose (the report's characteristics)."""
        recorder = self.engine.judge.recorder
        if recorder is not None:
            recorder.choice(rule.id, chosen)

    def note(
        self, track: Track, exp: Expectation, extra: Rule | None = None, also: tuple[Rule, ...] = ()
    ) -> None:
        """Queue one run-record step, written with its result by `flush_notes` (`extra` and
        `also`: rules the step checks beyond the expectation's own)."""
        target = exp.state_if_accepted.name if exp.verb == "modify" else None
        ids = ([extra.id] if extra else []) + [r.id for r in (*exp.checked, *also)]
        ids += [event_rule(exp, e).id for e in exp.forbidden_events]  # watched from now on
        if exp.state_if_accepted == QPState.ERR and track.ledger.silent:  # may be flushed
            ids.append(UNSIGNALED_FLUSH_UNRETIRED.id)
        ids = list(dict.fromkeys(ids))
        self.pending.append((track.qp_type.name, exp.verb, exp.state_before.name, target, ids))

    def flush_notes(self, result: str) -> None:
        """Write the queued run-record steps with `result` (match, known or divergence)."""
        pending, self.pending = self.pending, []
        recorder = self.engine.judge.recorder
        if recorder is not None:
            for qp_type, verb, before, target, rule_ids in pending:
                recorder.step(qp_type, verb, before, target, rule_ids, result)

    def note_repeated_last_wqe(self, track: Track) -> None:
        """A further Last WQE Reached after the one an SRQ's QP owed: allowed (a may rule),
        recorded as exercised."""
        recorder = self.engine.judge.recorder
        if recorder is not None:
            state = track.model.state.name
            rule_ids = [srq.LAST_WQE_REPEATED.id]
            recorder.step(track.qp_type.name, "event", state, None, rule_ids, "match")

    def note_watched(self) -> None:
        """Record the "must not happen" rules a deliberate quiet window just checked on each
        QP (only there: the other windows' lengths depend on timing, and a replay must
        record the same steps)."""
        recorder = self.engine.judge.recorder
        if recorder is None:
            return
        for track in self.engine.tracks():
            ids = [r.id for r in _watched_in_quiet(track)]
            state = track.model.state.name
            recorder.step(track.qp_type.name, "quiet", state, None, ids, "match")


def _state_names(model: QPModel, exp: Expectation) -> dict[str, list[str]] | None:
    """The state names query_qp may report after `exp`, accepted and refused, when a state
    has more than one (the iwarp variant; an accepted "may" move may also not happen);
    None when each has one name only."""
    after = {*model.reported(exp.state_if_accepted)}
    for state in exp.may_land:
        after |= model.reported(state)
    before = model.reported(exp.state_before)
    if len(after) == 1 and len(before) == 1:
        return None
    return {
        "accepted": [s.name for s in sorted(after)],
        "refused": [s.name for s in sorted(before)],
    }


def _watched_in_quiet(track: Track) -> list[Rule]:
    """The "must not happen" rules a quiet window checks on one QP: no CQ overrun and, where
    SQD drains, the promise an SQ_DRAINED nobody asked for would break now."""
    watched = [rules.CQ_NO_OVERRUN]
    if track.model.srq is None:
        watched.append(srq.NO_LAST_WQE_WITHOUT_SRQ)
    elif track.model.state == QPState.ERR:  # a repeated Last WQE Reached may come now
        watched.append(srq.LAST_WQE_REPEATED)
    if track.model.variant.connection_managed:  # iWARP's SQD is CLOSING: no drain
        return watched
    if track.drains == 0:
        watched.append(rules.SQD_DRAINED_OUTSIDE_SQD)
    elif track.drained_events >= 1:
        watched.append(rules.SQD_DRAINED_ONCE)
    elif not track.model.notify_requested:
        watched.append(rules.SQD_DRAINED_UNASKED)
    return watched
