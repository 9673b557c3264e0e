"""Matching what a tracked QP delivers against its ledger: each completion and event as it
is polled, and what was still due when a wait ended. Whatever does not match becomes a
divergence, judged through the engine (a rule set's hooks decide what it explains)."""

from __future__ import annotations

import time

from models import rules
from models.enums import EventType, QPState
from models.sources import Rule

from .delivery_windows import DeliveryWindows
from .device import Completion
from .ledger import Found
from .rule_set import RuleSet
from .steplog import StepLog
from .text import completion_text, fields_text
from .track import Track


class Matcher:
    """Matches deliveries against the tracks' ledgers and judges what does not match."""

    def __init__(self, engine: RuleSet, log: StepLog, windows: DeliveryWindows) -> None:
        self.engine = engine
        self.log = log
        self.windows = windows

    def completion(self, track: Track, wc: Completion) -> None:
        """Match one completion against the track's ledger; judge what does not match.

        Any completion opens the track's quiet window: a duplicate of it may follow."""
        engine = self.engine
        engine.active_at = track.active_at = time.monotonic()
        self.log.saw(track, completion_text(wc))
        track.owe_quiet(track.last(), self.windows.window("completion"))
        found = track.ledger.match(wc)
        tags = [f"status={wc.status.name}", f"queue={wc.queue}"]
        if found.due is not None:
            tags += list(found.due.tags)
        observed = f"completion {completion_text(wc)}"
        because = found.because
        if found.due is not None:  # its delay is a transport timer's for timer_rules
            self.windows.delivered("completion", found.due.booked,
                                   f"{found.due.rule.id} on {track.qp_type.name}",
                                   found.due.rule.id)
        if found.found in (Found.MATCH, Found.STATUS, Found.FIELDS) and found.due is not None:
            if found.found is Found.STATUS and because is not None:
                d = engine.divergence(track, "status", because.rule, because.origin,
                                      found.expected, observed, tags)
                engine.diverge(track, d)
            if found.found is Found.FIELDS and because is not None:
                d = engine.divergence(track, "fields", because.rule, because.origin,
                                      found.expected, f"{observed}, {fields_text(wc)}",
                                      [*tags, fields_text(wc)])
                engine.diverge(track, d)
            engine.after_completion(track, wc, found.due.completion)
        elif found.found in (Found.ORDER, Found.NEVER) and because is not None:
            kind = "order" if found.found is Found.ORDER else "completion"
            d = engine.divergence(track, kind, because.rule, because.origin, found.expected,
                                  observed, tags)
            engine.diverge(track, d)
        elif found.found is Found.DUPLICATE and because is not None:
            rule = engine.stray_completion_rule or because.rule
            d = engine.divergence(track, "completion", rule, because.origin, found.expected,
                                  f"again: {observed}", tags)
            engine.diverge(track, d)
        elif found.found is Found.UNKNOWN and not engine.explain_completion(track, wc):
            rule = engine.stray_rule(track, wc)
            d = engine.divergence(track, "completion", rule, track.last(), found.expected,
                                  observed, tags)
            engine.diverge(track, d)

    def event(self, track: Track, event: EventType) -> None:
        """A required event is claimed; a forbidden or unbooked one is judged (SQ_DRAINED
        always: unasked, outside SQD and a second one per drain each have a rule)."""
        engine = self.engine
        engine.active_at = track.active_at = time.monotonic()
        self.log.saw(track, f"event {event.name}")
        drained = event == EventType.SQ_DRAINED
        if drained:
            track.drained_events += 1
        last_wqe = event == EventType.QP_LAST_WQE_REACHED
        claimed, owed = track.ledger.claim(event)
        if claimed is not None:
            # an allowed ("may") event owes no delivery: its delay (siw's QP_FATAL after
            # the TCP connection ended: seconds) measures no window
            if owed:
                self.windows.delivered("event", claimed.booked,
                                       f"{event.name} on {track.qp_type.name}")
            track.last_wqes += last_wqe
            return
        if last_wqe and track.model.srq is not None and track.last_wqes:
            self.log.note_repeated_last_wqe(track)
            return
        because = track.forbidden_now().get(event)
        if drained:
            rule = _drained_rule(track)
            entered = track.last_into(QPState.SQD)
            # nothing booked: the newest move into SQD made it (an SQD->SQD the model refused
            # but the device accepted under a known quirk books nothing, yet is that move)
            origin = because.origin if because is not None else (
                entered if entered is not None else track.last())
            if track.model.state != QPState.SQD and entered is not None:
                origin = entered  # seen after the QP left SQD: the newest drain's event
        elif because is None:
            unbooked = engine.unbooked_event_rule(track, event)
            if unbooked is None:  # the rule set does not judge events nobody booked
                return
            rule, origin = unbooked, track.last()
        else:
            rule, origin = because.rule, because.origin
        d = engine.divergence(track, "event", rule, origin, f"no {event.name} event",
                              f"event {event.name}", [f"event={event.name}"])
        engine.diverge(track, d)

    def missing(self, waited: float) -> None:
        """Everything still due after the wait is a divergence (one per step and rule)."""
        engine = self.engine
        for track in engine.tracks():
            for group in track.ledger.take_missing():
                first = group[0]
                queues = sorted({g.completion.queue for g in group})
                tags = [f"queue={q}" for q in queues]
                tags += list(dict.fromkeys(t for g in group for t in g.tags))
                d = engine.divergence(
                    track, "missing_completion", first.rule, first.origin,
                    ", ".join(completion_text(g.completion) for g in group),
                    f"no such completion within {waited:.2f} s", tags,
                )
                lost = [g.completion.wr_id for g in group]
                track.ledger.excused.update(lost)
                quirk = engine.diverge(track, d)
                if quirk is not None:
                    engine.on_known_missing(track, lost, quirk)
            for pending in track.ledger.take_required():
                d = engine.divergence(
                    track, "missing_event", pending.rule, pending.origin,
                    f"event {pending.event.name}",
                    f"no {pending.event.name} event within {waited:.2f} s",
                    [f"missing_event={pending.event.name}"],
                )
                engine.diverge(track, d)


def _drained_rule(track: Track) -> Rule:
    """Which promise an SQ_DRAINED nobody required breaks.

    Events arrive asynchronously: the end of a drain may be seen after the QP has left
    SQD, so an SQ_DRAINED belongs to the newest drain; only a QP that never drained
    raises it outside SQD.
    """
    if track.drains == 0:
        return rules.SQD_DRAINED_OUTSIDE_SQD
    if track.drained_events > 1:
        return rules.SQD_DRAINED_ONCE
    return rules.SQD_DRAINED_UNASKED
