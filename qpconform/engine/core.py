"""The comparison engine: N tracked QPs, one step log each, one poll loop, bounded waits.

`Engine` is what a rule set (the lone-QP `Checker`, the connected `PairHarness`)
is built on. For every verb the rule set asks the model, calls the device and
hands both to `conclude`, which logs the step, compares the outcome, commits the
model and books what is now due in the QP's `Ledger`. `collect` polls every
tracked QP and matches each completion and event against its ledger; `wait`
runs the bounded windows (a deliberate quiet window, then a longer bounded wait
only while something is still due); `report_missing` turns what never came into
divergences. Every divergence goes through the `Judge`; a known one is followed
(`follow_state`: the model takes the device's state and, entering ERR, books
the flushes the device now owes).

A rule set adds only what is its own: which verbs exist, how a completion the
ledger does not know is explained (`explain_completion`: a send the lone model
knows is on the wire; a flush after an automatic move to ERR on a pair), how an
event nobody booked is judged (`unbooked_event_rule`), and how a record is
worded (`record_verb`).

At ~760 lines this is the one engine module over 500: `Engine` is one class whose
steps (conclude, collect, wait, report what is missing) share its tracks and
windows; what stands alone lives beside it (track.py, ledger.py, judge.py,
choices.py, text.py).
"""

from __future__ import annotations

import copy
import select
import time
from typing import Any

from models import rules, srq
from models.enums import Attr, EventType, QPState
from models.operations import UNSIGNALED_FLUSH_UNRETIRED
from models.outcomes import Expectation, Outcome
from models.qp import QPModel
from models.sources import Rule

from . import blame, unmasked
from .choices import CONSISTENT_RULES, situation
from .device import Completion, VerbResult
from .hazards import CONDITIONS, HazardAvoided, hazards_holding
from .judge import DivergenceError, Judge
from .ledger import QUEUES, Found, Required, event_rule
from .park import Park
from .quirks import Quirk
from .records import Divergence
from .text import (
    completion_text,
    describe_expectation,
    describe_result,
    errno_name,
    fields_text,
    mask_names,
    masked_attrs,
    outcome_tags,
)
from .timing import TIMER, DeliveryLog
from .track import Track

POLL_INTERVAL = 0.002
#: Entering one of these states (or leaving SQD) can raise an event late or forbid one
#: (SQ_DRAINED, an error event after a move to ERR or SQE): such a step opens the event
#: window. WRs that must never run (refused, discarded by RESET) and every delivered
#: completion (its duplicate) open the completion window.
EVENT_STATES = frozenset({QPState.SQD, QPState.SQE, QPState.ERR})


