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

At ~500 lines this module holds the rule set's two classes, `CheckedQP` (one QP's verbs,
state and read-back checks, bring-up) and the `Checker` that owns them; the engine itself
is core.py's, so what is left here is the lone QP's own.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from models import readback, rules
from models.enums import STATES, Attr, QPState, QPType, WCStatus
from models.outcomes import Expectation
from models.qp import QPModel
from models.sources import Rule
from models.variant import LINUX, Variant
from models.variant import variant as parse_variant

from . import blame, returned, unmasked
from .core import Engine
from .device import Completion, Device, QPHandle, QueryResult, UnsupportedQPType, VerbResult
from .judge import DivergenceError, Judge, ReproducerWriter, StepRecorder
from .ledger import Because
from .park import AFTER_END
from .quirks import Quirks, reads_wrong
from .records import Divergence, DivergenceSink
from .text import describe_result, masked_attrs, outcome_tags
from .timing import DeliveryLog
from .track import Track

S = QPState
MUST_WAIT = 2.0
#: A retired QP (its case or example ended: `CheckedQP.retire`) stays observed this many
#: times its quiet window (widened by the run's lone deliveries) after its last step or
#: delivery, then is destroyed: the wait costs nothing, the margin covers a delivery
#: slower than any the run had seen when the window opened (siw 6.1: a 164 ms lone
#: flush after 100 ms windows had closed, December 2026).
RETIRE_HOLD = 2.0
#: Values for fields a device's valid_attrs() may leave out.
FALLBACK_ATTRS: dict[str, int] = {
    "en_sqd_async_notify": 1,
    "path_mig_state": 0,
    "rate_limit": 0,
    "alt_timeout": 14,
}


