"""The connected-pair rule set: two QPs, the wire between them, checked against PairModel.

`PairHarness` drives a pair device (the pyverbs pair of fixtures/, or a fake)
step by step. Each verb goes through the engine (outcome, model, ledger), then
the wire: `PairModel.progress()` decides what happened to every started send
and the harness books, under the wire's rule and step, the completions and
events due on each end and the events that must not follow an error completion.
After every verb the pair settles (a bounded wait that ends as soon as
everything due was seen), both states are read back and so are the target MRs'
bytes (qpconform/engine/memory.py, the guard bands); `quiet` is the one
deliberate "must not happen" window.

What is the pair's own: an automatic move to ERR/SQE is observed through
query_qp and followed (with the flushes it owes) before its flushes are
matched; an SQD drain the device ends early is followed (its started sends are
held); sends a known quirk says the device never started (`instead =
"sends_wait_for_doorbell"`) are followed back: the pair is rewound to before the
wire ran them, they wait in the SQ, and the end's next post_send starts them; an
event nobody booked is a divergence; a known divergence that left WRs the model
cannot place marks the pair `desynced`, and `resync()` brings both ends through
RESET. The state comparison and the following of the device are
qpconform/engine/pair_follow.py's (`PairFollowing`, mixed into PairHarness).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, cast

from models import iwarp_pair, rules
from models.enums import Attr, EventType, QPState, QPType, WCStatus
from models.operations import Op, ops_for, with_src_qp
from models.outcomes import Expectation, Outcome
from models.pair import PairModel
from models.pair_checks import SQ_DRAINING, STATE_RULE, UNEXPECTED_COMPLETION, UNEXPECTED_EVENT
from models.pair_rules import RC_RETRY_EXHAUSTED, RC_RNR_EXHAUSTED, RC_RNR_WAITING
from models.sources import MAY, Rule
from models.unused_fields import UNUSED_FIELDS
from models.variant import LINUX, Variant
from models.variant import variant as parse_variant
from models.wire import SIDES, Fault, WireSettings, WireStep

from . import blame, unmasked, unused_wr
from .connect import FAST, bring_up_mask
from .core import Engine
from .device import Completion, ConnectedPairDevice, PairDevice, QueryResult, VerbResult
from .judge import DivergenceError, Judge, StepRecorder
from .ledger import Because, Ledger
from .memory import MemoryGuards
from .pair_follow import EndState, PairFollowing, Rewind
from .park import AFTER_END, Park
from .quirks import SENDS_WAIT_FOR_DOORBELL, Quirk, Quirks
from .records import Divergence, DivergenceSink
from .shared_cq import SharedCQ
from .timing import KINDS, TIMER, WIDEN_MARGIN, DeliveryLog
from .too_long import TooLongChoice
from .track import Track

S = QPState
NO_BITS = Attr(0)
#: Seconds a deliberate quiet window watches (before the time scale); a run may pass another
#: (QPCONFORM_QUIET_WINDOW, read by fixtures/environment.py).
QUIET_WINDOW = 0.15
#: After a move into SQD, ERR or SQE (or out of SQD) the end's next modify waits this long
#: first, so a late event is judged against the move that raised it (fixtures/windows.toml).
EVENT_WINDOW = 0.03
#: Rules of wire-caused state changes (the harness follows them like a verb's).
_AUTOMATIC_TRANSITIONS = ("ibta.sqe.", "ibta.err.", *iwarp_pair.AUTOMATIC)
#: How long an iWARP connection may take to end at the peer (TCP close seen, QP flushed).
IWARP_CLOSE_BOUND = 3.0
#: The least wait for a completion a transport timer decides (RC retry or RNR retries
#: exhausted): rxe's retransmit timer under TCG was seen to fire more than 0.5 s late
#: (trixie, soak seed 1136116765); the wait ends as soon as the completion comes.
TIMER_BOUND = 3.0
#: A parked pair (PairHarness.park) is held this many times the must-wait bound after its
#: last step: holding costs no wait, and under a saturated host an RC error-path completion
#: took 1.19 s against rxe's 1.0 s must-wait (bookworm soak, --busy 2, December 2026).
PARK_BASE = 2.0
#: ... and at most this many times, however slow the run's deliveries: a slower one makes
#: the verdict unsure instead.
PARK_LIMIT = 3.0
_TIMER_RULES = frozenset({RC_RETRY_EXHAUSTED.id, RC_RNR_EXHAUSTED.id})
#: The bytes a pair's WR carries (the adapters' length): an inline one needs that much cap.
INLINE_LEN = 16
#: An inline WR one byte beyond the cap is posted only when those bytes fit in the end's
#: 4096-byte MR with room to spare (a device with a larger cap: the case is skipped).
OVER_CAP_LIMIT = 2048

#: The verb a pair record names, by kind of divergence (outcome: the verb itself).
_RECORD_VERBS = {
    "status": "completion",
    "fields": "completion",
    "order": "completion",
    "completion": "completion",
    "missing_completion": "completion",
    "event": "event",
    "missing_event": "event",
    "state": "query",
    "memory": "memory",
}

class PairHarness(MemoryGuards, SharedCQ, TooLongChoice, PairFollowing, Engine):
    """Drive a pair device and its PairModel in lock step; every difference is a divergence.

    A divergence a quirk covers is recorded as known (`known_quirk`), the harness
    follows the device and the run goes on; any other raises DivergenceError with
    the record's readable report (event divergences are kept for `finish()` when
    `defer_events`). Every record goes to `sink` (None: nowhere; a device run passes
    the run's divergences file, fixtures/device_fixtures.py) and to the run recorder,
    which also counts every compared step; `test` names the running test in them.
    Every wait and window is multiplied by `time_scale` (None: 1); a device run passes
    the environment's scale and quiet window (fixtures/environment.py).
    """

    stray_completion_rule = UNEXPECTED_COMPLETION
    poll_interval = 0.01
    timer_rules = _TIMER_RULES | {RC_RNR_WAITING.id}  # delivery windows ignore their delay

    def __init__(
        self,
        device: PairDevice,
        settings: WireSettings = FAST,
        *,
        quirks: Quirks | None = None,
        recorder: StepRecorder | None = None,
        sink: DivergenceSink | None = None,
        time_scale: float | None = None,
        quiet_window: float = QUIET_WINDOW,
        defer_events: bool = False,
        delivery: DeliveryLog | None = None,
        event_window: float | None = None,
        variant: Variant | str = LINUX,
        test: str | None = None,
        park: Park | None = None,
    ) -> None:
        judge = Judge(quirks, sink, recorder, defer_events=defer_events, test=test)
        super().__init__(judge, dict(device.identity), delivery)
        self.dev = device
        #: where the pair goes when its case or example ends (None: closed at once); its
        #: pairs are polled at every collect (Engine.parking)
        self.parking = park
        self.parked = False  # its case or example ended; it is still observed
        self.ended = False  # closed: nothing of it is observed any more
        self.variant = parse_variant(variant)
        # An iWARP pair (connection-managed variant): connected through rdma_cm, never
        # reused, and a close ends the connection at the peer.
        srq_sides = frozenset(getattr(device, "srq_sides", ()))  # ends with an SRQ
        self.model: PairModel = (
            iwarp_pair.IwarpPairModel(device.qp_type, settings, srq_sides)
            if self.variant.connection_managed
            else PairModel(device.qp_type, self.variant, settings, srq_sides)
        )
        self.settings = settings
        #: The operations this pair carries: its QP type's, less the atomics a device lacks.
        self.ops = ops_for(device.qp_type, self.variant.connection_managed,
                           atomics=getattr(device, "atomics", True))
        scale = 1.0 if time_scale is None else time_scale
        self.time_scale = scale
        bound = settings.bound()
        if self.variant.connection_managed:  # the connection may take a while to end at the peer
            bound = max(bound, IWARP_CLOSE_BOUND)
        self.bound = bound * scale
        self.timer_bound = TIMER_BOUND * scale
        self.quiet_window = quiet_window * scale
        self.event_window = (EVENT_WINDOW if event_window is None else event_window) * scale
        self.steps: list[dict[str, Any]] = []  # one log for both ends
        self.ends: dict[str, Track] = {}
        self.end_state: dict[str, EndState] = {}
        for side in SIDES:
            self._fresh(side)
        self.desynced = False  # a known divergence left WRs the model cannot place
        self._ids: Iterator[int] = itertools.count(1)
        self._retrying = False
        self._rewind: Rewind | None = None  # set between a resuming modify and its settle
        self._not_started: set[tuple[str, int]] = set()  # missing: never started (known)
        self._doorbell: set[str] = set()  # ends whose held sends the next post_send starts
        self._waiting: set[tuple[str, int]] = set()  # sends noted waiting for a receive
        #: WRs posted with their unused fields filled: wr_id -> (operation, values)
        self._filled: dict[int, tuple[Op, dict[str, int]]] = {}
        self._init_shared_cq()  # bystanders on the ends' CQs (qpconform/engine/shared_cq.py)

    def _fresh(self, side: str) -> None:
        """A new track for `side` (new QP, or its books cleared)."""
        end = self.dev.end(side)
        self.ends[side] = Track(
            end, self.model.qp(side), self.dev.qp_type, getattr(end, "qp_num", None),
            self.steps, side=side, ledger=Ledger(),
        )
        self.end_state[side] = EndState()

    @property
    def known(self) -> list[Divergence]:
        """Known divergences seen so far."""
        return self.judge.known

    # ----------------------------------------------------------------------- verbs
    def next_wr_id(self) -> int:
        """Pair-unique WR ids, so a completion can never be mistaken for another end's."""
        return next(self._ids)

    def transition(
        self,
        side: str,
        nxt: QPState,
        extra: Mapping[str, int] | None = None,
        extra_mask: Attr = NO_BITS,
    ) -> tuple[dict[str, int], Attr]:
        """Valid attrs and the required mask (|STATE|extra_mask) for side's current -> nxt."""
        qp = self.model.qp(side)
        attrs = {**self.dev.values(side), **(extra or {}), "qp_state": int(nxt)}
        required = bring_up_mask(self.dev.qp_type, qp.state, nxt)
        return attrs, required | Attr.STATE | extra_mask

    def modify(
        self,
        side: str,
        nxt: QPState,
        extra: Mapping[str, int] | None = None,
        extra_mask: Attr = NO_BITS,
        mask: Attr | None = None,
        fill: unmasked.Fill | None = None,
    ) -> VerbResult:
        """modify_qp(side -> nxt) with valid attrs; compared, then the pair settles. The
        fields outside the mask are valued by `fill` (default: the harness's, `fills`)."""
        attrs, req_mask = self.transition(side, nxt, extra, extra_mask)
        mask = req_mask if mask is None else mask
        qp = self.model.qp(side)
        held = set(qp.queues.outstanding_sends) - set(qp.queues.in_flight)
        if fill is None:
            fill = self.fills(self.dev.qp_type, qp.state, Attr(int(mask)))
        attrs = unmasked.pair_filled(attrs, Attr(int(mask)), extra or {}, qp.state, fill)
        step: dict[str, Any] = {"attrs": attrs, "mask": mask}
        outside = unmasked.outside(attrs, Attr(int(mask)))
        if outside:  # a reproducer sets them too: a driver may wrongly read them
            step["unmasked"] = outside
        if not self._unpolled:  # a late event of the last move first
            self.serve_events(self.ends[side], self.bound)
        if qp.state == S.SQD:  # is the device's drain still running? (quirk context)
            step["device_sq_draining"] = int(bool(self.dev.end(side).query().sq_draining))
        exp = self.model.modify(side, attrs, mask)
        self.avoid_hazard(self.ends[side], exp, attrs, Attr(int(mask)))
        res = self.dev.end(side).modify(attrs, mask)
        self.note_end_flush(side, exp)
        self.cm_step(side, exp, res, step, resumed=held)
        if self._unpolled and res.accepted and self.model.qp(side).state == S.RESET:
            self._reset_meets_entries(side, self.ends[side].last())
        return res

    def post_send(
        self,
        side: str,
        op: Op = Op.SEND,
        fault: Fault = Fault.NONE,
        signaled: bool = True,
        inline: bool = False,
        fence: bool = False,
        unused: str = unused_wr.PLAIN,
    ) -> int:
        """post_send of one WR (unsignaled: it completes only in error; `inline`: posted
        with IBV_SEND_INLINE, within the end's max_inline_data; `fence`: with
        IBV_SEND_FENCE, its data from the end's READ sink; `unused`: how the fields its
        opcode does not use are filled, unused_wr.CHOICES); returns its wr_id."""
        wr_id = self.next_wr_id()
        self.owns(self.ends[side], wr_id)
        exp = self.model.post_send(side, wr_id, op, fault, signaled, inline, fence)
        filled = unused_wr.values(op, self.dev.qp_type, unused)
        end = self.dev.end(side)
        how: dict[str, Any] = {"fence": True} if fence else {}
        if filled:  # only then: an end that predates fills is still called as it was
            how["unused"] = filled
            self._filled[wr_id] = (op, filled)
        res = end.post_send(wr_id, op, fault, signaled, inline, **how)
        step: dict[str, Any] = {"wr_id": wr_id, "op": str(op), "fault": str(fault)}
        if filled:
            step["unused"] = filled  # a reproducer sets them too
        if not signaled:
            step["signaled"] = False
        if inline:
            step["inline"] = True
        if fence:
            step["fence"] = True
        self.cm_step(side, exp, res, step, also=(UNUSED_FIELDS,) if filled else ())
        self.decide_too_long()  # a UC/UD message longer than the receive: the device's way
        return wr_id

    def max_inline(self, side: str) -> int:
        """The max_inline_data `side`'s QP reports (0: it posts nothing inline)."""
        return int(getattr(self.dev.end(side), "max_inline", 0))

    def can_post_inline(self, side: str, over_cap: bool = False) -> bool:
        """Can `side` post a WR inline: within its cap (INLINE_LEN bytes fit), or one byte
        beyond it (`over_cap`: the max_inline_data + 1 bytes fit in its MR)?"""
        cap = self.max_inline(side)
        return cap < OVER_CAP_LIMIT if over_cap else cap >= INLINE_LEN

    @contextmanager
    def back_to_back(self) -> Iterator[None]:
        """Posts in this block go to the device with no wait between them (each is still
        compared at once), so they are outstanding together: READs beyond the initiator
        depth meet it (pair.read.initiator_depth). The pair settles once, at the end."""
        self.model.burst = {}
        known_before = len(self.known)
        try:
            yield
        finally:
            self.model.burst = None
        self.settle()
        self.flush_notes("known" if len(self.known) > known_before else "match")

    def post_recv(self, side: str, short: bool = False, bad_lkey: bool = False) -> int:
        """One receive WR where the end takes its receives from (its SRQ, if it has one,
        else its own receive queue); returns its wr_id. `short`: room for less than a SEND
        carries; `bad_lkey`: its SGE names no MR (both: own receive queue only)."""
        if side in self.model.srq_sides:
            if short or bad_lkey:
                raise ValueError("a short or bad-lkey receive goes to the end's own queue")
            return self.post_srq_recv(side)
        return self.post_qp_recv(side, short, bad_lkey)

    def post_qp_recv(
        self, side: str, short: bool = False, bad_lkey: bool = False, isolated: bool = False
    ) -> int:
        """post_recv of one WR on the end's QP (refused when it has an SRQ); a `short` one
        has room for less than a SEND carries, a `bad_lkey` one names no MR; an `isolated`
        one is made in a child process (a provider that crashes on it: libsiw on an SRQ's
        QP), so a call that kills its process is a divergence, not the session's end."""
        wr_id = self.next_wr_id()
        self.owns(self.ends[side], wr_id)
        if short:
            self.seed_too_long()  # the run's choice for a too-long UC/UD message, if made
        exp = self.model.post_recv(side, wr_id, short, bad_lkey)
        end = self.dev.end(side)
        # only the flags asked are passed: an end that has neither (the remote executor's)
        # still takes a plain receive
        flags = {k: True for k, v in (("short", short), ("bad_lkey", bad_lkey),
                                      ("isolated", isolated)) if v}
        res = end.post_recv(wr_id, **flags)
        self.cm_step(side, exp, res, {"wr_id": wr_id, **flags})
        return wr_id

    def post_srq_recv(self, side: str) -> int:
        """post_srq_recv of one WR to the end's SRQ; returns its wr_id."""
        wr_id = self.next_wr_id()
        self.owns(self.ends[side], wr_id)
        exp = self.model.post_srq_recv(side, wr_id)
        res = self.dev.end(side).post_srq_recv(wr_id)
        self.cm_step(side, exp, res, {"wr_id": wr_id, "srq": True})
        return wr_id

    def arm_srq(self, side: str, limit: int) -> VerbResult:
        """modify_srq(IBV_SRQ_LIMIT = limit) on the end's SRQ."""
        exp = self.model.arm_srq(side, limit)
        fill = self.fills(self.dev.qp_type, self.model.qp(side).state, Attr(0))
        max_wr = unmasked.srq_max_wr(fill)  # outside IBV_SRQ_LIMIT: must not matter
        step: dict[str, Any] = {"srq_limit": limit}
        if max_wr is None:
            res = self.dev.end(side).arm_srq(limit)
        else:
            step["unmasked"] = {unmasked.SRQ_FIELD: max_wr}
            res = self.dev.end(side).arm_srq(limit, max_wr)
        self.cm_step(side, exp, res, step)
        return res

    def query(self, side: str) -> QueryResult:
        """query_qp on one end, its state compared with the model."""
        got = self.dev.end(side).query()
        self._compare_state(side, got)
        return got

    def destroy(self, side: str) -> None:
        """destroy_qp on one end ("the peer is gone"). Its CQs go with it: nothing it
        delivers later can be seen, so the end is first observed for the completion window
        (widened by the run's tail) since the pair's last step or delivery.

        That stretch is not noted as a window that ended an observation: under load it is
        shorter than the run's slowest pair delivery (a bookworm run with another VM beside
        it: 35 of 314 such windows, 151-370 ms against a 412 ms completion), and every such
        run would read "timing unsure". The sound end is to keep the destroyed end's CQs
        observed like a parked pair's (the adapters destroy them with the QP): not done."""
        window = self.delivery.window(self._kind("completion"), self.quiet_window)
        left = window - (time.monotonic() - self.active_at)
        self.wait(max(0.0, left), 0.0)  # polls at least once: nothing may be lost
        track = self.ends[side]
        exp = self.model.destroy(side)
        self.dev.end(side).destroy()  # its bystander, if any, with it
        self.model.apply(side, exp, True)
        self.log_step(track, exp, VerbResult(True), {})
        self.note(track, exp)
        self.bystanders.pop(side, None)
        self._fresh(side)
        self._wire()
        self.flush_notes("match")

    def recreate(self, side: str) -> None:
        """A new QP for a destroyed end, in RESET."""
        self.dev.recreate(side)
        self.model.recreate(side)
        self._fresh(side)
        self._fresh_bystander(side)
        self.steps.append(
            {"verb": "create", "side": side, "expected": "RESET", "observed": "created"}
        )

    def resync(self) -> None:
        """Both ends to RESET and back to RTS: nothing a known divergence left stays behind.

        iWARP: new QPs on both ends and a new connection (an iWARP QP is never reused: siw
        ignores RESET, and a connection ends for good)."""
        if self.variant.connection_managed:
            self.reconnect()
            return
        for side in SIDES:
            if side in self.model.gone:
                self.recreate(side)
            elif self.model.qp(side).state != S.RESET:
                self.reset(side)
            by = self.bystanders.get(side)
            if by is not None and by.model.state != S.RESET:
                self.bystander_modify(side, S.RESET)
        self._start_over()

    def reset(self, side: str) -> None:
        """Bring one end to RESET. A refusal a quirk knows (rxe refuses to leave SQD while
        its drain runs) leaves it where it was: then through ERR, which every state may
        enter, to RESET."""
        if not self.modify(side, S.RESET).accepted and self.model.qp(side).state != S.RESET:
            self.modify(side, S.ERR)
            self.modify(side, S.RESET)

    # ------------------------------------------------------------------ bring-up
    def bring_up(self, side: str, to: QPState = S.RTS) -> None:
        """RESET/INIT/... -> `to` along INIT, RTR, RTS, with PSNs synced to the peer."""
        order = [S.RESET, S.INIT, S.RTR, S.RTS]
        psns = self.peer_psns(side)
        while self.model.qp(side).state != to:
            cur = self.model.qp(side).state
            if cur not in order[: order.index(to)]:
                raise ValueError(f"bring_up({side!r}): {cur.name} is not on the way to "
                                 f"{to.name}; reset() the end first")
            nxt = order[order.index(cur) + 1]
            res = self.modify(side, nxt, psns)
            if not res.accepted:
                track = self.ends[side]
                raise DivergenceError(
                    self.divergence(
                        track, "outcome", STATE_RULE, track.last(),
                        f"bring-up {cur.name}->{nxt.name} accepted",
                        f"refused errno={res.errno} {res.detail}", ["refused"], verb="modify",
                    )
                )

    def connect(self) -> None:
        """Both ends to RTS (INIT, RTR, RTS on each; iWARP: INIT, then the connection)."""
        if self.variant.connection_managed:
            for side in SIDES:
                self.bring_up(side, S.INIT)
            cast(ConnectedPairDevice, self.dev).establish()
            assert isinstance(self.model, iwarp_pair.IwarpPairModel)
            self._book(self.model.establish())
            self.settle()
            self.flush_notes("match")
            return
        for st in (S.INIT, S.RTR, S.RTS):
            for side in SIDES:
                self.bring_up(side, st)

    def reconnect(self) -> None:
        """iWARP: destroy what is left of both ends, make two new QPs, connect them."""
        for side in SIDES:
            if side not in self.model.gone:
                self.destroy(side)
        for side in SIDES:
            self.recreate(side)
        self._start_over()

    def _start_over(self) -> None:
        """Fresh books on both ends (nothing excused, nothing out of sync), then connect."""
        for track in self.tracks():
            track.ledger.excused.clear()
        self.desynced = False
        self.connect()

    def peer_psns(self, side: str) -> dict[str, int]:
        """rq_psn/sq_psn that match the peer's current send/expected PSNs (after a reset)."""
        peer = self.model.peer_of(side)
        if peer in self.model.gone or self.model.qp(peer).state in (S.RESET, S.INIT):
            return {}
        got = self.dev.end(peer).query().attrs
        return {"rq_psn": got.get("sq_psn", 0), "sq_psn": got.get("rq_psn", 0)}

    # ------------------------------------------------------------------ observing
    def settle(self, bound: float | None = None) -> None:
        """Observe until every due completion and event was seen (at most `bound` s; a
        completion the transport's timers decide gets `TIMER_BOUND` at least)."""
        if bound is None:
            bound = self._timer_wait() if self._timer_due() else self.bound
        self.observe(0.0, bound)
        self._follow_not_started()
        self.check_memory()  # before the states: a stray byte is the harm itself
        self._check_states()

    def _timer_wait(self) -> float:
        """The bound on waiting for a timer-decided completion: TIMER_BOUND, or longer when
        this run's timers took longer (a loaded host: 1.5 times the slowest, so a late one
        is not mistaken for a missing one)."""
        return max(self.bound, self.timer_bound, WIDEN_MARGIN * self.delivery.slowest(TIMER))

    def _timer_due(self) -> bool:
        """Is a completion due that only a transport timer ends (retry or RNR retries
        exhausted)? Its delay is the timer's, under an emulated CPU as slow as the host
        makes it: the wait for it is longer, and ends as soon as it comes."""
        return any(
            d.rule.id in _TIMER_RULES for t in self.tracks() for d in t.ledger.due["send"]
        )

    def quiet(self, window: float | None = None) -> None:
        """The deliberate "must not happen" window: observe for `window` s (default: the
        quiet window, widened by the run's deliveries), then check. It ends no
        observation: the pair is polled again at its next step, and a late item is judged
        then, against the step that forbade it; only the pair's end (`park`, `close`)
        ends its observation."""
        if window is None:
            window = self.delivery.window(self._kind("completion"), self.quiet_window)
        self.observe(window, 0.0)
        self.decide_too_long(watched=True)  # a too-long message met no error in the window
        self.note_watched()
        self.check_memory(commit=True)
        self._check_states()

    def close(self) -> None:
        """Release the device pair (at once: nothing is watched after it, and no window
        is noted; `park` ends a finished pair's observation soundly)."""
        self.ended = True
        self.dev.close()

    def park_hold(self) -> float:
        """How long a finished pair stays observed after its last step: PARK_BASE times the
        must-wait bound (the pair's settle bound when the run follows none), or
        WIDEN_MARGIN times the run's slowest pair delivery when longer (at most PARK_LIMIT
        times the bound). Asked at every poll of the park: it follows the tail."""
        bound = self.delivery.cap or self.bound
        tail = max(self.delivery.slowest(self._kind(k)) for k in KINDS)
        return max(PARK_BASE * bound, min(PARK_LIMIT * bound, WIDEN_MARGIN * tail))

    def park(self) -> None:
        """The case or example ended: keep the pair observed (its CQs and events polled at
        every poll of the process's other QPs) until `park_hold` has passed since its last
        step, then destroy it (qpconform/engine/park.py). Closed at once instead when
        there is no park or an unknown divergence was raised (what it delivers now would
        be a consequence of that one)."""
        if self.ended or self.parked:
            return
        if self.parking is None or self.judge.raised:
            self.close()
            return
        self.parked = True
        self.parking.add(self)

    def park_poll(self) -> None:
        """One poll of a parked pair; an event divergence it defers is raised here (its
        test has ended: nothing calls finish() again)."""
        deferred = len(self.judge.deferred)
        self.collect()
        if len(self.judge.deferred) > deferred:
            new = self.judge.deferred[deferred:]
            raise DivergenceError(new[0], new[1:])

    def park_close(self, observed: float) -> None:
        """Destroy a parked pair; `observed` s since its last step, when judged, is the
        window that ended its observation (both kinds: its CQs and its events)."""
        if observed > 0.0:
            for kind in KINDS:
                self.delivery.note_closed(self._kind(kind), observed)
        self.close()

    def last_active(self) -> float:
        """time.monotonic() of the pair's last verb or delivery."""
        return self.active_at

    def divergence(self, track: Track, kind: str, rule: Rule, origin: int, expected: str,
                   observed: str, tags: list[str], **override: Any) -> Divergence:
        """The engine's record; one found in a parked pair says so (it was not shrunk)."""
        d = super().divergence(track, kind, rule, origin, expected, observed, tags, **override)
        if self.parked:
            d.context["after_end"] = AFTER_END
        return d

    def finish(self) -> None:
        """Raise the first deferred event divergence (all of them are in the message)."""
        self.judge.finish()

    # -------------------------------------------------------------- the rule set's part
    def end_tracks(self) -> list[Track]:
        """The two ends (those not destroyed)."""
        return [self.ends[s] for s in SIDES if s not in self.model.gone]

    def tracks(self) -> list[Track]:
        ends = self.end_tracks()
        return ends + [self.bystanders[t.side] for t in ends if t.side in self.bystanders]

    def record_verb(self, kind: str) -> str | None:
        return _RECORD_VERBS.get(kind)

    def diverge(self, track: Track, d: Divergence) -> Quirk | None:
        """Judge `d`, filed under ibta.post_send.unused_fields_ignored when it concerns a
        WR posted with its unused fields filled (engine/blame.py unused_named)."""
        return super().diverge(track, blame.unused_named(d, self._explained(d), self.judge.quirks))

    def _explained(self, d: Divergence) -> bool:
        """Does `d` concern a WR posted with a fill (a wire step's completions, tagged
        send_wr=N), and show that fill (blame.unused_explains)?"""
        wrs = {int(t.split("=", 1)[1]) for t in d.tags if t.startswith("send_wr=")}
        return any(
            blame.unused_explains(*self._filled[w], d) for w in wrs if w in self._filled
        )

    def related_tracks(self, track: Track, step: dict[str, Any]) -> list[Track]:
        side = step.get("side")
        other = self.ends.get(side) if isinstance(side, str) else None
        return [other] if other is not None and other is not track else []

    def on_unknown(self, track: Track) -> None:
        self.flush_notes("divergence")

    def on_known_missing(self, track: Track, wr_ids: list[int], quirk: Quirk) -> None:
        if quirk.instead == SENDS_WAIT_FOR_DOORBELL and track.side is not None:
            self._not_started |= {(track.side, w) for w in wr_ids}  # followed at the settle
            return
        self.desynced = True  # they may still come, late; the queues may now differ

    def unbooked_event_rule(self, track: Track, event: EventType) -> Rule:
        if event == EventType.SQ_DRAINED:
            return rules.SQD_DRAINED_EVENT
        return super().unbooked_event_rule(track, event) or UNEXPECTED_EVENT

    def stray_rule(self, track: Track, wc: Completion) -> Rule:
        return self.shared_stray_rule(track, wc) or super().stray_rule(track, wc)

    def after_completion(self, track: Track, wc: Completion, expected: Any) -> None:
        self._byte_len_choice(track, wc, expected)
        self._status_choice(track, wc, expected)
        fine = (WCStatus.SUCCESS, WCStatus.WR_FLUSH_ERR)
        if track.side not in SIDES:  # a bystander: moved by modify only
            return
        if wc.queue == "send" and (expected.status not in fine or wc.status not in fine):
            self._sync_state(track.side)  # an error moved the QP: compare before its flushes

    def _byte_len_choice(self, track: Track, wc: Completion, expected: Any) -> None:
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
        self.choose(track, rule, f"byte_len={wc.byte_len}", track.last(), key)

    def _status_choice(self, track: Track, wc: Completion, expected: Any) -> None:
        """A completion whose status a "may" rule lets the device choose (an RC request its
        responder's QP access flags refuse: Remote Access Error or Invalid Request): a
        characteristic, the same for every such completion of the run."""
        allowed = getattr(expected, "statuses", None)
        if allowed is None or not expected.allows_status(wc.status):
            return
        rule = allowed[1]
        key = f"{track.qp_type.name} {rule.id}"
        self.choose(track, rule, f"status={wc.status.name}", track.last(), key)

    def _early_last_wqe(self, track: Track, event: EventType) -> bool:
        """Is this Last WQE Reached of an SRQ's QP nobody owes yet, perhaps because the
        device entered ERR on its own (a known quirk) before a completion showed it?"""
        if self._retrying or event != EventType.QP_LAST_WQE_REACHED:
            return False
        required = any(r.event == event for r in track.ledger.required)
        return track.model.srq is not None and not required and not track.last_wqes

    def explain_completion(self, track: Track, wc: Completion) -> bool:
        """A flush of something outstanding: the QP left its state on its own. Compare the
        state (and follow it, if known), then match the completion once more."""
        qp = track.model
        outstanding = wc.wr_id in qp.queues.recvs or wc.wr_id in qp.queues.outstanding_sends
        if track.side not in SIDES:  # a bystander moves by modify only: nothing to explain
            return False
        if self.explain_too_long(track, wc):  # the device's way with a too-long UC/UD message
            return True
        if self._retrying or wc.status != WCStatus.WR_FLUSH_ERR or not outstanding:
            return False
        self._sync_state(track.side)
        self._retrying = True
        try:
            self.on_completion(track, wc)
        finally:
            self._retrying = False
        return True

    def on_event(self, track: Track, event: EventType) -> None:
        side = track.side
        assert side is not None
        qp, mine = track.model, self.end_state[side]
        if self._early_last_wqe(track, event):
            self._sync_state(side)  # the device entered ERR on its own: follow it first
            self._retrying = True
            try:
                super().on_event(track, event)
            finally:
                self._retrying = False
            return
        drained = event == EventType.SQ_DRAINED and qp.state == S.SQD
        if drained and track.ledger.due["send"]:  # a correct device completes the sends first
            for c in sorted(self.dev.end(side).poll(), key=lambda c: c.queue != "send"):
                target = self.route(track, c)
                if target is not None:
                    self.on_completion(target, c)
        unfinished = [
            d for d in track.ledger.due["send"] if d.completion.status == WCStatus.SUCCESS
        ]
        if not (drained and (qp.draining or mine.early_drain or bool(unfinished))):
            super().on_event(track, event)
            return
        track.drained_events += 1
        d = self.divergence(
            track, "event", SQ_DRAINING, track.last(),
            f"no {event.name} event while started sends are outstanding",
            f"event {event.name}", [f"event={event.name}"],
        )
        if self.diverge(track, d) is not None:
            mine.early_drain = False
            track.ledger.unrequire(EventType.SQ_DRAINED)
            self._follow_drained(side)

    # ------------------------------------------------------------------- internals
    def cm_step(
        self,
        side: str,
        exp: Expectation,
        res: VerbResult,
        step: dict[str, Any],
        resumed: set[int] | None = None,
        also: tuple[Rule, ...] = (),
    ) -> None:
        track = self.ends[side]
        self.note(track, exp, also=also)  # `also`: rules the step checks beyond exp's
        known_before = len(self.known)
        idx, _ = self.conclude(track, exp, res, step)
        if res.accepted:
            if exp.state_if_accepted != exp.state_before:
                self.end_state[side].state_because = Because(exp.rule, idx)
            if exp.verb == "modify" and resumed:
                started = resumed & set(self.model.qp(side).queues.in_flight)
                self.end_state[side].resumed |= started
                if started:
                    self._rewind_point(side)
            if exp.verb == "post_send" and side in self._doorbell:
                self._ring_doorbell(side)
        self._wire()
        if self.model.burst is not None or self._unpolled:  # the block's end settles
            return
        try:
            self.settle()
        finally:
            self._rewind = None
        self.flush_notes("known" if len(self.known) > known_before else "match")

    def _wire(self) -> None:
        """Book what the wire did to every send it could finish, under its rule and step;
        note each send that now waits for a receive (RNR, infinite retry) once."""
        self._book(self.model.progress())
        for side, wr_id in self.model.blocked():
            if (side, wr_id) in self._waiting or self.model.decide(side)[0] is not RC_RNR_WAITING:
                continue
            self._waiting.add((side, wr_id))
            state = self.model.qp(side).state
            waits = Expectation("wire", Outcome.ACCEPT, RC_RNR_WAITING, state, state,
                                checked=(RC_RNR_WAITING,))
            self.note(self.ends[side], waits)

    def _with_source(self, side: str, requester: str, exp: Expectation) -> Expectation:
        """A UD receive's expectation naming the sender's QP number, which its completion
        must carry in src_qp (the model knows no QP numbers; the tracks do)."""
        sender = self.ends[requester].qp_num
        if side == requester or self.dev.qp_type is not QPType.UD or sender is None:
            return exp
        return with_src_qp(exp, sender)

    def _book(self, wire_steps: list[WireStep]) -> None:
        """Each wire step into the log; its effects into the ends' ledgers."""
        for ws in wire_steps:
            self.steps.append(
                {
                    "verb": "wire",
                    "side": ws.requester,
                    "wr_id": ws.wr_id,
                    "expected": ws.rule.id,
                    "observed": "-",
                }
            )
            origin = len(self.steps) - 1
            resumed = ws.wr_id in self.end_state[ws.requester].resumed
            self.end_state[ws.requester].resumed.discard(ws.wr_id)
            tags = (f"send_wr={ws.wr_id}",) + (("resumed_by_rts",) if resumed else ())
            for side, exp in ws.effects:
                exp = self._with_source(side, ws.requester, exp)
                also = (ws.forbidden_rule,) if side in ws.forbidden else ()
                self.note(self.ends[side], exp, ws.rule, also)
                self.ends[side].ledger.expect(exp, origin, ws.rule, tags)
                if resumed and self._rewind is not None:
                    self._rewind.booked |= {(side, c.wr_id) for c in exp.completions}
                if exp.rule.id.startswith(_AUTOMATIC_TRANSITIONS):  # automatic: SQE or ERR
                    self.end_state[side].state_because = Because(exp.rule, origin)
                    self.ends[side].moved(
                        exp.state_before, self.model.qp(side).state, origin
                    )
            for side, events in ws.forbidden.items():
                self.ends[side].ledger.forbid(events, ws.forbidden_rule, origin)
