"""The lone-QP state machine: random verb sequences on real QPs, every step checked.

QPMachine drives up to a few QPs through modify (legal and illegal targets,
mask shapes, valid and boundary values), query, post_recv, post_send (only
where no WR can reach the wire: states the model refuses it in, SQE and ERR;
a lone QP has no peer), destroy and re-create. The engine's Checker raises
DivergenceError on any unknown divergence; Hypothesis then shrinks the
sequence, and `run_machine` hands the minimal one to its `keep` callback (the
suite writes it and its reproducer: reports/).

Steps per example (stateful_step_count) and examples (max_examples) come from
the settings given, by default the loaded Hypothesis profile.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky, FlakyFailure
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from models.enums import STATES, Attr, QPState, QPType
from models.reach import reachable_states
from models.variant import LINUX, Variant
from qpconform.engine.device import Device, UnsupportedQPType
from qpconform.engine.hazards import HazardAvoided
from qpconform.engine.judge import DivergenceError, StepRecorder
from qpconform.engine.lone import MUST_WAIT, CheckedQP, Checker, Unreachable
from qpconform.engine.park import Park
from qpconform.engine.quirks import Quirks
from qpconform.engine.records import Divergence, DivergenceList
from qpconform.engine.text import masked_attrs
from qpconform.engine.timing import DeliveryLog
from qpconform.machines.fills import draw_fills
from qpconform.machines.modify_draws import ALL_BITS, SHAPES, boundary_values, in_mask, mask_of
from qpconform.machines.stops import deliver_pending

#: Where run_machine hands each divergence it keeps; `minimal` marks the shrunk unknown one.
KeepDivergence = Callable[[Divergence, bool], "Divergence | None"]

S = QPState

START_STATES = (S.RESET, S.INIT, S.RTR, S.RTS)
BATCH = 10  # examples per batch when a time budget is spent


@dataclass(frozen=True)
class MachineConfig:
    """Bounds of one run: live QPs, WRs per QP (below the adapter's queue depth), timing."""

    max_qps: int = 3
    max_posts: int = 8
    settle_window: float = 0.05
    event_window: float | None = None  # None: settle_window
    must_wait: float = MUST_WAIT
    delivery: DeliveryLog | None = None  # where delivery delays are measured (a shared log)
    test: str | None = None  # the test the records name (the suite's pytest node id)
    #: park a finished example's QPs (observed while the next runs: run_machine) instead of
    #: waiting out their windows before destroying them
    park: bool = True


class QPMachine(RuleBasedStateMachine):
    """Random sequences of verbs on up to config.max_qps QPs, all checked."""

    qps = Bundle("qps")

    def __init__(
        self,
        device: Device,
        qp_types: Sequence[Any],
        variant: Variant | str = LINUX,
        quirks: Quirks | None = None,
        config: MachineConfig = MachineConfig(),
        sink: DivergenceList | None = None,
        recorder: StepRecorder | None = None,
        park: Park | None = None,
    ) -> None:
        """`park`: where a finished example's QPs stay observed while the next runs (None:
        each example waits out its windows before its QPs are destroyed)."""
        super().__init__()
        self.device = device
        self.types = list(qp_types)
        self.config = config
        self.checker = Checker(
            device,
            variant,
            quirks,
            recorder,
            config.settle_window,
            event_window=config.event_window,
            must_wait=config.must_wait,
            sink=sink if sink is not None else DivergenceList(),
            delivery=config.delivery,
            test=config.test,
        )
        self.checker.parking = park
        self.posts: dict[int, int] = {}

    # ------------------------------------------------------------------ QP lifetime
    def _open(self, data: st.DataObject) -> CheckedQP:
        """A new QP, brought up to a drawn start state (RESET when shrunk)."""
        qp_type = data.draw(st.sampled_from(self.types), label="qp_type")
        starts = [s for s in START_STATES if s in self._reachable(qp_type)]
        start = data.draw(st.sampled_from(starts), label="start")
        qp = self.checker.open_qp(qp_type)
        self.posts[qp.qp_num] = 0
        qp.bring_to(start)
        return qp

    def _reachable(self, qp_type: QPType) -> list[QPState]:
        """States a modify walk reaches for this type (iwarp: not RTS, a connection's)."""
        return reachable_states(self.checker.variant.table, qp_type)

    @initialize(target=qps, data=st.data())
    def first_qp(self, data: st.DataObject) -> CheckedQP:
        draw_fills(self.checker, data)  # every modify of the example, whichever step sends it
        return self._open(data)

    @precondition(lambda self: len(self.checker.qps) < self.config.max_qps)
    @rule(target=qps, data=st.data())
    def create(self, data: st.DataObject) -> CheckedQP:
        return self._open(data)

    @rule(qp=consumes(qps))
    def destroy(self, qp: CheckedQP) -> None:
        """Settle what is due, then destroy without waiting out the QP's quiet window: it
        stays observed while the example goes on (CheckedQP.retire), or, when the examples
        are replayed blocking (no park), waits it out first."""
        qp.retire(case_over=False)

    # ----------------------------------------------------------------------- modify
    @rule(qp=qps, data=st.data())
    def modify_legal(self, qp: CheckedQP, data: st.DataObject) -> None:
        """A legal target with a mask shape: exact, +optional, -1 required, +extra, CUR_STATE."""
        targets = qp.model.table.targets(qp.qp_type, qp.model.state)
        nxt = data.draw(st.sampled_from(targets), label="target")
        entry = qp.model.table.lookup(qp.qp_type, qp.model.state, nxt)
        assert entry is not None
        shape = data.draw(st.sampled_from(SHAPES), label="shape")
        mask = Attr(entry.required | Attr.STATE)
        optional = [b for b in Attr if b & entry.optional and b != Attr.CUR_STATE]
        cur = qp.model.state
        if shape in ("optional", "no_state") and optional:
            mask |= mask_of(data.draw(st.sets(st.sampled_from(optional)), label="optional"))
        if shape == "no_state":
            mask &= ~Attr.STATE
        elif shape == "missing" and entry.required:
            bits = [b for b in Attr if b & entry.required]
            mask &= ~data.draw(st.sampled_from(bits), label="drop")
        elif shape == "extra":
            extra = [b for b in ALL_BITS if not b & int(entry.allowed)]
            mask = Attr(int(mask) | data.draw(st.sampled_from(extra), label="extra"))
        elif shape in ("cur_right", "cur_wrong"):
            mask |= Attr.CUR_STATE
            if shape == "cur_wrong":
                cur = data.draw(st.sampled_from([s for s in STATES if s != cur]), label="cur")
        self._modify(qp, nxt, mask, data, cur)

    @rule(qp=qps, data=st.data())
    def modify_illegal(self, qp: CheckedQP, data: st.DataObject) -> None:
        """A target the table does not allow (or no state at all), with a random mask."""
        legal = qp.model.table.targets(qp.qp_type, qp.model.state)
        illegal = [s for s in STATES if s not in legal] + [S.UNKNOWN, 8]
        nxt = data.draw(st.sampled_from(illegal), label="target")
        bits = data.draw(st.sets(st.sampled_from(ALL_BITS), max_size=6), label="bits")
        self._modify(qp, nxt, Attr(sum(bits) | Attr.STATE), data, qp.model.state)

    @rule(qp=qps, state=st.sampled_from([S.INIT, S.RTR, S.RTS, S.SQD, S.ERR, S.RESET]))
    def bring_to(self, qp: CheckedQP, state: QPState) -> None:
        """The legal bring-up path to a state (valid attributes, exactly-required masks);
        nothing when no modify walk gets there (iwarp: RTS and beyond)."""
        if state in self._reachable(qp.qp_type):
            # a known quirk holds the QP (siw: ERR), or a known hazard keeps a modify unsent
            with contextlib.suppress(Unreachable, HazardAvoided):
                qp.bring_to(state)

    @rule(qp=qps, notify=st.booleans())
    def drain(self, qp: CheckedQP, notify: bool) -> None:
        """RTS->SQD with or without EN_SQD_ASYNC_NOTIFY: SQ_DRAINED iff asked for (nothing
        when a modify walk cannot reach RTS: iwarp)."""
        if S.RTS not in self._reachable(qp.qp_type):
            return
        try:
            qp.bring_to(S.RTS)
        except (Unreachable, HazardAvoided):  # a known quirk holds the QP (irdma: no
            return  # RESET->INIT after RESET), or a known hazard kept a modify unsent
        mask = Attr.STATE | Attr.EN_SQD_ASYNC_NOTIFY
        attrs = qp.values.attrs_for(mask, S.SQD)
        attrs["en_sqd_async_notify"] = int(notify)
        qp.modify(attrs, mask)

    def _modify(
        self, qp: CheckedQP, nxt: int, mask: Attr, data: st.DataObject, cur: QPState
    ) -> None:
        attrs = qp.values.attrs_for(Attr(sum(ALL_BITS) & ~(1 << 21) & ~(1 << 26)))
        attrs["qp_state"], attrs["cur_qp_state"] = int(nxt), int(cur)
        if Attr.EN_SQD_ASYNC_NOTIFY in mask:
            attrs["en_sqd_async_notify"] = int(data.draw(st.booleans(), label="notify"))
        fields = [
            f
            for f in attrs
            if f not in ("qp_state", "cur_qp_state")
            and in_mask(f, mask)
            and boundary_values(f, self.device.caps)
        ]
        if fields and data.draw(st.booleans(), label="boundary"):
            field = data.draw(st.sampled_from(fields), label="field")
            values = boundary_values(field, self.device.caps)
            attrs[field] = data.draw(st.sampled_from(values), label=field)
        with contextlib.suppress(HazardAvoided):  # recorded as known; nothing was sent
            qp.modify(masked_attrs(attrs, mask), mask)  # the rest: the drawn fill

    # ------------------------------------------------------------------ other verbs
    @rule(qp=qps)
    def query(self, qp: CheckedQP) -> None:
        qp.query()

    @rule(qp=qps, count=st.integers(1, 3))
    def post_recv(self, qp: CheckedQP, count: int) -> None:
        """Receive WRs are safe in any state: nothing arrives on a lone QP."""
        for _ in range(min(count, self.config.max_posts - self.posts[qp.qp_num])):
            self.posts[qp.qp_num] += 1
            qp.post_recv()

    def _sendable(self) -> list[CheckedQP]:
        """QPs where a send cannot reach the wire (refused, or flushed in SQE/ERR)."""
        return [
            q
            for q in self.checker.qps
            if q.model.state in (S.RESET, S.INIT, S.RTR, S.SQE, S.ERR)
            and self.posts[q.qp_num] < self.config.max_posts
        ]

    @precondition(lambda self: bool(self._sendable()))
    @rule(data=st.data(), count=st.integers(1, 3))
    def post_send(self, data: st.DataObject, count: int) -> None:
        """Send WRs only where the model refuses them or flushes them (SQE, ERR)."""
        qp = data.draw(st.sampled_from(self._sendable()), label="qp")
        for _ in range(min(count, self.config.max_posts - self.posts[qp.qp_num])):
            self.posts[qp.qp_num] += 1
            qp.post_send()

    # ------------------------------------------------------------------- invariants
    @invariant()
    def device_agrees(self) -> None:
        """Completions and events settle as the model says; every QP is in the model's state."""
        deliver_pending()  # a Ctrl-C or time bound a gc callback swallowed stops here
        self.checker.settle()
        for qp in self.checker.qps:
            qp.check_state(unless_read=True)

    def teardown(self) -> None:
        """Settle what is due, then park the example's QPs (observed while the next example
        runs, destroyed once their hold has passed: Checker.park), or with no park wait out
        their open quiet windows and destroy them.

        Skipped once a divergence was raised: the model may be off, and the error being
        shrunk must not be replaced by a consequence of it.
        """
        try:
            if not self.checker.diverged:
                if self.checker.parking is not None:
                    self.checker.park()
                else:
                    self.checker.serve()
        finally:
            if not self.checker.parked:
                self.checker.close()


def machine_settings(**overrides: Any) -> settings:
    """The loaded profile, without deadline or explain phase, one bug per run."""
    parent = settings()
    values: dict[str, Any] = {
        "deadline": None,
        # the explain phase traces every line of replays: minutes on a device, no gain here
        "phases": [p for p in parent.phases if p != Phase.explain],
        "report_multiple_bugs": False,
        "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much],
    }
    values.update(overrides)
    return settings(parent, **values)


def device_settings(budgeted: bool, seeded: bool) -> settings:
    """The lone machine's settings on a device: batches of BATCH examples under a time
    budget (else one batch of the profile's count).

    A run with a seed uses no example database: Hypothesis would first replay the
    examples earlier runs saved in .hypothesis/ (Phase.reuse), so the same seed would
    run other sequences on another machine or another day. The seed alone decides them
    (fixtures/seeds.py), which is what makes its replay line exact.
    """
    overrides: dict[str, Any] = {}
    if budgeted:
        overrides["max_examples"] = BATCH
    if seeded:
        overrides["database"] = None
    return machine_settings(**overrides)


def _run_seeded(example_seed: int | None, factory: Any, **kwargs: Any) -> None:
    """run_state_machine_as_test, from example_seed when one is given."""
    if example_seed is not None:
        factory = seed(example_seed)(factory)
    run_state_machine_as_test(factory, **kwargs)


#: Divergences met in something the device delivered (a completion or event judged wrong):
#: where an example meets one depends on when it came, and a parked run overlaps windows, so
#: its examples do not wait for it. Such a divergence is shrunk in the blocking replay.
DELIVERED = frozenset({"completion", "event"})
#: Why a divergence whose replays did not repeat it was not shrunk (record and message).
NOT_REPEATED = (
    "seen at a time of delivery (a late completion or event) that Hypothesis' replays of its "
    "example did not repeat, and no replay waiting out every window met it: not shrunk"
)


#: Why a divergence met before Hypothesis' replay of its example drew other steps was not
#: shrunk (FlakyStrategyDefinition: the device answered the replay differently).
NOT_REPLAYED = (
    "found, then Hypothesis could not replay its example (the replay drew other steps: "
    "{error}): this is the record as it was met, not shrunk"
)


def _unreplayed(exc: Flaky, sink: DivergenceList) -> DivergenceError | None:
    """The divergence a Flaky ending of the run hides: the one inside it, else the first
    unknown one the run met (None: it met none, and the Flaky error is the failure)."""
    found = _divergence_in(exc) if isinstance(exc, BaseExceptionGroup) else None
    if found is None and sink.first_unknown is not None:
        found = DivergenceError(sink.first_unknown)
    if found is not None and not found.record.context.get("after_end"):
        found.record.context["not_shrunk"] = NOT_REPLAYED.format(error=type(exc).__name__)
    return found


def _divergence_in(group: BaseExceptionGroup) -> DivergenceError | None:
    """The first DivergenceError inside a (nested) exception group."""
    for exc in group.exceptions:
        if isinstance(exc, DivergenceError):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            found = _divergence_in(exc)
            if found is not None:
                return found
    return None


def run_machine(
    device: Device,
    qp_types: Sequence[Any],
    variant: Variant | str = LINUX,
    quirks: Quirks | None = None,
    *,
    config: MachineConfig = MachineConfig(),
    hypothesis_settings: settings | None = None,
    recorder: StepRecorder | None = None,
    keep: KeepDivergence | None = None,
    example_seed: int | None = None,
    park: Park | None = None,
) -> list[Divergence]:
    """Run QPMachine; returns the known divergences (one per kind).

    example_seed fixes the random examples (fixtures/seeds.py); None leaves them to
    the profile (derandomized, or Hypothesis' own fresh seed).

    On an unknown divergence the minimal example's DivergenceError is re-raised, its
    record first handed to `keep(record, minimal=True)` (the suite writes its
    reproducer there); each known one goes to `keep(record, False)`.

    A finished example's QPs are parked (config.park): observed while the next examples
    run instead of blocking for their quiet windows, and waited out at the end. A
    divergence found that late belongs to an example that already ended, so it cannot be
    shrunk: when the examples can be replayed (a seed, or a derandomized profile) the run
    is made again with every example waiting out its windows, which finds the divergence
    inside its example and shrinks it; else (or if the replay does not meet it again) the
    late record is raised, marked "not shrunk". The same for a divergence met in a delivery
    inside its example (DELIVERED): a parked run overlaps windows, so where a late delivery
    is met, and how short its shrink gets, depends on timing; the blocking replay shrinks
    it the same way every time (without a replay: Hypothesis' own shrink, or the unshrunk
    record when its replays did not repeat it, FlakyFailure).

    `park`: one the caller owns, for runs back to back (the bench's batches): the last
    examples' QPs stay observed into the caller's next run instead of being waited out at
    the end of this one, and the caller drains it; divergences found in it are raised here.
    """
    sink = DivergenceList(only_known=True)  # unknown ones of unshrunk examples are dropped
    types = [t for t in qp_types if t in device.supported_qp_types()]
    if not types:
        raise UnsupportedQPType("none of the selected QP types is supported by the device")
    chosen = hypothesis_settings or machine_settings()

    def run(park: Park | None) -> None:
        _run_seeded(
            example_seed,
            lambda: QPMachine(device, types, variant, quirks, config, sink, recorder, park),
            settings=chosen,
        )

    try:
        if not config.park:
            run(None)
        else:
            owned = park is None  # else the caller drains it after its last run
            parking = park if park is not None else Park()
            timed: DivergenceError | None = None  # met when a delivery came: see below
            unrepeated = False
            try:
                try:
                    run(parking)
                except FlakyFailure as exc:  # its replays met the divergence elsewhere, or not
                    timed, unrepeated = _divergence_in(exc), True
                    if timed is None:
                        raise
                except DivergenceError as exc:
                    if exc.record.kind not in DELIVERED:
                        raise  # a verb's outcome or state: the same at every replay
                    timed = exc
                else:
                    if owned:  # the last examples' QPs, until their holds have passed
                        parking.drain()
            finally:
                if owned:
                    parking.release()
            if timed is not None or parking.found:
                if example_seed is not None or chosen.derandomize:
                    run(None)  # the same examples, each waiting out its windows
                if timed is not None:
                    if unrepeated:
                        timed.record.context["after_end"] = NOT_REPEATED
                    raise timed
                parking.raise_found()
    except DivergenceError as exc:
        if keep is not None:
            exc.record = keep(exc.record, True) or exc.record  # the stored one names its script
        raise
    except Flaky as exc:  # a divergence met, then a replay that went elsewhere
        found = _unreplayed(exc, sink)
        if found is None:
            raise
        if keep is not None:
            found.record = keep(found.record, True) or found.record
        raise found from exc
    finally:
        known = sink.distinct()
        for d in known if keep is not None else ():
            keep(d, False)
    return known