class CheckedQP:
    """One device QP and its QPModel: every call compared, every step logged."""

    def __init__(self, checker: Checker, handle: QPHandle, model: QPModel) -> None:
        self.checker = checker
        self.handle = handle
        self.model = model
        self.qp_type = QPType(handle.qp_type)
        self.track = Track(handle, model, self.qp_type, handle.qp_num, steps=[])
        self.destroyed = False
        self._valid: dict[str, int] | None = None
        self._read_at = -1  # the step after which the state was last read back
        self.created = returned.created_of(handle)  # what create_qp and create_cq wrote back
        self._followed: set[str] = set()  # returned fields a known divergence was seen in
        self.case_over = False  # retired when its case or example ended (not by a step)

    @property
    def retired(self) -> bool:
        """Its case or example is done with it; it is still observed (Checker.retire)."""
        return self in self.checker._retired

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
            {k: int(v) for k, v in attrs.items()}, mask, self._plain(), chosen
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
        if not overlap and self.checker.serve_events(self.track, self.checker.must_wait):
            exp = self.model.modify(given, mask)  # what the wait delivered may change it
        self.checker.avoid_hazard(self.track, exp, given, mask)
        res = self.handle.modify(given, mask)
        found = self.handle.query()
        self._conclude(exp, res, step, found.state, returned.query_rules(self.created, found))
        self._read_at = self.track.last()
        self._check_readback(found, mask, res.accepted)
        self._check_returned(found)
        return res

    def query(self) -> QueryResult:
        """query_qp: the device's state must be the model's."""
        exp = self.model.query()
        found = self.handle.query()
        self._conclude(exp, VerbResult(True), {}, found.state,
                       returned.query_rules(self.created, found))
        self._read_at = self.track.last()
        self._check_readback(found, None, True)
        self._check_returned(found)
        return found

    def _check_returned(self, found: QueryResult) -> None:
        """query_qp's cur_qp_state and capabilities (engine/returned.py, models/returned.py)."""
        if not self.broken:
            returned.judge_query(self.checker, self.track, self.created, found,
                                 self.track.last(), self._followed)

    def _check_readback(self, found: QueryResult, mask: Attr | None, accepted: bool) -> None:
        """Every attribute the model knows must read back as set (models/readback.py).

        A field outside the modify's mask that changed, or any change by a refused
        modify, breaks its own rule; a known divergence is followed (the model takes the
        device's value) so one bug is reported once.
        """
        if self.broken or not found.attrs:
            return
        if mask is not None and self.model.stored.fields:  # what a reproducer checks
            self.track.steps[-1]["readback"] = {
                name: sorted(e.values) for name, e in self.model.stored.fields.items()
            }
        chk = self.checker
        for name, exp, seen in self.model.stored.differences(found.attrs):
            if not accepted:
                rule = readback.READBACK_REFUSED
            elif mask is None or readback.COMPARED[name] in mask:
                rule = exp.rule
            else:
                rule = readback.READBACK_UNMASKED
            d = chk.divergence(
                self.track, "readback", rule, self.track.last(), exp.text(name),
                f"query_qp {name}={seen}", [f"field={name}", *readback.direction(exp, seen)],
            )
            chk.diverge(self.track, d)
            self.model.stored.follow(name, seen)

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
            self._destroy_now()

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
        chk.poll_and_settle(chk.must_wait)  # an unknown divergence raises here
        if self.track.quiet_from is None:
            self.destroy()  # no window open: nothing left to watch
            return
        chk.retire(self)

    def _destroy_now(self) -> None:
        """destroy_qp on model and device, logged; the QP is no longer observed."""
        if self.destroyed:
            return
        exp = self.model.destroy()
        self.handle.destroy()
        self.model.apply(exp, True)
        self.checker.log_step(self.track, exp, VerbResult(True), {})
        self.destroyed = True
        self.checker.forget(self)

    def check_state(self, unless_read: bool = False) -> None:
        """Query the device (not logged as a step): its state must be the model's.

        unless_read: skip it when the last logged step already read the state back.
        """
        if unless_read and self._read_at == self.track.last():
            return
        found = self.handle.query().state
        if found in self.model.reported():
            self._note_name(self.model.state, found)
            return
        if found != self.model.state:
            chk, origin = self.checker, self.track.last()
            d = chk.divergence(
                self.track, "state", rules.QUERY, origin,
                expected=f"state {self.model.state.name}", observed=f"state {found.name}",
                tags=[f"state={found.name}"], verb="query", attrs={}, mask=[],
            )
            if not reads_wrong(chk.diverge(self.track, d)):
                chk.follow_state(self.track, found, origin)

    def _conclude(
        self, exp: Expectation, res: VerbResult, step: dict[str, Any], seen: QPState | None,
        also: tuple[Rule, ...] = (),
    ) -> None:
        chk = self.checker
        chk.note(self.track, exp, also=also)
        idx, known = chk.conclude(self.track, exp, res, step, seen)
        want = exp.state_after(res.accepted)
        if seen is not None and seen in self.model.reported(want):
            self._note_name(want, seen)
            seen = want
        if seen is not None and seen != want and res.accepted and self._landed(exp, seen, idx):
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
                chk.follow_state(self.track, seen, idx)
        chk.flush_notes("known" if known else "match")
        chk.collect_events(self.track)

    def _note_name(self, want: QPState, seen: QPState) -> None:
        """query_qp named a QP in `want` `seen`, one of the names the variant allows for it
        (iwarp: IDLE entered as RESET or RTR may read back as INIT): which name a device
        uses is its choice, recorded for the report's characteristics."""
        rule = self.model.table.naming_rule(want)
        if rule is not None:
            self.checker.record_choice(
                rule, "as the state asked for" if seen == want else f"as {seen.name}"
            )

    def _landed(self, exp: Expectation, seen: QPState, idx: int) -> bool:
        """An accepted modify left the QP in another state its "may" rule allows (iwarp: a
        driver that ignores the move): the model follows the device there (the choice of
        outcome is already recorded by `conclude`)."""
        for state in exp.may_land:
            if seen in self.model.reported(state):
                self.checker.follow_state(self.track, state, idx)
                return True
        return False

    # --------------------------------------------------------------------- bring-up
    def valid_attrs(self) -> dict[str, int]:
        """A valid value for every field (the device's, plus fallbacks), cached per QP."""
        if self._valid is None:
            found = dict(FALLBACK_ATTRS)
            found["alt_port_num"] = self.checker.device.port
            found.update(self.checker.device.valid_attrs(self.handle))
            self._valid = found
        return dict(self._valid)

    def attrs_for(self, mask: Attr, nxt: QPState | None = None) -> dict[str, int]:
        """Valid values for the fields of mask; qp_state=nxt, cur_qp_state=the model's state."""
        valid = self.valid_attrs()
        valid["qp_state"] = int(self.model.state if nxt is None else nxt)
        valid["cur_qp_state"] = int(self.model.state)
        return masked_attrs(valid, mask)

    def with_unmasked(self, attrs: Mapping[str, int], mask: Attr, style: str) -> dict[str, int]:
        """`attrs` plus the fields outside `mask` a driver could wrongly read, every one
        filled by `style`: "valid" (the QP's valid values), "zero", "other" (another valid
        value) or "wild" (out of range, within the C field). Fields `attrs` sets keep
        their values."""
        if style not in UNMASKED_STYLES:
            raise ValueError(f"unmasked style {style!r}: use one of {UNMASKED_STYLES}")
        choice = unmasked.PLAIN if style == "valid" else style
        return unmasked.filled(attrs, mask, self._plain(), unmasked.uniform(choice))

    def _plain(self) -> dict[str, int]:
        """What each field outside a mask holds when nothing is wrong: the QP's valid
        values, its current state for qp_state and cur_qp_state."""
        valid = self.valid_attrs()
        valid["qp_state"] = valid["cur_qp_state"] = int(self.model.state)
        return valid

    def transition_attrs(self, nxt: QPState) -> tuple[dict[str, int], Attr]:
        """Valid attrs and the exactly-required mask (|STATE) for current -> nxt."""
        entry = self.model.table.lookup(self.qp_type, self.model.state, nxt)
        if entry is None:
            raise ValueError(f"{self.qp_type.name} {self.model.state.name}->{nxt.name} is invalid")
        mask = Attr(entry.required | Attr.STATE)
        return self.attrs_for(mask, nxt), mask

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
                nxt = self.path_to(state, avoid=refused)[0]
            except ValueError:
                if not refused:
                    raise
                hops = ", ".join(f"{a.name}->{b.name}" for a, b in sorted(refused))
                raise Unreachable(
                    f"{self.qp_type.name} QP cannot reach {state.name} from {cur.name}: the "
                    f"device keeps it there (known: {hops} did not move it)"
                ) from None
            attrs, mask = self.transition_attrs(nxt)  # a walk's fill: keyed, never drawn
            self.modify(attrs, mask, self.checker.walk_fills(self.qp_type, self.model.state, mask))
            if self.model.state == cur and nxt != cur:
                refused.add((cur, nxt))
        raise ValueError(f"could not bring the QP to {state.name}: the device kept refusing")

    def path_to(
        self, state: QPState, avoid: set[tuple[QPState, QPState]] | None = None
    ) -> list[QPState]:
        """Shortest list of modify targets from the model's state to state (skipping avoid)."""
        start = self.model.state
        came: dict[QPState, QPState | None] = {start: None}
        todo = deque([start])
        while todo:
            cur = todo.popleft()
            if cur == state:
                path = []
                while came[cur] is not None:
                    path.append(cur)
                    cur = came[cur]  # type: ignore[assignment]
                return path[::-1]
            for nxt in self.model.table.moves_to(self.qp_type, cur):
                if nxt not in came and (cur, nxt) not in (avoid or ()):
                    came[nxt] = cur
                    todo.append(nxt)
        raise ValueError(f"{state.name} cannot be reached by modify_qp from {start.name}")


