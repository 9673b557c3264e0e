"""The lone-QP rule set: QPs with no peer, every verb compared with the model.

For each verb the model is asked first (an Expectation), then the device; the
engine compares the outcome and books what is due; the state read back with
query_qp must be the model's. `settle()` polls every open QP and waits only while
something is due; a step after which something may still come or must not (a
WR that must never run, a delivered completion, a modify into SQD, ERR or SQE or
out of SQD) opens a quiet window that later steps keep polling through. `serve()`
waits out its rest before a QP is destroyed and at the end of a run; the QP's
next modify waits out an event window first. Used by the deterministic sweeps
and QPMachine.

A lone QP has no wire, so the only completion the ledger may not know is that
of a send the model knows is started (a UD send to itself): the model learns it
(`explain_completion`). Events nobody booked are not judged.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from typing import Any

from models import rules
from models.enums import STATES, Attr, QPState, QPType, WCStatus
from models.outcomes import Expectation
from models.qp import QPModel
from models.sources import Rule
from models.variant import LINUX, Variant
from models.variant import variant as parse_variant

from . import blame, returned, unmasked
from .core import Engine
from .device import Completion, Device, QPHandle, QueryResult, UnsupportedQPType, VerbResult
from .judge import Judge, ReproducerWriter, StepRecorder
from .ledger import Because
from .park import AFTER_END
from .qp_values import QPValues
from .quirks import Quirks, reads_wrong
from .read_back import ReadBack
from .records import Divergence, DivergenceSink
from .retiring import RetiringWatch, Roster
from .text import describe_result, outcome_tags
from .timing import DeliveryLog
from .track import Track

S = QPState
MUST_WAIT = 2.0


class CheckedQP:
    """One device QP and its QPModel: every call compared, every step logged."""

    def __init__(self, checker: Checker, handle: QPHandle, model: QPModel) -> None:
        self.checker = checker
        self.handle = handle
        self.model = model
        self.qp_type = QPType(handle.qp_type)
        self.track = Track(handle, model, self.qp_type, handle.qp_num, steps=[])
        self.destroyed = False
        self._read_at = -1  # the step after which the state was last read back
        self.created = returned.created_of(handle)  # what create_qp and create_cq wrote back
        self.read_back = ReadBack(checker, self.track, self.created)
        #: the values its modifies carry (valid ones, a transition's, the unmasked fills)
        self.values = QPValues(checker.device, handle, model, self.qp_type)
        self.case_over = False  # retired when its case or example ended (not by a step)

    @property
    def retired(self) -> bool:
        """Its case or example is done with it; it is still observed (Roster.retire)."""
        return self in self.checker.roster.retired

    @property
    def qp_num(self) -> int:
        return self.handle.qp_num

    @property
    def steps(self) -> list[dict[str, Any]]:
        """The step log (what a reproducer replays)."""
        return self.track.steps

    @property
    def broken(self) -> bool:
        """An unknown divergence was raised: the model may be off."""
        return self.track.broken

    def __repr__(self) -> str:
        return f"<CheckedQP {self.qp_type.name} 0x{self.qp_num:x} {self.model.state.name}>"

    # ------------------------------------------------------------------------- verbs
    def modify(
        self, attrs: Mapping[str, int], mask: Attr, fill: unmasked.Fill | None = None
    ) -> VerbResult:
        """modify_qp on model and device; the state is read back and compared. The fields
        outside the mask that `attrs` leaves out are valued by `fill` (default: the
        checker's next, `Checker.fills`): the outcome must not depend on them."""
        mask = Attr(int(mask))
        chosen = self.checker.fills(self.qp_type, self.model.state, mask) if fill is None else fill
        given = unmasked.filled(
            {k: int(v) for k, v in attrs.items()}, mask, self.values.plain(), chosen
        )
        step: dict[str, Any] = {"attrs": given, "mask": mask}
        outside = unmasked.outside(given, mask)
        if outside:  # a reproducer sets them too: a driver may wrongly read them
            step["unmasked"] = outside
        if self.model.state == S.SQD:  # is the device's drain still running? (quirk context)
            step["device_sq_draining"] = int(bool(self.handle.query().sq_draining))
        exp = self.model.modify(given, mask)
        # a checker that parks overlaps event windows too; one that does not (the machine's
        # blocking replay, whose examples must repeat exactly) waits every window out
        draining = bool(step.get("device_sq_draining", 0))
        overlap = self.checker.parking is not None and self.track.overlap_events(exp, draining)
        if not overlap and self.checker.watch.serve_events(self.track, self.checker.must_wait):
            exp = self.model.modify(given, mask)  # what the wait delivered may change it
        self.checker.verdict.avoid_hazard(self.track, exp, given, mask)
        res = self.handle.modify(given, mask)
        found = self.handle.query()
        self._conclude(exp, res, step, found.state, returned.query_rules(self.created, found))
        self._read_at = self.track.last()
        self.read_back.attributes(found, mask, res.accepted)
        self.read_back.returned(found)
        return res

    def query(self) -> QueryResult:
        """query_qp: the device's state must be the model's."""
        exp = self.model.query()
        found = self.handle.query()
        self._conclude(exp, VerbResult(True), {}, found.state,
                       returned.query_rules(self.created, found))
        self._read_at = self.track.last()
        self.read_back.attributes(found, None, True)
        self.read_back.returned(found)
        return found

    def post_send(self, wr_id: int | None = None) -> VerbResult:
        """One signaled send WR (the checker picks a unique wr_id if none is given)."""
        wr = self.checker.next_wr_id() if wr_id is None else wr_id
        exp = self.model.post_send(wr)
        res = self.handle.post_send(wr)
        self._conclude(exp, res, {"wr_id": wr}, None)
        return res

    def post_recv(self, wr_id: int | None = None) -> VerbResult:
        """One receive WR (the checker picks a unique wr_id if none is given)."""
        wr = self.checker.next_wr_id() if wr_id is None else wr_id
        exp = self.model.post_recv(wr)
        res = self.handle.post_recv(wr)
        self._conclude(exp, res, {"wr_id": wr}, None)
        return res

    def settle(self, window: float | None = None) -> None:
        """Poll CQs and events and compare (see Checker.settle)."""
        self.checker.settle(window)

    def destroy(self) -> None:
        """Settle what is due and wait out the QP's quiet window (both are unobservable
        afterwards), then destroy_qp."""
        if self.destroyed:
            return
        try:
            if not self.broken:
                self.checker.serve([self])
        finally:
            self.destroy_now()

    def retire(self, case_over: bool = True) -> None:
        """The case or example is done with this QP: settle what is due (bounded), then
        destroy it without waiting out its quiet window. If a window is still open and the
        checker parks (`Checker.parking`), the QP stays observed: polled at every poll of
        this checker (and, once the checker is parked, of later ones) until RETIRE_HOLD
        times its window has passed since its last step or delivery; the real time watched
        is then noted as the window that ended its observation. Without a park, or once
        broken, it is `destroy`.

        case_over=False: a step of a running example destroys the QP (the lone machine's
        destroy rule); what it shows late is found inside that example, so shrunk as usual,
        until the example ends too."""
        chk = self.checker
        if self.destroyed or self.retired:
            return
        self.case_over = case_over
        if self.broken or chk.parking is None:
            self.destroy()
            return
        chk.watch.poll_and_settle(chk.must_wait)  # an unknown divergence raises here
        if self.track.quiet_from is None:
            self.destroy()  # no window open: nothing left to watch
            return
        chk.roster.retire(self)

    def destroy_now(self) -> None:
        """destroy_qp on model and device, logged; the QP is no longer observed."""
        if self.destroyed:
            return
        exp = self.model.destroy()
        self.handle.destroy()
        self.model.apply(exp, True)
        self.checker.log.step(self.track, exp, VerbResult(True), {})
        self.destroyed = True
        self.checker.roster.forget(self)

    def check_state(self, unless_read: bool = False) -> None:
        """Query the device (not logged as a step): its state must be the model's.

        unless_read: skip it when the last logged step already read the state back.
        """
        if unless_read and self._read_at == self.track.last():
            return
        self.read_back.state(self.handle.query().state)

    def _conclude(
        self, exp: Expectation, res: VerbResult, step: dict[str, Any], seen: QPState | None,
        also: tuple[Rule, ...] = (),
    ) -> None:
        chk = self.checker
        chk.log.note(self.track, exp, also=also)
        idx, known = chk.verdict.conclude(self.track, exp, res, step, seen)
        want = exp.state_after(res.accepted)
        if seen is not None and seen in self.model.reported(want):
            self.read_back.named(want, seen)
            seen = want
        elsewhere = seen is not None and seen != want and res.accepted
        if elsewhere and self.read_back.landed(exp, seen, idx):
            seen = want = self.model.state
        if seen is not None and seen != want:  # also after a known outcome: its own divergence
            d = chk.divergence(
                self.track, "state", exp.rule, idx,
                f"{describe_result(res)}, state {want.name}", describe_result(res, seen),
                [*outcome_tags(res), f"state={seen.name}"],
            )
            quirk = chk.diverge(
                self.track, blame.named(d, self.track.blamed == idx, chk.judge.quirks)
            )
            known = quirk or known
            if not reads_wrong(quirk):
                chk.verdict.follow_state(self.track, seen, idx)
        chk.log.flush_notes("known" if known else "match")
        chk.watch.collect_events(self.track)

    # --------------------------------------------------------------------- bring-up
    def bring_to(self, state: QPState) -> None:
        """Walk the shortest legal path from the current state (through RESET if need be).

        The path is recomputed after every hop from the model's state, which follows the
        device: a hop the device refused as a known quirk (rxe refuses to leave SQD while
        draining) is then routed around instead of being retried.
        """
        refused: set[tuple[QPState, QPState]] = set()
        for _ in range(4 * len(STATES)):  # bounded: each refused hop is avoided afterwards
            if self.model.state == state:
                return
            cur = self.model.state
            try:
                nxt = self.values.path_to(state, avoid=refused)[0]
            except ValueError:
                if not refused:
                    raise
                hops = ", ".join(f"{a.name}->{b.name}" for a, b in sorted(refused))
                raise Unreachable(
                    f"{self.qp_type.name} QP cannot reach {state.name} from {cur.name}: the "
                    f"device keeps it there (known: {hops} did not move it)"
                ) from None
            attrs, mask = self.values.transition_attrs(nxt)  # a walk's fill: keyed, never drawn
            self.modify(attrs, mask, self.checker.walk_fills(self.qp_type, self.model.state, mask))
            if self.model.state == cur and nxt != cur:
                refused.add((cur, nxt))
        raise ValueError(f"could not bring the QP to {state.name}: the device kept refusing")


class Unreachable(ValueError):
    """A known quirk keeps the QP from a state (siw: ERR is final): no modify walk gets
    there from where the device holds it. Not a divergence (that was judged, and known)."""


def _retiring_watch(engine: Engine) -> RetiringWatch[CheckedQP]:
    """The lone checker's watch, with the roster of the QPs it observes."""
    return RetiringWatch(engine, engine.log, engine.windows, engine.match,
                         Roster(engine, engine.windows))


class Checker(Engine):
    """Opens checked QPs on a device and judges every divergence (quirk, or error).

    Every record goes to `sink` (None: nowhere) and an unknown one gets a reproducer
    from `reproducers` (None: none); `test` names the running test in the records. A
    device run passes the run's file, writer and test (fixtures/device_fixtures.py).
    """

    delivery_scope = "lone QP"
    watch: RetiringWatch[CheckedQP]  # built by _retiring_watch

    def __init__(
        self,
        device: Device,
        variant: Variant | str = LINUX,
        quirks: Quirks | None = None,
        recorder: StepRecorder | None = None,
        settle_window: float = 0.05,
        *,
        event_window: float | None = None,
        must_wait: float = MUST_WAIT,
        sink: DivergenceSink | None = None,
        reproducers: ReproducerWriter | None = None,
        delivery: DeliveryLog | None = None,
        test: str | None = None,
    ) -> None:
        identity = dict(device.identity())
        identity.setdefault("device", device.name)
        identity.setdefault("port", str(device.port))
        identity.setdefault("gid_index", str(device.gid_index))
        judge = Judge(quirks, sink, recorder, reproducers=reproducers, test=test)
        super().__init__(judge, identity, delivery, watch=_retiring_watch)
        self.device = device
        self.variant = parse_variant(variant)
        self.completion_window = settle_window
        self.event_window = settle_window if event_window is None else event_window
        self.must_wait = must_wait
        #: the QPs observed: open, or retired until their hold has passed (retiring.py); the
        #: watch's own, as its every poll also destroys the retired QPs whose hold passed
        self.roster: Roster[CheckedQP] = self.watch.roster
        self.parked = False  # its test or example ended; its retired QPs are still observed
        self.diverged = False  # an unknown divergence was raised (the model may be off)
        self._wr_ids = itertools.count(1)

    @property
    def quirks(self) -> Quirks:
        """The quirks divergences are judged with."""
        return self.judge.quirks

    @property
    def known(self) -> list[Divergence]:
        """Known divergences seen so far."""
        return self.judge.known

    @property
    def qps(self) -> list[CheckedQP]:
        """The QPs still open."""
        return list(self.roster.live)

    def open_qp(self, qp_type: QPType) -> CheckedQP:
        """A new QP in RESET with its model (raises UnsupportedQPType)."""
        qp_type = QPType(qp_type)
        handle = self.device.create_qp(qp_type)
        qp = CheckedQP(self, handle, QPModel(qp_type, self.variant, self.device.caps))
        self.roster.live.append(qp)
        returned.judge_created(self, qp.track, qp.created)  # what create wrote back
        return qp

    def check_absent_type(self, qp_type: QPType) -> None:
        """create_qp of a type the variant has no QPs of (iwarp: all but RC) must be refused,
        by the rule the variant's table names for it (iwarp.qp_type.rc_only). A device that
        creates one diverges (the QP is destroyed at once); a refusal is one step matched."""
        qp_type = QPType(qp_type)
        rule = self.variant.table.invalid_rule(QPState.RESET, QPState.INIT, qp_type)
        if qp_type in self.variant.table.qp_types:
            raise ValueError(f"the {self.variant.name} variant has {qp_type.name} QPs")
        try:
            self.device.create_qp(qp_type).destroy()
        except UnsupportedQPType:
            result = "match"
        else:
            step = {"verb": "create", "qp_type": qp_type.name, "expected": "refused",
                    "observed": "created"}
            d = Divergence(
                qp_type=qp_type.name, state="RESET", verb="create", attrs={}, mask=[],
                expected=f"create_qp({qp_type.name}) refused", observed="created",
                rule_id=rule.id, rule_summary=rule.summary, source=str(rule.source),
                rule_kind=rule.kind or "", rule_layer=rule.layer or "",
                device=dict(self.device_identity), steps=[step],
                kind="outcome", tags=["outcome", "outcome=accepted"],
            )
            result = "known" if self.judge.verdict(d, d.steps) else "match"
        if self.judge.recorder is not None:
            self.judge.recorder.step(qp_type.name, "create", "RESET", None, [rule.id], result)

    def next_wr_id(self) -> int:
        """A wr_id never used before in this checker."""
        return next(self._wr_ids)

    def park(self) -> None:
        """The test or example ended: retire every open QP (settled, not waited out). While
        some stay observed the checker is parked (`parking`): later checkers' polls keep
        them watched, and the park destroys them when their hold has passed."""
        for qp in list(self.roster.live):
            qp.retire()
        if self.roster.retired and self.parking is not None and not self.parked:
            self.parked = True
            self.parking.add(self)

    # ------------------------------------------------------- parked (qpconform/engine/park.py)
    def park_poll(self) -> None:
        """One poll of the retired QPs (an unknown divergence raises DivergenceError)."""
        self.watch.collect()

    def park_close(self, observed: float) -> None:
        """Destroy what is left; `observed` > 0: its hold has passed, each QP's own watch is
        noted (0: released unjudged, nothing noted)."""
        if observed > 0.0:
            self.roster.reap(list(self.roster.retired), time.monotonic())
        self.close()

    def last_active(self) -> float:
        """time.monotonic() of the last step or delivery of its retired QPs."""
        return self.roster.last_active()

    def park_hold(self) -> float:
        return self.roster.hold()

    def divergence(self, track: Track, kind: str, rule: Rule, origin: int, expected: str,
                   observed: str, tags: list[str], **override: Any) -> Divergence:
        """The engine's record; one found in a retired QP whose case or example had ended
        says so (one a running example's step retired is found inside that example)."""
        d = super().divergence(track, kind, rule, origin, expected, observed, tags, **override)
        if any(q.track is track and (q.case_over or self.parked) for q in self.roster.retired):
            d.context["after_end"] = AFTER_END
        return d

    def close(self) -> None:
        """Destroy every QP still open or retired, without comparing anything (teardown).

        Every QP is tried even if one fails; the first failure is raised at the end.
        """
        failure: Exception | None = None
        for qp in [*self.roster.live, *self.roster.retired]:
            qp.destroyed = True
            self.roster.forget(qp)
            try:
                qp.handle.destroy()
            except Exception as exc:  # keep destroying the others
                failure = failure or exc
        if failure is not None:
            raise failure

    def settle(self, window: float | None = None) -> None:
        """Poll every open QP and compare; wait only while something is due.

        Quiet windows (`Track.owe_quiet`, `Track.owe_events`) stay open while later steps
        poll; `serve` waits out what is left of them before destroy and at the end of a
        run, and a QP's next modify waits out its event window. `window` forces a full window of
        that length now. Anything due gets at most must_wait; then it is a divergence.
        """
        if window is None:
            self.watch.poll_and_settle(self.must_wait)
        else:
            self.watch.observe(window, self.must_wait)
            self.log.note_watched()
            for track in self.tracks():
                track.close_quiet()

    def serve(self, qps: list[CheckedQP] | None = None) -> None:
        """Wait out the open quiet windows of `qps` (default: all), polling every QP."""
        tracks = None if qps is None else [q.track for q in qps]
        self.watch.serve_quiet(self.must_wait, tracks)

    # -------------------------------------------------------------- the rule set's part
    def tracks(self) -> list[Track]:
        return self.roster.tracks()

    def on_unknown(self, track: Track) -> None:
        self.diverged = True
        self.log.flush_notes("divergence")

    def explain_completion(self, track: Track, wc: Completion) -> bool:
        """A started send or a queued receive completing on its own: the model learns it."""
        model = track.model
        if wc.queue == "send" and wc.wr_id in model.queues.in_flight:
            order = model.queues.in_flight
            rule = rules.SEND_DONE
        elif wc.queue == "recv" and wc.wr_id in model.queues.recvs:
            order = model.queues.recvs
            rule = rules.RECV_DONE
        else:
            return False
        if order[0] != wc.wr_id:
            d = self.divergence(
                track, "order", rule, track.last(), f"in order: {order}",
                f"completion wr {wc.wr_id}",
                [f"status={WCStatus(wc.status).name}", f"queue={wc.queue}"],
            )
            self.diverge(track, d)
            return True
        if wc.queue == "send":
            exp = model.send_completed(WCStatus(wc.status))
        else:
            exp = model.recv_completed(WCStatus(wc.status))
        origin = track.last()
        track.ledger.done[wc.wr_id] = Because(exp.rule, origin)
        track.ledger.expect(exp, origin, skip=1)
        self.log.note(track, exp)
        self.log.flush_notes("match")
        return True
