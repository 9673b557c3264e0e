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
cannot place marks the pair `desynced`, and `lifecycle.resync()` brings both ends through
RESET.

The harness is composed of parts, each with its own state: `post` (pair_post.py: the
post verbs), `lifecycle` (pair_life.py: bring-up, connection, reset, resync), `wire`
(pair_wire.py: a verb's step and the wire's), `follow` (pair_follow.py: the state
comparison and the following of the device), `judgement` (pair_judgement.py: what the
pair adds to judging a completion or an event), `shared` (shared_cq.py: bystanders on a
shared CQ), `too_long` (too_long.py), `memory` (memory.py: the guard bands),
`parkable` (pair_parked.py: what the park polls once the pair's case ended) and `srq_sizes`
(srq_sizes.py: the SRQs' sizes and limits read back, the resize). The engine's
hooks stay on the harness, as thin overrides that ask the parts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from models import iwarp_pair, rules
from models.enums import Attr, EventType, QPState, WCStatus
from models.operations import ops_for
from models.pair import PairModel
from models.pair_checks import UNEXPECTED_COMPLETION, UNEXPECTED_EVENT
from models.pair_rules import RC_RETRY_EXHAUSTED, RC_RNR_EXHAUSTED, RC_RNR_WAITING
from models.sources import Rule
from models.variant import LINUX, Variant
from models.variant import variant as parse_variant
from models.wire import SIDES, WireSettings

from . import blame, unmasked
from .connect import FAST, bring_up_mask
from .core import Engine
from .device import Completion, PairDevice, QueryResult, VerbResult
from .judge import Judge, StepRecorder
from .memory import MemoryGuards
from .pair_follow import EndState, PairFollowing
from .pair_judgement import CompletionJudgement
from .pair_life import Lifecycle
from .pair_parked import ParkedPair
from .pair_post import Posting
from .pair_wire import WireSteps
from .park import AFTER_END, Park
from .quirk_schema import SENDS_WAIT_FOR_DOORBELL
from .quirks import Quirk, Quirks
from .records import Divergence, DivergenceSink
from .shared_cq import SharedCQ
from .srq_sizes import SrqSizes
from .timing import TIMER, WIDEN_MARGIN, DeliveryLog
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
#: How long an iWARP connection may take to end at the peer (TCP close seen, QP flushed).
IWARP_CLOSE_BOUND = 3.0
#: The least wait for a completion a transport timer decides (RC retry or RNR retries
#: exhausted): rxe's retransmit timer under TCG was seen to fire more than 0.5 s late
#: (trixie, soak seed 1136116765); the wait ends as soon as the completion comes.
TIMER_BOUND = 3.0
_TIMER_RULES = frozenset({RC_RETRY_EXHAUSTED.id, RC_RNR_EXHAUSTED.id})

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

class PairHarness(Engine):
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
        self.desynced = False  # a known divergence left WRs the model cannot place
        #: a completion or event is being matched once more, after the device was followed
        self.retrying = False
        self.lifecycle = Lifecycle(self)
        for side in SIDES:
            self.lifecycle.fresh(side)
        self.post = Posting(self)
        self.wire = WireSteps(self)
        self.follow = PairFollowing(self)
        self.judgement = CompletionJudgement(self)
        self.shared = SharedCQ(self)  # bystanders on the ends' CQs
        self.too_long = TooLongChoice(self)
        self.memory = MemoryGuards(self)
        self.parkable = ParkedPair(self)
        self.srq_sizes = SrqSizes(self)  # the ends' SRQ sizes and limits, read back

    @property
    def known(self) -> list[Divergence]:
        """Known divergences seen so far."""
        return self.judge.known

    # ----------------------------------------------------------------------- verbs
    def modify(
        self,
        side: str,
        nxt: QPState,
        extra: Mapping[str, int] | None = None,
        extra_mask: Attr = NO_BITS,
        mask: Attr | None = None,
        fill: unmasked.Fill | None = None,
    ) -> VerbResult:
        """modify_qp(side -> nxt) with valid attrs (the required mask |STATE|extra_mask);
        compared, then the pair settles. The fields outside the mask are valued by `fill`
        (default: the harness's, `fills`)."""
        qp = self.model.qp(side)
        attrs = {**self.dev.values(side), **(extra or {}), "qp_state": int(nxt)}
        if mask is None:
            mask = bring_up_mask(self.dev.qp_type, qp.state, nxt) | Attr.STATE | extra_mask
        held = set(qp.queues.outstanding_sends) - set(qp.queues.in_flight)
        if fill is None:
            fill = self.fills(self.dev.qp_type, qp.state, Attr(int(mask)))
        attrs = unmasked.pair_filled(attrs, Attr(int(mask)), extra or {}, qp.state, fill)
        step: dict[str, Any] = {"attrs": attrs, "mask": mask}
        outside = unmasked.outside(attrs, Attr(int(mask)))
        if outside:  # a reproducer sets them too: a driver may wrongly read them
            step["unmasked"] = outside
        if not self.shared.unpolled_now:  # a late event of the last move first
            self.watch.serve_events(self.ends[side], self.bound)
        if qp.state == S.SQD:  # is the device's drain still running? (quirk context)
            step["device_sq_draining"] = int(bool(self.dev.end(side).query().sq_draining))
        exp = self.model.modify(side, attrs, mask)
        self.verdict.avoid_hazard(self.ends[side], exp, attrs, Attr(int(mask)))
        res = self.dev.end(side).modify(attrs, mask)
        self.shared.note_end_flush(side, exp)
        self.wire.step(side, exp, res, step, resumed=held)
        if self.shared.unpolled_now and res.accepted and self.model.qp(side).state == S.RESET:
            self.shared.reset_meets_entries(side, self.ends[side].last())
        return res

    def query(self, side: str) -> QueryResult:
        """query_qp on one end, its state compared with the model."""
        got = self.dev.end(side).query()
        self.follow.compare_state(side, got)
        return got

    # ------------------------------------------------------------------ observing
    def settle(self, bound: float | None = None) -> None:
        """Observe until every due completion and event was seen (at most `bound` s; a
        completion the transport's timers decide gets `TIMER_BOUND` at least)."""
        if bound is None:
            bound = self._timer_wait() if self._timer_due() else self.bound
        self.watch.observe(0.0, bound)
        self.follow.rewind_not_started()
        self.memory.check()  # before the states: a stray byte is the harm itself
        self.follow.check_states()

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
            window = self.delivery.window(self.windows.kind("completion"), self.quiet_window)
        self.watch.observe(window, 0.0)
        self.too_long.decide(watched=True)  # a too-long message met no error in the window
        self.log.note_watched()
        self.memory.check(commit=True)
        self.follow.check_states()

    def close(self) -> None:
        """Release the device pair (at once: nothing is watched after it, and no window
        is noted; `park` ends a finished pair's observation soundly)."""
        self.ended = True
        self.dev.close()

    def park(self) -> None:
        """The case or example ended: keep the pair observed (its CQs and events polled at
        every poll of the process's other QPs) until its hold (`parkable.park_hold`) has
        passed since its last step, then destroy it (qpconform/engine/park.py). Closed at
        once instead when there is no park or an unknown divergence was raised (what it
        delivers now would be a consequence of that one)."""
        if self.ended or self.parked:
            return
        if self.parking is None or self.judge.raised:
            self.close()
            return
        self.parked = True
        self.parking.add(self.parkable)

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
        by = self.shared.bystanders
        return ends + [by[t.side] for t in ends if t.side in by]

    def record_verb(self, kind: str) -> str | None:
        return _RECORD_VERBS.get(kind)

    def diverge(self, track: Track, d: Divergence) -> Quirk | None:
        """Judge `d`, filed under ibta.post_send.unused_fields_ignored when it concerns a
        WR posted with its unused fields filled (engine/blame.py unused_named)."""
        explained = self.judgement.explained_by_fill(d)
        return super().diverge(track, blame.unused_named(d, explained, self.judge.quirks))

    def related_tracks(self, track: Track, step: dict[str, Any]) -> list[Track]:
        side = step.get("side")
        other = self.ends.get(side) if isinstance(side, str) else None
        return [other] if other is not None and other is not track else []

    def on_unknown(self, track: Track) -> None:
        self.log.flush_notes("divergence")

    def on_known_missing(self, track: Track, wr_ids: list[int], quirk: Quirk) -> None:
        if quirk.instead == SENDS_WAIT_FOR_DOORBELL and track.side is not None:
            self.follow.not_started |= {(track.side, w) for w in wr_ids}  # at the settle
            return
        self.desynced = True  # they may still come, late; the queues may now differ

    def unbooked_event_rule(self, track: Track, event: EventType) -> Rule:
        if event == EventType.SQ_DRAINED:
            return rules.SQD_DRAINED_EVENT
        return super().unbooked_event_rule(track, event) or UNEXPECTED_EVENT

    def stray_rule(self, track: Track, wc: Completion) -> Rule:
        return self.shared.stray_rule(track, wc) or super().stray_rule(track, wc)

    def route(self, track: Track, wc: Completion) -> Track | None:
        return self.shared.route(track, wc)

    def after_completion(self, track: Track, wc: Completion, expected: Any) -> None:
        self.judgement.byte_len_choice(track, wc, expected)
        self.judgement.status_choice(track, wc, expected)
        fine = (WCStatus.SUCCESS, WCStatus.WR_FLUSH_ERR)
        if track.side not in SIDES:  # a bystander: moved by modify only
            return
        if wc.queue == "send" and (expected.status not in fine or wc.status not in fine):
            self.follow.sync_state(track.side)  # an error moved the QP: compare before its flushes

    def explain_completion(self, track: Track, wc: Completion) -> bool:
        """A flush of something outstanding: the QP left its state on its own. Compare the
        state (and follow it, if known), then match the completion once more."""
        qp = track.model
        outstanding = wc.wr_id in qp.queues.recvs or wc.wr_id in qp.queues.outstanding_sends
        if track.side not in SIDES:  # a bystander moves by modify only: nothing to explain
            return False
        if self.too_long.explain(track, wc):  # the device's way with a too-long UC/UD message
            return True
        if self.retrying or wc.status != WCStatus.WR_FLUSH_ERR or not outstanding:
            return False
        self.follow.sync_state(track.side)
        self.retrying = True
        try:
            self.match.completion(track, wc)
        finally:
            self.retrying = False
        return True

    def on_event(self, track: Track, event: EventType) -> None:
        side = track.side
        assert side is not None
        if self.judgement.early_last_wqe(track, event):
            self.follow.sync_state(side)  # the device entered ERR on its own: follow it first
            self.retrying = True
            try:
                super().on_event(track, event)
            finally:
                self.retrying = False
            return
        if self.judgement.drained_too_early(track, event):
            self.judgement.early_drained(track, event)
        else:
            super().on_event(track, event)