class Unreachable(ValueError):
    """A known quirk keeps the QP from a state (siw: ERR is final): no modify walk gets
    there from where the device holds it. Not a divergence (that was judged, and known)."""


#: Ways to fill every field outside a modify's mask alike (CheckedQP.with_unmasked).
UNMASKED_STYLES = ("valid", "zero", "other", "wild")


class Checker(Engine):
    """Opens checked QPs on a device and judges every divergence (quirk, or error).

    Every record goes to `sink` (None: nowhere) and an unknown one gets a reproducer
    from `reproducers` (None: none); `test` names the running test in the records. A
    device run passes the run's file, writer and test (fixtures/device_fixtures.py).
    """

    delivery_scope = "lone QP"

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
        super().__init__(judge, identity, delivery)
        self.device = device
        self.variant = parse_variant(variant)
        self.completion_window = settle_window
        self.event_window = settle_window if event_window is None else event_window
        self.must_wait = must_wait
        self._live: list[CheckedQP] = []
        #: QPs their case or example is done with, observed until their hold has passed
        self._retired: list[CheckedQP] = []
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
        return list(self._live)

    def open_qp(self, qp_type: QPType) -> CheckedQP:
        """A new QP in RESET with its model (raises UnsupportedQPType)."""
        qp_type = QPType(qp_type)
        handle = self.device.create_qp(qp_type)
        qp = CheckedQP(self, handle, QPModel(qp_type, self.variant, self.device.caps))
        self._live.append(qp)
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

    def forget(self, qp: CheckedQP) -> None:
        """A QP was destroyed: stop observing it."""
        for where in (self._live, self._retired):
            if qp in where:
                where.remove(qp)

    def retire(self, qp: CheckedQP) -> None:
        """`qp` is done with but still owes a quiet window (CheckedQP.retire): observe it
        until its hold has passed, then destroy it."""
        self.forget(qp)
        self._retired.append(qp)

    def retire_hold(self) -> float:
        """How long a retired QP stays observed after its last step or delivery: RETIRE_HOLD
        times the longer of its windows, as widened by the run's lone deliveries (asked at
        every poll: it follows the tail)."""
        return RETIRE_HOLD * max(self._window("completion"), self._window("event"))

    def collect(self) -> None:
        """Poll every QP (Engine.collect), then destroy the retired ones whose hold had
        passed when the poll began; the time each was watched after its last step or
        delivery is noted as the window that ended its observation."""
        began = time.monotonic()
        try:
            super().collect()
        except DivergenceError:  # a retired QP that diverged is watched no more
            for qp in [q for q in self._retired if q.broken]:
                qp._destroy_now()
            raise
        if self._retired:
            hold = self.retire_hold()
            self._reap([q for q in self._retired if began >= q.track.active_at + hold], began)

    def _reap(self, qps: list[CheckedQP], now: float) -> None:
        for qp in qps:
            observed = now - qp.track.active_at
            if qp.track.quiet_len > 0.0:
                self.delivery.note_closed(self._kind("completion"), observed)
            if qp.track.events_len > 0.0:
                self.delivery.note_closed(self._kind("event"), observed)
            qp._destroy_now()

    def park(self) -> None:
        """The test or example ended: retire every open QP (settled, not waited out). While
        some stay observed the checker is parked (`parking`): later checkers' polls keep
        them watched, and the park destroys them when their hold has passed."""
        for qp in list(self._live):
            qp.retire()
        if self._retired and self.parking is not None and not self.parked:
            self.parked = True
            self.parking.add(self)

    # ------------------------------------------------------- parked (qpconform/engine/park.py)
    def park_poll(self) -> None:
        """One poll of the retired QPs (an unknown divergence raises DivergenceError)."""
        self.collect()

    def park_close(self, observed: float) -> None:
        """Destroy what is left; `observed` > 0: its hold has passed, each QP's own watch is
        noted (0: released unjudged, nothing noted)."""
        if observed > 0.0:
            self._reap(list(self._retired), time.monotonic())
        self.close()

    def last_active(self) -> float:
        """time.monotonic() of the last step or delivery of its retired QPs."""
        return max((q.track.active_at for q in self._retired), default=0.0)

    def park_hold(self) -> float:
        return self.retire_hold()

    def divergence(self, track: Track, kind: str, rule: Rule, origin: int, expected: str,
                   observed: str, tags: list[str], **override: Any) -> Divergence:
        """The engine's record; one found in a retired QP whose case or example had ended
        says so (one a running example's step retired is found inside that example)."""
        d = super().divergence(track, kind, rule, origin, expected, observed, tags, **override)
        if any(q.track is track and (q.case_over or self.parked) for q in self._retired):
            d.context["after_end"] = AFTER_END
        return d

    def close(self) -> None:
        """Destroy every QP still open or retired, without comparing anything (teardown).

        Every QP is tried even if one fails; the first failure is raised at the end.
        """
        failure: Exception | None = None
        for qp in [*self._live, *self._retired]:
            qp.destroyed = True
            self.forget(qp)
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
            self.poll_and_settle(self.must_wait)
        else:
            self.observe(window, self.must_wait)
            self.note_watched()
            for track in self.tracks():
                track.close_quiet()

    def serve(self, qps: list[CheckedQP] | None = None) -> None:
        """Wait out the open quiet windows of `qps` (default: all), polling every QP."""
        tracks = None if qps is None else [q.track for q in qps]
        self.serve_quiet(self.must_wait, tracks)

    # -------------------------------------------------------------- the rule set's part
    def tracks(self) -> list[Track]:
        return [q.track for q in (*self._live, *self._retired)]

    def on_unknown(self, track: Track) -> None:
        self.diverged = True
        self.flush_notes("divergence")

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
        self.note(track, exp)
        self.flush_notes("match")
        return True
