"""What a connected pair adds to the engine's judgement of a completion or an event.

`CompletionJudgement` is a part of `PairHarness` (qpconform/engine/pair.py); the
harness's hooks (`after_completion`, `diverge`, `on_event`) ask it:

- a value a "may" rule lets the device choose (a receive's byte_len, an error status)
  is a characteristic of the run, recorded as a choice (qpconform/engine/choices.py);
- a divergence of a WR posted with its unused fields filled, which that fill explains,
  is filed under the rule that says those fields are ignored;
- a Last WQE Reached nobody owes may be the device's own move to ERR (followed first);
- an SQ_DRAINED while started sends are outstanding breaks the drain rule.
"""

from __future__ import annotations

from typing import Any

from models.enums import EventType, QPState, WCStatus
from models.pair_checks import SQ_DRAINING
from models.sources import MAY

from . import blame
from .device import Completion
from .records import Divergence
from .track import Track

S = QPState


class CompletionJudgement:
    """The pair's part of judging completions and events: it reads the harness's ends,
    device and posted fills, and judges through its engine."""

    def __init__(self, harness: Any) -> None:
        self.h = harness

    def byte_len_choice(self, track: Track, wc: Completion, expected: Any) -> None:
        """A receive's byte_len under a "may" rule (UD: the GRH counted or not; a WRITE with
        immediate: its length or 0): a characteristic, the same for every such completion
        of the run (qpconform/engine/choices.py); a value outside the rule is judged by
        the ledger, not here."""
        allowed = getattr(expected, "byte_len", None)
        if allowed is None or wc.byte_len is None or wc.opcode is None:
            return
        values, rule = allowed
        if rule.kind != MAY or wc.byte_len not in values:
            return
        key = f"{track.qp_type.name} {wc.opcode.name}"
        self.h.verdict.choose(track, rule, f"byte_len={wc.byte_len}", track.last(), key)

    def status_choice(self, track: Track, wc: Completion, expected: Any) -> None:
        """A completion whose status a "may" rule lets the device choose (an RC request its
        responder's QP access flags refuse: Remote Access Error or Invalid Request): a
        characteristic, the same for every such completion of the run."""
        allowed = getattr(expected, "statuses", None)
        if allowed is None or not expected.allows_status(wc.status):
            return
        rule = allowed[1]
        key = f"{track.qp_type.name} {rule.id}"
        self.h.verdict.choose(track, rule, f"status={wc.status.name}", track.last(), key)

    def explained_by_fill(self, d: Divergence) -> bool:
        """Does `d` concern a WR posted with a fill (a wire step's completions, tagged
        send_wr=N), and show that fill (blame.unused_explains)?"""
        filled = self.h.post.filled
        wrs = {int(t.split("=", 1)[1]) for t in d.tags if t.startswith("send_wr=")}
        return any(blame.unused_explains(*filled[w], d) for w in wrs if w in filled)

    def early_last_wqe(self, track: Track, event: EventType) -> bool:
        """Is this Last WQE Reached of an SRQ's QP nobody owes yet, perhaps because the
        device entered ERR on its own (a known quirk) before a completion showed it?"""
        if self.h.retrying or event != EventType.QP_LAST_WQE_REACHED:
            return False
        required = any(r.event == event for r in track.ledger.required)
        return track.model.srq is not None and not required and not track.last_wqes

    def drained_too_early(self, track: Track, event: EventType) -> bool:
        """Is this SQ_DRAINED (in SQD) one a correct device would not raise yet: the model's
        drain still runs, the device's ended early, or started sends are unfinished? The
        end's completions are polled first (a correct device completes the sends first)."""
        h = self.h
        side = track.side
        qp, mine = track.model, h.end_state[side]
        drained = event == EventType.SQ_DRAINED and qp.state == S.SQD
        if drained and track.ledger.due["send"]:
            for c in sorted(h.dev.end(side).poll(), key=lambda c: c.queue != "send"):
                target = h.route(track, c)
                if target is not None:
                    h.match.completion(target, c)
        unfinished = [
            d for d in track.ledger.due["send"] if d.completion.status == WCStatus.SUCCESS
        ]
        return drained and (qp.draining or mine.early_drain or bool(unfinished))

    def early_drained(self, track: Track, event: EventType) -> None:
        """An SQ_DRAINED while started sends are outstanding: a divergence of the drain
        rule; known, the device's drain is followed as over."""
        h = self.h
        side = track.side
        track.drained_events += 1
        d = h.divergence(
            track, "event", SQ_DRAINING, track.last(),
            f"no {event.name} event while started sends are outstanding",
            f"event {event.name}", [f"event={event.name}"],
        )
        if h.diverge(track, d) is not None:
            h.end_state[side].early_drain = False
            track.ledger.unrequire(EventType.SQ_DRAINED)
            h.follow.follow_drained(side)
