"""Several QPs on one CQ: a pair end's bystander, and completions routed by qp_num.

`SharedCQ` is a part of `PairHarness` (qpconform/engine/pair.py). An end of the pair may
have a *bystander* (PairDevice.shared_cq_sides): a QP of the same type in the end's own
context and PD, completing on the end's send and receive CQs, moved by modify only (no
SRQ, no traffic), so the end's async events stay the end's. Its track (side
"<end>.bystander") has a model and a ledger of its own and shares the pair's step log;
its handle polls nothing: its completions come with the end's poll, and `route` hands
each completion to the QP its wc.qp_num names (models/shared_cq.py):

- a qp_num that names no QP of the CQ, or names one QP while the wr_id was posted on the
  other, is a divergence of `cq.completion.qp_num` (the completion then goes to the QP
  that posted it, so the books stay right when a quirk knows it);
- a completion of a bystander's WR nobody owed (the end's flush reached it) breaks
  `cq.shared.flush_own_only`;
- in an `unpolled()` block the CQs are not polled between steps: the bystander's flushes
  wait on the CQ while the end is reset, and are then owed under
  `cq.shared.reset_keeps_others`; the end's own unpolled completions are excused (they
  may vanish with its RESET: mlx5 and hns clean them, rxe keeps them; unjudged).

Every pair checks qp_num, with a bystander or without one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from models.enums import Attr, QPState
from models.outcomes import Expectation
from models.pair_checks import STATE_RULE
from models.qp import QPModel
from models.shared_cq import FLUSH_OWN_ONLY, QP_NUM, RESET_KEEPS_OTHERS
from models.wire import SIDES

from . import unmasked
from .connect import bring_up_mask
from .device import Completion, VerbResult
from .ledger import QUEUES, Ledger
from .quirks import reads_wrong
from .text import completion_text
from .track import Track

S = QPState
#: The side name of an end's bystander track ("a.bystander").
BYSTANDER = "{}.bystander"
#: Seconds an unpolled pause waits (before the time scale) so a flush reaches the CQ.
UNPOLLED_PAUSE = 0.3


def outstanding(model: QPModel) -> set[int]:
    """The WRs a QP model holds: its receives and its outstanding sends."""
    return set(model.queues.recvs) | set(model.queues.outstanding_sends)


class SharedCQ:
    """PairHarness's bystanders and its routing of completions by qp_num: it reads the
    harness's device, ends and step log, and judges through its engine."""

    def __init__(self, harness: Any) -> None:
        self.h = harness
        #: The ends that have a bystander on their CQs.
        self.sides = frozenset(getattr(harness.dev, "shared_cq_sides", ()))
        self.bystanders: dict[str, Track] = {}
        self._owner: dict[int, Track] = {}  # wr_id -> the track of the QP that posted it
        #: inside an `unpolled()` block: steps neither poll nor settle
        self.unpolled_now = False
        for side in SIDES:
            self.fresh(side)

    def fresh(self, side: str) -> None:
        """A new bystander track for `side` (a new end brings a new bystander)."""
        self.bystanders.pop(side, None)
        if side not in self.sides:
            return
        handle = self.h.dev.end(side).bystander
        model = QPModel(self.h.dev.qp_type, self.h.variant)
        self.bystanders[side] = Track(
            handle, model, self.h.dev.qp_type, getattr(handle, "qp_num", None), self.h.steps,
            side=BYSTANDER.format(side), ledger=Ledger(),
        )

    def bystander(self, side: str) -> Track:
        """The bystander track of `side` (KeyError: the end has none)."""
        return self.bystanders[side]

    def owns(self, track: Track, wr_id: int) -> None:
        """`wr_id` was posted on `track`'s QP."""
        self._owner[wr_id] = track

    # -------------------------------------------------------------------------- verbs
    def modify(self, side: str, nxt: QPState) -> VerbResult:
        """modify_qp of the bystander of `side` to `nxt` (INIT with the attributes the
        end's would take; any other state with STATE only)."""
        track = self.bystanders[side]
        cur = track.model.state
        attrs = {**self.h.dev.values(side), "qp_state": int(nxt)}
        mask = Attr.STATE | (bring_up_mask(self.h.dev.qp_type, cur, nxt) if nxt == S.INIT
                             else Attr(0))
        fill = self.h.fills(self.h.dev.qp_type, cur, mask)
        attrs = unmasked.pair_filled(attrs, mask, {}, cur, fill)
        step: dict[str, Any] = {"attrs": attrs, "mask": mask}
        outside = unmasked.outside(attrs, mask)
        if outside:
            step["unmasked"] = outside
        exp = track.model.modify(attrs, mask)
        res = track.handle.modify(attrs, mask)
        self._step(track, exp, res, step)
        return res

    def post_recv(self, side: str) -> int:
        """post_recv of one WR on the bystander of `side`; returns its wr_id."""
        track = self.bystanders[side]
        wr_id = self.h.post.next_wr_id()
        self.owns(track, wr_id)
        exp = track.model.post_recv(wr_id)
        res = track.handle.post_recv(wr_id)
        self._step(track, exp, res, {"wr_id": wr_id})
        return wr_id

    def post_send(self, side: str) -> int:
        """post_send of one SEND on the bystander of `side` (it has no peer: in ERR it is
        flushed); returns its wr_id."""
        track = self.bystanders[side]
        wr_id = self.h.post.next_wr_id()
        self.owns(track, wr_id)
        exp = track.model.post_send(wr_id)
        res = track.handle.post_send(wr_id)
        self._step(track, exp, res, {"wr_id": wr_id, "op": "SEND"})
        return wr_id

    def _step(
        self, track: Track, exp: Expectation, res: VerbResult, step: dict[str, Any]
    ) -> None:
        self.h.log.note(track, exp, also=(QP_NUM,))
        known_before = len(self.h.known)
        idx, _ = self.h.verdict.conclude(track, exp, res, step)
        if exp.verb == "modify":
            self._compare_state(track, _state_rule(exp), idx)
            if self.unpolled_now and res.accepted and track.model.state == S.RESET:
                end = next(s for s, by in self.bystanders.items() if by is track)
                self._reset_over(track, self.h.ends[end], idx)
        if self.unpolled_now:
            return
        self.h.settle()
        self.h.log.flush_notes("known" if len(self.h.known) > known_before else "match")

    def _compare_state(self, track: Track, rule: Any, origin: int) -> None:
        """query_qp of a bystander after its modify, compared with its model."""
        got = track.handle.query()
        if got.state in track.model.reported():
            return
        d = self.h.divergence(
            track, "state", rule, origin, f"state {track.model.state.name}",
            f"state {got.state.name}", [f"state={got.state.name}"],
        )
        quirk = self.h.diverge(track, d)
        if quirk is not None and not reads_wrong(quirk):  # a read-back quirk: the QP did move
            self.h.verdict.follow_state(track, got.state, origin)

    # ------------------------------------------------------------------- not polling
    @contextmanager
    def unpolled(self) -> Iterator[None]:
        """Steps in this block neither poll nor settle: what they complete waits on the CQs
        (a modify of an end to RESET then meets its bystander's entries there). The pair
        settles once, at the end."""
        self.unpolled_now = True
        known_before = len(self.h.known)
        try:
            yield
        finally:
            self.unpolled_now = False
            self.h.polls_held_until = time.monotonic()
        self.h.settle()
        self.h.log.flush_notes("known" if len(self.h.known) > known_before else "match")

    def pause(self, seconds: float = UNPOLLED_PAUSE) -> None:
        """Wait without polling (in an `unpolled` block: a flush reaches the CQ)."""
        time.sleep(seconds * self.h.time_scale)

    def reset_meets_entries(self, side: str, origin: int) -> None:
        """The end `side` was reset while the CQs were not polled (see _reset_over)."""
        by = self.bystanders.get(side)
        if by is not None:
            self._reset_over(self.h.ends[side], by, origin)

    def _reset_over(self, reset: Track, other: Track, origin: int) -> None:
        """`reset` was reset at step `origin` while the CQs it shares with `other` were not
        polled: the completions of `other` still due are owed under
        cq.shared.reset_keeps_others (from this step); `reset`'s own may vanish with its
        RESET (unjudged: excused, they may still come)."""
        if any(other.ledger.due[q] for q in QUEUES):
            for q in QUEUES:
                for due in other.ledger.due[q]:
                    due.rule, due.origin = RESET_KEEPS_OTHERS, origin
            self._note_rules(other, "modify", [RESET_KEEPS_OTHERS.id])
        own = reset.ledger
        for q in QUEUES:
            own.excused.update(d.completion.wr_id for d in own.due[q])
            own.due[q] = []

    def _note_rules(self, track: Track, verb: str, rule_ids: list[str]) -> None:
        """Queue a run-record step that checks `rule_ids` on `track`'s QP."""
        state = track.model.state.name
        self.h.log.pending.append((track.qp_type.name, verb, state, None, rule_ids))

    # ------------------------------------------------------------------------ routing
    def _group(self, track: Track) -> list[Track]:
        """The QPs whose completions `track`'s CQs carry: the end and its bystander."""
        side = track.side
        by = self.bystanders.get(side) if side in SIDES else None
        return [track] if by is None else [track, by]

    def route(self, track: Track, wc: Completion) -> Track | None:
        """The track a completion polled from `track`'s CQs belongs to, by its qp_num; a
        qp_num that names no QP of the CQ, or not the one that posted the WR, is a
        divergence of cq.completion.qp_num: the QP that posted it takes the completion
        first (so its books stay right), then the divergence is judged (None: handled)."""
        group = self._group(track)
        owner = self._owner.get(wc.wr_id)
        if owner is not None and not any(owner is t for t in group):
            owner = None  # posted on a QP since destroyed: its number says nothing now
        if track.qp_num is None:  # a device that names no QP numbers
            return owner or track
        named = next((t for t in group if t.qp_num == wc.qp_num), None)
        if named is not None and (owner is None or owner is named):
            return named
        target = owner or track
        names = {t.qp_num: t.side for t in group}
        who = names.get(wc.qp_num, "no QP of this CQ")
        d = self.h.divergence(
            target, "completion", QP_NUM, target.last(),
            f"wr {wc.wr_id} completes naming qp_num 0x{target.qp_num:x} ({target.side})",
            f"completion {completion_text(wc)} naming qp_num 0x{wc.qp_num:x} ({who})",
            [f"queue={wc.queue}", f"qp_num_of={who}"],
        )
        self.h.match.completion(target, wc)
        self.h.diverge(target, d)
        return None

    def stray_rule(self, track: Track, wc: Completion) -> Any:
        """A bystander's WR completed while nothing was due on it: the end's flush took it
        (cq.shared.flush_own_only). None: not a bystander's."""
        if track.side in SIDES or wc.wr_id not in outstanding(track.model):
            return None
        return FLUSH_OWN_ONLY

    def note_end_flush(self, side: str, exp: Expectation) -> None:
        """An end moved to ERR while its bystander holds WRs: the flush must leave them."""
        by = self.bystanders.get(side)
        if by is None or exp.state_if_accepted != S.ERR or exp.state_before == S.ERR:
            return
        if outstanding(by.model):
            self._note_rules(by, "modify", [FLUSH_OWN_ONLY.id])


def _state_rule(exp: Expectation) -> Any:
    """The rule a bystander's state read back after `exp` is judged by."""
    return exp.rule if exp.state_if_accepted != exp.state_before else STATE_RULE
