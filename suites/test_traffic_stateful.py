"""A Hypothesis state machine over a connected pair: traffic, modifies and injected faults.

Every rule is one verb through PairHarness, which after each step compares both
ends' completions (order, status, exactly once, never for discarded WRs), async
events and states with models/pair.py; a divergence a quirk covers is known (the
harness follows the device), any other fails the test with its record.

Bounded for CI: at most QPCONFORM_TRAFFIC_EXAMPLES examples (default 6, never more
than the Hypothesis profile's max_examples) of QPCONFORM_TRAFFIC_STEPS steps
(default 15) per QP type; with the `ci` profile the run is derandomized. On a
device there is no shrink phase: a failing example is reported as found (its
steps are in the divergence record), since shrinking replays whole pair
lifecycles on the device. QPCONFORM_TRAFFIC_FAULTS: comma list of
bad_lkey,bad_rkey,peer (default all).
Sends are not posted in RESET/INIT/RTR here (rxe keeps a refused send in its ring,
a known deviation checked by the transition suites, not by this machine).
"""

import os
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from fixtures.stops import deliver_pending
from models.enums import Attr, QPState, QPType
from models.pair import Fault, Op
from models.variant import LINUX
from qpconform.engine.pair import PairHarness

S = QPState
SIDES = st.sampled_from(["a", "b"])
FAULTS = set(os.environ.get("QPCONFORM_TRAFFIC_FAULTS", "bad_lkey,bad_rkey,peer").split(","))
_TABLE = LINUX.table
_SENDABLE = (S.RTS, S.SQD, S.SQE, S.ERR)


class PairMachine(RuleBasedStateMachine):
    """What both traffic machines share: a pair from `make_pair`, connected first; receives
    posted on either side; both states compared after every step; a quiet window and the
    pair's release at the end of each example."""

    make_pair: Callable[[], PairHarness]

    @initialize()
    def connect(self) -> None:
        self.h = self.make_pair()
        self.h.connect()

    def _state(self, side: str) -> QPState:
        if self.h.desynced:  # a known divergence left WRs the model cannot place
            self.h.resync()
        return self.h.model.qp(side).state

    @rule(side=SIDES)
    def post_recv(self, side: str) -> None:
        self._state(side)
        self.h.post_recv(side)

    @invariant()
    def states_match(self) -> None:
        deliver_pending()  # a Ctrl-C or time bound a gc callback swallowed stops here
        if hasattr(self, "h"):
            for side in ("a", "b"):
                self.h.query(side)

    def teardown(self) -> None:
        if hasattr(self, "h"):
            try:
                self.h.quiet()
            finally:
                self.h.close()


def machine_for(qp_type: QPType, make: Callable[[], PairHarness]) -> type[RuleBasedStateMachine]:
    """A state machine class over pairs built by `make` (real device or fake)."""

    class TrafficMachine(PairMachine):
        make_pair = staticmethod(make)

        @rule(side=SIDES, data=st.data())
        def post_send(self, side: str, data: st.DataObject) -> None:
            if self._state(side) not in _SENDABLE:
                return
            op = Op.SEND
            if qp_type != QPType.UD and data.draw(st.booleans(), label="rdma_write"):
                op = Op.RDMA_WRITE
            self.h.post_send(side, op)

        @rule(side=SIDES, data=st.data())
        def modify(self, side: str, data: st.DataObject) -> None:
            targets = _TABLE.targets(qp_type, self._state(side))
            nxt = data.draw(st.sampled_from(targets), label="target")
            extra: dict[str, int] = {}
            if nxt == S.SQD and self._state(side) == S.RTS:
                notify = data.draw(st.booleans(), label="notify")
                extra = {"en_sqd_async_notify": int(notify)}
            psns = self.h.peer_psns(side) if nxt in (S.RTR, S.RTS) else {}

            bit = Attr.EN_SQD_ASYNC_NOTIFY if extra else Attr(0)
            self.h.modify(side, nxt, {**psns, **extra}, bit)

        @precondition(lambda self: "bad_lkey" in FAULTS)
        @rule(side=SIDES)
        def send_bad_lkey(self, side: str) -> None:
            if self._state(side) in _SENDABLE:
                self.h.post_send(side, fault=Fault.BAD_LKEY)

        @precondition(lambda self: "bad_rkey" in FAULTS and qp_type != QPType.UD)
        @rule(side=SIDES)
        def write_bad_rkey(self, side: str) -> None:
            if self._state(side) in _SENDABLE:
                self.h.post_send(side, Op.RDMA_WRITE, Fault.BAD_RKEY)

        @precondition(lambda self: "peer" in FAULTS)
        @rule(side=SIDES)
        def replace_peer(self, side: str) -> None:
            """Destroy one end, let the other send into the void, then rebuild both."""
            other = "b" if side == "a" else "a"
            self._state(side)
            self.h.destroy(side)
            if self._state(other) in _SENDABLE:
                self.h.post_send(other)
            self.h.recreate(side)
            self.h.reset(other)
            self.h.connect()

    TrafficMachine.__name__ = f"TrafficMachine{qp_type.name}"
    return TrafficMachine