class Engine:
    """Compare tracked QPs with their models; subclasses are the rule sets."""

    #: The rule a completion the ledger cannot place breaks: a second completion of one
    #: WR, or one nobody expected (None: the rule that made it due the first time, else
    #: the send/receive completion rule of its queue).
    stray_completion_rule: Rule | None = None
    #: Seconds between two polls of the CQs while waiting.
    poll_interval: float = POLL_INTERVAL
    #: Quiet windows (seconds) a step opens: after a WR that must never run or a delivered
    #: completion, and after a move that can raise an event late (0: none).
    completion_window: float = 0.0
    event_window: float = 0.0
    #: Rules whose completions a transport timer decides (RC retries exhausted, RNR): their
    #: delay measures the timer, not delivery, so windows do not follow it.
    timer_rules: frozenset[str] = frozenset()
    #: When the engine last stopped holding its polls back on purpose (an unpolled block):
    #: what was due before then waited for the engine, not the device, so its delay is no
    #: delivery sample.
    polls_held_until: float = 0.0
    #: Which deliveries this rule set's windows are judged against ("": a pair's, over the
    #: wire; "lone QP": flushes a QP makes alone, which a pair's network delays say nothing
    #: about). Its delivery kinds read "lone QP completion", "lone QP event".
    delivery_scope: str = ""
    #: Finished pairs still observed (qpconform/engine/park.py): every collect polls them too,
    #: so they stay watched while this rule set runs (None: nothing parked here).
    parking: Park | None = None

    def __init__(
        self, judge: Judge, identity: dict[str, str], delivery: DeliveryLog | None = None
    ) -> None:
        self.judge = judge
        #: the fill of the fields outside the next modify's mask (a machine draws them)
        self.fills: unmasked.FillSource = unmasked.Keyed()
        #: a lone QP's bring-up walk (CheckedQP.bring_to) takes the keyed fill even in a
        #: machine: drawn on every hop, the fills spent the examples' data and the
        #: derandomized search met fewer sequences (planted faults went unfound)
        self.walk_fills: unmasked.FillSource = unmasked.Keyed()
        self.device_identity = identity
        self.delivery = delivery if delivery is not None else DeliveryLog()
        self._pending: list[tuple[str, str, str, str | None, list[str]]] = []
        #: time.monotonic() of the last verb or delivery: what a late item would follow
        self.active_at = time.monotonic()

    def _kind(self, kind: str) -> str:
        """The delivery kind (timing.py) of this rule set's completions or events."""
        return f"{self.delivery_scope} {kind}".lstrip()

    def _window(self, kind: str) -> float:
        """The quiet window of `kind` ("completion", "event") to open now: this rule set's,
        widened by the run's deliveries of that kind."""
        base = self.completion_window if kind == "completion" else self.event_window
        return self.delivery.window(self._kind(kind), base)

    # ------------------------------------------------------------------ the rule set's part
    def tracks(self) -> list[Track]:
        """The QPs whose completions and events are observed now."""
        raise NotImplementedError

    def explain_completion(self, track: Track, wc: Completion) -> bool:
        """A completion the ledger does not know: True if the rule set accounts for it."""
        return False

    def unbooked_event_rule(self, track: Track, event: EventType) -> Rule | None:
        """The rule an event neither required nor forbidden breaks (None: not judged).
        A CQ error is never owed: every CQ has room for all of its queue's WRs; Last WQE
        Reached is an SRQ's QP's, due when it enters ERR."""
        if event == EventType.QP_LAST_WQE_REACHED:
            has_srq = track.model.srq is not None
            return srq.LAST_WQE_REACHED if has_srq else srq.NO_LAST_WQE_WITHOUT_SRQ
        if event == EventType.SRQ_LIMIT_REACHED:  # once per arming
            return srq.SRQ_LIMIT_REACHED
        return rules.CQ_NO_OVERRUN if event == EventType.CQ_ERR else None

    def stray_rule(self, track: Track, wc: Completion) -> Rule:
        """The rule a completion the ledger knows nothing of breaks: an SRQ's receive is
        never flushed with the QP (it is the SRQ's); anything else, the rule set's."""
        queue = track.model.srq
        if queue is not None and wc.queue == "recv" and wc.wr_id in queue.recvs:
            return srq.SRQ_KEEPS_RECEIVES
        return self.stray_completion_rule or (
            rules.SEND_DONE if wc.queue == "send" else rules.RECV_DONE
        )

    def _note_repeated_last_wqe(self, track: Track) -> None:
        """A further Last WQE Reached after the one an SRQ's QP owed: allowed (a may rule),
        recorded as exercised."""
        if self.judge.recorder is not None:
            state = track.model.state.name
            rule_ids = [srq.LAST_WQE_REPEATED.id]
            self.judge.recorder.step(track.qp_type.name, "event", state, None, rule_ids, "match")

    def route(self, track: Track, wc: Completion) -> Track | None:
        """The track a completion polled from `track`'s CQs belongs to (a rule set whose QPs
        share CQs routes by qp_num; default: the polled one); None: the rule set handled it."""
        return track

    def record_verb(self, kind: str) -> str | None:
        """The verb a record of this kind names (None: the verb of the step it comes from)."""
        return None

    def related_tracks(self, track: Track, step: dict[str, Any]) -> list[Track]:
        """Other QPs whose history matters to a divergence placed at `step`."""
        return []

    def after_completion(self, track: Track, wc: Completion, expected: Any) -> None:
        """Called after a completion matched its due entry (right status or wrong)."""

    def on_unknown(self, track: Track) -> None:
        """Called just before an unknown divergence is raised."""

    def on_known_missing(self, track: Track, wr_ids: list[int], quirk: Quirk) -> None:
        """Called when `quirk` excused missing completions (they may still come, late)."""

    # ----------------------------------------------------------------------------- verbs
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
        given, mask = step.get("attrs"), step.get("mask")
        blamed = blame.explained(track, exp, res, step, seen)
        idx = self.log_step(track, exp, res, step, seen)
        track.blamed = idx if blamed else None
        if res.accepted and exp.verb == "modify" and given is not None and mask is not None:
            track.held.update(masked_attrs(given, Attr(int(mask))))
        known: Quirk | None = None
        if res.killed or not exp.allows(res.accepted, res.errno):
            tags = outcome_tags(res) + ([f"state={seen.name}"] if seen is not None else [])
            d = self.divergence(
                track, "outcome", exp.rule, idx, describe_expectation(exp),
                describe_result(res, seen), tags, verb=exp.verb,
            )
            known = self.diverge(track, blame.named(d, blamed, self.judge.quirks))
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
            track.owe_quiet(idx, self._window("completion"))
        return idx, known

    def avoid_hazard(
        self, track: Track, exp: Expectation, attrs: dict[str, int], mask: Attr
    ) -> None:
        """Raise HazardAvoided, recording a known divergence, when a hazard of this run holds
        for the modify about to be sent (qpconform/engine/hazards.py); else nothing."""
        hazards = hazards_holding(
            self.judge.quirks, track.held, track.model.state, attrs, mask, track.qp_type
        )
        if not hazards:
            return
        sent = masked_attrs(attrs, mask)
        compared = CONDITIONS[str(hazards[0].hazard)].fields
        holds = ", ".join(f"{f}={track.held[f]}" for f in compared if f in track.held)
        d = self.divergence(
            track, "hazard", exp.rule, len(track.steps), describe_expectation(exp),
            f"not sent: a known hazard of this device (the QP holds {holds})",
            [f"hazard={hazards[0].hazard}"], verb="modify", attrs=sent, mask=mask_names(mask),
        )
        quirk = next((q for q in hazards if q.matches(d)), None)
        if quirk is None:  # its other conditions (QP types, ...) leave this modify out
            return
        self.judge.verdict(d, [])  # known; no step of the log is marked: nothing was sent
        raise HazardAvoided(quirk, self.judge.known[-1])  # the judged record, as stored

    def moved(
        self, track: Track, before: QPState, after: QPState, step: int, modify: bool = False
    ) -> None:
        """Record a state change. A change, or any modify, into SQD, ERR or SQE or out of SQD
        can raise an event late (SQD->SQD may start a new drain): the event window opens."""
        track.moved(before, after, step)
        if (before != after or modify) and (after in EVENT_STATES or before == QPState.SQD):
            track.owe_events(step, self._window("event"))

    def log_step(
        self,
        track: Track,
        exp: Expectation,
        res: VerbResult,
        step: dict[str, Any],
        seen: QPState | None = None,
    ) -> int:
        """Append one verb to the track's step log (what a reproducer replays)."""
        self.active_at = track.active_at = time.monotonic()
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

    # ---------------------------------------------------------------------- run records
    def record_choice(self, rule: Rule, chosen: str) -> None:
        """What the device did where a "may" rule lets it choose (the report's characteristics)."""
        recorder = self.judge.recorder
        if recorder is not None:
            recorder.choice(rule.id, chosen)

    def choose(
        self, track: Track, rule: Rule, chosen: str, idx: int, key: str | None = None
    ) -> Quirk | None:
        """Record the device's choice under a "may" rule for the step `idx`; for a value
        rule, a different choice in the very same situation before is a divergence (kind
        "inconsistent"): either outcome conforms, choosing both does not
        (qpconform/engine/choices.py; `key`: the situation, when the step's verb and
        attributes are not it). Returns the quirk that knows it, if any."""
        recorder = self.judge.recorder
        if rule.id not in CONSISTENT_RULES:  # a choice that may depend on timing: recorded
            self.record_choice(rule, chosen)
            return None
        if recorder is None:
            return None
        key = key or situation(track.qp_type.name, track.steps[idx])
        where = f"{self.judge.test or 'this run'}, step {idx + 1}"
        earlier = recorder.choice(rule.id, chosen, key, where)
        if earlier is None:
            return None
        before, at = earlier
        d = self.divergence(
            track, "inconsistent", rule, idx,
            f"the same choice as before in this situation ({rule.kind} rule): {before} "
            f"(first at {at})",
            chosen, [f"choice={chosen}"],
        )
        d.context["situation"] = key
        return self.diverge(track, d)

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
        self._pending.append((track.qp_type.name, exp.verb, exp.state_before.name, target, ids))

    def flush_notes(self, result: str) -> None:
        """Write the queued run-record steps with `result` (match, known or divergence)."""
        pending, self._pending = self._pending, []
        if self.judge.recorder is not None:
            for qp_type, verb, before, target, rule_ids in pending:
                self.judge.recorder.step(qp_type, verb, before, target, rule_ids, result)

    # -------------------------------------------------------------------------- judging
    def divergence(
        self,
        track: Track,
        kind: str,
        rule: Rule,
        origin: int,
        expected: str,
        observed: str,
        tags: list[str],
        **override: Any,
    ) -> Divergence:
        """A record of one difference, placed at the step `origin` of the track's log."""
        step = track.steps[origin] if 0 <= origin < len(track.steps) else {}
        fields: dict[str, Any] = {
            "verb": self.record_verb(kind) or step.get("verb", "settle"),
            "state": step.get("expect", {}).get("state_before", track.model.state.name),
            "attrs": dict(step.get("attrs", {})),
            "mask": list(step.get("mask", [])),
        }
        fields.update(override)
        side = [] if track.side is None else [f"side={track.side}"]
        prefix = "" if track.side is None else f"[{track.side}] "
        context = track.context(origin)
        for other in self.related_tracks(track, step):  # e.g. the requester of a wire step
            context["after"] = sorted({*context["after"], *other.context(-1)["after"]})
        fields.setdefault("context", context)
        return Divergence(
            qp_type=track.qp_type.name,
            expected=prefix + expected,
            observed=prefix + observed,
            rule_id=rule.id,
            rule_summary=rule.summary,
            source=str(rule.source),
            rule_kind=rule.kind or "",
            rule_layer=rule.layer or "",
            device=dict(self.device_identity),
            steps=copy.deepcopy(track.steps),
            kind=kind,
            tags=[kind, *side, *tags],
            qp_num=track.qp_num,
            **fields,
        )

    def diverge(self, track: Track, d: Divergence) -> Quirk | None:
        """Judge `d`: the quirk if known, None if deferred; raises if unknown."""
        try:
            return self.judge.verdict(d, track.steps)
        except DivergenceError:
            track.broken = True
            self.on_unknown(track)
            raise

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

    # ------------------------------------------------------------------------- observing
    def collect(self) -> None:
        """Poll every tracked QP once: completions (send CQ first), then events; and every
        parked pair (their own divergences are kept by the park, never raised here)."""
        if self.parking is not None:
            self.parking.poll()
        tracks = self.tracks()
        for track in tracks:
            done = track.handle.poll()
            for wc in sorted(done, key=lambda c: QUEUES.index(c.queue)):
                target = self.route(track, wc)
                if target is not None:
                    self.on_completion(target, wc)
        self.take_events(tracks, 0.0)

    def collect_events(self, track: Track) -> None:
        """Take the events that already arrived (no wait), so an event is judged in the state
        the verb that raised it left (completions wait for the settle that logs them)."""
        track.reading_events()
        for ev in track.handle.events(0.0):
            self.on_event(track, ev.event_type)

    def take_events(self, tracks: list[Track], timeout: float) -> bool:
        """Wait up to `timeout` for an event on any of `tracks` and handle what arrived.

        Handles with an `event_fd` are watched together with one select(); the others are
        asked in turn (the first with the timeout). Returns whether anything arrived.
        """
        by_fd: dict[int, Track] = {}
        asked: list[Track] = []
        for track in tracks:
            track.reading_events()
            fd = getattr(track.handle, "event_fd", None)
            if fd is None:
                asked.append(track)
            else:
                by_fd[fd] = track
        got = False
        if by_fd:
            wait = 0.0 if asked else timeout
            ready = select.select(list(by_fd), [], [], wait)[0]
            for fd in ready:
                for ev in by_fd[fd].handle.events(0.0):
                    got = True
                    self.on_event(by_fd[fd], ev.event_type)
        for i, track in enumerate(asked):
            for ev in track.handle.events(timeout if i == 0 and not got else 0.0):
                got = True
                self.on_event(track, ev.event_type)
        return got

    def block(self, timeout: float) -> None:
        """Wait up to `timeout` for an event on any tracked QP, handling what arrives."""
        start = time.monotonic()
        got = self.take_events(self.tracks(), timeout)
        left = timeout - (time.monotonic() - start)
        if not got and left > 0 and not self._wakes_on_arrival():  # else: a completion came
            time.sleep(left)

    def waiting(self) -> bool:
        """Is anything still due on a tracked QP?"""
        return any(t.ledger.waiting() for t in self.tracks())

    def wait(self, window: float, bound: float) -> float:
        """Observe for `window` s (the deliberate quiet window), then up to `bound` s more
        while anything is due. Returns the seconds waited."""
        poll = self.poll_interval if not self._wakes_on_arrival() else max(window, bound)
        start = time.monotonic()
        deadline = start + window
        while True:
            self.collect()
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.block(min(poll, left))
        deadline = time.monotonic() + bound
        while self.waiting() and time.monotonic() < deadline:
            self.block(min(poll, max(0.0, deadline - time.monotonic())))
            self.collect()
        return time.monotonic() - start

    def _wakes_on_arrival(self) -> bool:
        """Do all tracked QPs' waits end as soon as anything arrives on any of them (a
        device behind an executor: qpconform/adapters/remote_device.py)? Then one wait
        covers the window instead of a poll every poll_interval: each poll costs a round
        trip there, and nothing is seen later for it."""
        tracks = self.tracks()
        return bool(tracks) and all(
            getattr(t.handle, "wakes_on_arrival", False) for t in tracks)

    def open_settle(self, window: float) -> None:
        """Log a settle step on every track: what is due, and (later) what was seen."""
        for track in self.tracks():
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
        for track in self.tracks():
            step, track.settle_step = track.settle_step, None
            if step is None:
                continue
            step["observed"] = ", ".join(step["seen"]) or "nothing"
            empty = not (step["completions"] or step["events"] or step["seen"])
            if empty and track.steps and track.steps[-1] is step:
                track.steps.pop()

    def _saw(self, track: Track, text: str) -> None:
        if track.settle_step is not None:
            track.settle_step["seen"].append(text)
            track.settle_step["observed"] = ", ".join(track.settle_step["seen"])

    # ------------------------------------------------------------------------- matching
    def on_completion(self, track: Track, wc: Completion) -> None:
        """Match one completion against the track's ledger; judge what does not match.

        Any completion opens the track's quiet window: a duplicate of it may follow."""
        self.active_at = track.active_at = time.monotonic()
        self._saw(track, completion_text(wc))
        track.owe_quiet(track.last(), self._window("completion"))
        found = track.ledger.match(wc)
        tags = [f"status={wc.status.name}", f"queue={wc.queue}"]
        if found.due is not None:
            tags += list(found.due.tags)
        observed = f"completion {completion_text(wc)}"
        because = found.because
        if found.due is not None and found.due.booked >= self.polls_held_until:
            timer = found.due.rule.id in self.timer_rules  # its delay is a transport timer's
            self.delivery.add(TIMER if timer else self._kind("completion"),
                              time.monotonic() - found.due.booked,
                              f"{found.due.rule.id} on {track.qp_type.name}")
        if found.found in (Found.MATCH, Found.STATUS, Found.FIELDS) and found.due is not None:
            if found.found is Found.STATUS and because is not None:
                d = self.divergence(track, "status", because.rule, because.origin,
                                    found.expected, observed, tags)
                self.diverge(track, d)
            if found.found is Found.FIELDS and because is not None:
                d = self.divergence(track, "fields", because.rule, because.origin,
                                    found.expected, f"{observed}, {fields_text(wc)}",
                                    [*tags, fields_text(wc)])
                self.diverge(track, d)
            self.after_completion(track, wc, found.due.completion)
        elif found.found in (Found.ORDER, Found.NEVER) and because is not None:
            kind = "order" if found.found is Found.ORDER else "completion"
            d = self.divergence(track, kind, because.rule, because.origin, found.expected,
                                observed, tags)
            self.diverge(track, d)
        elif found.found is Found.DUPLICATE and because is not None:
            rule = self.stray_completion_rule or because.rule
            d = self.divergence(track, "completion", rule, because.origin, found.expected,
                                f"again: {observed}", tags)
            self.diverge(track, d)
        elif found.found is Found.UNKNOWN and not self.explain_completion(track, wc):
            rule = self.stray_rule(track, wc)
            d = self.divergence(track, "completion", rule, track.last(), found.expected,
                                observed, tags)
            self.diverge(track, d)

    def on_event(self, track: Track, event: EventType) -> None:
        """A required event is claimed; a forbidden or unbooked one is judged (SQ_DRAINED
        always: unasked, outside SQD and a second one per drain each have a rule)."""
        self.active_at = track.active_at = time.monotonic()
        self._saw(track, f"event {event.name}")
        drained = event == EventType.SQ_DRAINED
        if drained:
            track.drained_events += 1
        last_wqe = event == EventType.QP_LAST_WQE_REACHED
        claimed, owed = track.ledger.claim(event)
        if claimed is not None:
            # an allowed ("may") event owes no delivery: its delay (siw's QP_FATAL after
            # the TCP connection ended: seconds) measures no window
            if owed and claimed.booked >= self.polls_held_until:
                self.delivery.add(self._kind("event"), time.monotonic() - claimed.booked,
                                  f"{event.name} on {track.qp_type.name}")
            track.last_wqes += last_wqe
            return
        if last_wqe and track.model.srq is not None and track.last_wqes:
            self._note_repeated_last_wqe(track)
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
            unbooked = self.unbooked_event_rule(track, event)
            if unbooked is None:  # the rule set does not judge events nobody booked
                return
            rule, origin = unbooked, track.last()
        else:
            rule, origin = because.rule, because.origin
        d = self.divergence(track, "event", rule, origin, f"no {event.name} event",
                            f"event {event.name}", [f"event={event.name}"])
        self.diverge(track, d)

    def report_missing(self, waited: float) -> None:
        """Everything still due after the wait is a divergence (one per step and rule)."""
        for track in self.tracks():
            for group in track.ledger.take_missing():
                first = group[0]
                queues = sorted({g.completion.queue for g in group})
                tags = [f"queue={q}" for q in queues]
                tags += list(dict.fromkeys(t for g in group for t in g.tags))
                d = self.divergence(
                    track, "missing_completion", first.rule, first.origin,
                    ", ".join(completion_text(g.completion) for g in group),
                    f"no such completion within {waited:.2f} s", tags,
                )
                lost = [g.completion.wr_id for g in group]
                track.ledger.excused.update(lost)
                quirk = self.diverge(track, d)
                if quirk is not None:
                    self.on_known_missing(track, lost, quirk)
            for pending in track.ledger.take_required():
                d = self.divergence(
                    track, "missing_event", pending.rule, pending.origin,
                    f"event {pending.event.name}",
                    f"no {pending.event.name} event within {waited:.2f} s",
                    [f"missing_event={pending.event.name}"],
                )
                self.diverge(track, d)

    def observe(self, window: float, bound: float) -> None:
        """One bounded observation of every tracked QP (a quiet `window`, then up to `bound`
        s while something is due); then what is missing is judged."""
        self.open_settle(window)
        try:
            waited = self.wait(window, bound)
            self.report_missing(waited)
        finally:
            self.close_settle()

    def note_watched(self) -> None:
        """Record the "must not happen" rules a deliberate quiet window just checked on each
        QP (only there: the other windows' lengths depend on timing, and a replay must
        record the same steps)."""
        if self.judge.recorder is None:
            return
        for track in self.tracks():
            ids = [r.id for r in _watched_in_quiet(track)]
            state = track.model.state.name
            self.judge.recorder.step(track.qp_type.name, "quiet", state, None, ids, "match")

    def poll_and_settle(self, bound: float) -> None:
        """One poll of every tracked QP, the bounded wait only while something is due, and
        no sleeping otherwise: the cheap check after a step.

        A stray completion or event that comes later is judged at a later poll, against
        the ledger entry (and step) that forbade it; quiet windows that expired meanwhile
        are closed (they were observed by the polls of the steps that ran).
        """
        self.observe(0.0, bound)
        for track in self.tracks():
            if track.quiet_left() == 0.0:
                track.close_quiet()

    def serve_events(self, track: Track, bound: float) -> bool:
        """Before a modify that could judge an event otherwise (Track.overlap_events): wait
        out the rest of the QP's event window, observing every QP, so an event the previous
        move raised late is judged against that move. Returns whether it waited (what it
        delivered may have changed the model)."""
        left = track.events_left()
        if left > 0:
            self.observe(left, bound)
        return left > 0

    def serve_quiet(self, bound: float, tracks: list[Track] | None = None) -> None:
        """Wait out what is left of the quiet windows of `tracks` (default: all), observing
        every tracked QP, then close them. Runs before what would end the observation."""
        chosen = self.tracks() if tracks is None else tracks
        left = max((t.quiet_left() for t in chosen), default=0.0)
        self.observe(left, bound)
        for track in chosen:
            if track.quiet_from is not None:  # this window ends the QP's observation
                self.delivery.note_closed(self._kind("completion"), track.quiet_len)
                self.delivery.note_closed(self._kind("event"), track.events_len)
            track.close_quiet()


def _self_move(exp: Expectation, step: dict[str, Any], now: QPState) -> bool:
    """Was this an accepted modify with STATE to the state the QP was already in?"""
    return (
        exp.verb == "modify" and "STATE" in step.get("mask", ())
        and exp.state_before == exp.state_if_accepted == now
    )


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