def iwarp_machine_for(make: Callable[[], PairHarness]) -> type[RuleBasedStateMachine]:
    """The machine over an iWARP pair (one RC connection made through rdma_cm).

    Only what an iWARP connection has: traffic both ways, a SEND meeting no receive or a
    WRITE with a bad STag (Terminate: the connection ends), a modify to ERR, SQD (CLOSING)
    or SQE (TERMINATE) (the peer enters ERR), a destroyed peer; then a new connection on
    two new QPs (an iWARP QP is never reused). No modify back to RTS (only the connection
    manager gets there).
    """

    class IwarpTrafficMachine(PairMachine):
        make_pair = staticmethod(make)

        @rule(side=SIDES, write=st.booleans())
        def post_send(self, side: str, write: bool) -> None:
            if self._state(side) in (S.RTS, S.ERR):
                self.h.post_send(side, Op.RDMA_WRITE if write else Op.SEND)

        @rule(side=SIDES)
        def modify_to_err(self, side: str) -> None:
            if self._state(side) == S.RTS:
                self.h.modify(side, S.ERR)

        @rule(side=SIDES, how=st.sampled_from([S.SQD, S.SQE]))
        def close(self, side: str, how: QPState) -> None:
            """A graceful close (SQD: iWARP's CLOSING) or a Terminate (SQE): the connection
            ends, the peer enters ERR."""
            if self._state(side) == S.RTS:
                self.h.modify(side, how)

        @precondition(lambda self: "bad_rkey" in FAULTS)
        @rule(side=SIDES)
        def write_bad_rkey(self, side: str) -> None:
            if self._state(side) == S.RTS:
                self.h.post_send(side, Op.RDMA_WRITE, Fault.BAD_RKEY)

        @precondition(lambda self: "peer" in FAULTS)
        @rule(side=SIDES)
        def destroy_peer(self, side: str) -> None:
            """Destroy one end; the other sees the connection end, and sends into ERR."""
            other = "b" if side == "a" else "a"
            self._state(side)
            self.h.destroy(side)
            self.h.post_send(other)
            self.h.reconnect()

        @rule()
        def reconnect(self) -> None:
            """Two new QPs and a new connection, once the old one has ended."""
            if any(self._state(s) != S.RTS for s in ("a", "b")):
                self.h.reconnect()

    return IwarpTrafficMachine


EXAMPLES = int(os.environ.get("QPCONFORM_TRAFFIC_EXAMPLES", "6"))
STEPS = int(os.environ.get("QPCONFORM_TRAFFIC_STEPS", "15"))


def device_settings(seeded: bool = False) -> settings:
    """The profile's settings (derandomize, database...) bounded for a real device.

    A run with a seed (`seeded`) uses no example database: Hypothesis would first replay
    the examples earlier runs saved in .hypothesis/ (Phase.reuse), so the same seed would
    run other sequences on another machine or another day. The seed alone decides them
    (fixtures/seeds.py), which is what makes its replay line exact.
    """
    base = settings.default
    return settings(
        base,
        max_examples=min(EXAMPLES, base.max_examples),
        stateful_step_count=STEPS,
        phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrink on a device
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None if seeded else base.database,
    )


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("qp_type", [QPType.RC, QPType.UC, QPType.UD], ids=lambda t: t.name)
def test_traffic_state_machine(
    make_pair, qp_type, stateful_budget, batch_seeds, run_seed, variant
):
    """With a budget, batches of the machine run until this QP type's share is spent (or
    exactly as many as --stateful-batches says: fixtures/budget.py); each batch from its
    own seed, derived from the run's (fixtures/seeds.py). Under the iwarp variant, the
    iWARP machine (RC only: other types are reported skips)."""

    def make() -> PairHarness:
        return make_pair(qp_type, connect=False)

    if variant.connection_managed:
        if qp_type != QPType.RC:
            pytest.skip(f"iWARP QPs are RC only: no {qp_type.name} pair (iwarp.qp_type.rc_only)")
        machine = iwarp_machine_for(make)
    else:
        machine = machine_for(qp_type, make)
    machine.TestCase.settings = device_settings(seeded=run_seed is not None)

    def run_batch() -> int:
        example_seed = next(batch_seeds)
        if example_seed is not None:
            seed(example_seed)(machine)
        machine.TestCase().runTest()
        return machine.TestCase.settings.max_examples

    part = f"traffic-{qp_type.name}"
    batches, examples, took = stateful_budget.run(part, run_batch)
    stateful_budget.spent[part] = f"{batches} batches, {examples} examples, {took:.0f} s"
