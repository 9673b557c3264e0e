"""What the InfiniBand and the iWARP traffic machines share: the connected pair each
example starts from, the checks after every step, the draws and guards of their rules.

Every rule is one verb through the engine's PairHarness, which after each step
compares both ends' completions (order, status, exactly once, never for discarded
WRs), async events and states with models/pair.py; a divergence a quirk covers is
known (the harness follows the device), any other raises DivergenceError with its
record.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from models.enums import QPState
from models.operations import Op
from models.wire import Fault
from qpconform.engine.pair import PairHarness
from qpconform.machines.stops import deliver_pending

SIDES = st.sampled_from(["a", "b"])
#: What an "access" draw names in the peer's target MRs: granted windows (mid-region, at
#: its last byte) as often as refused ones (past its end, without the right, another PD).
TARGET_FAULTS = st.sampled_from([Fault.GRANTED, Fault.AT_END, Fault.PAST_END,
                                 Fault.NO_RIGHT, Fault.OTHER_PD])
#: The most unsignaled WRs a batch puts before its signaled one.
MAX_UNSIGNALED = 3


def fence_draws(ops: tuple[Op, ...]) -> dict[str, st.SearchStrategy[Op]]:
    """What a fenced draw takes: the READ or atomic before it, the operation fenced."""
    return {
        "before": st.sampled_from([o for o in ops if o is Op.RDMA_READ or o.atomic]
                                  or [Op.RDMA_READ]),
        "op": st.sampled_from([o for o in ops if o.fenceable]),
    }


def post_fenced(h: PairHarness, side: str, before: Op, op: Op) -> None:
    """`before` (a READ or an atomic), then a fenced `op` behind it with no wait between
    them: the fence holds it until `before` completed (pair.fence.after_reads)."""
    if not (can_post(h, side, before) and can_post(h, side, op)):
        return
    with h.post.back_to_back():
        h.post.send(side, before)
        h.post.send(side, op, fence=True)


def can_post(h: PairHarness, side: str, op: Op) -> bool:
    """May `side` post `op` now? The pair carries it and the model can judge it (not an RC
    WRITE with immediate to a peer whose QP access flags lack REMOTE_WRITE:
    PairModel.judgeable)."""
    return op in h.ops and h.model.judgeable(side, op)


def batch(ops: tuple[Op, ...]) -> st.SearchStrategy[list[Op]]:
    """A batch of WRs as selective signaling posts them: up to MAX_UNSIGNALED unsignaled,
    then a signaled one (the last): its completion retires the others."""
    return st.lists(st.sampled_from(ops), min_size=2, max_size=MAX_UNSIGNALED + 1)


class PairMachine(RuleBasedStateMachine):
    """What both traffic machines share: a pair from `make_pair`, connected first; receives
    posted on either side; both states compared after every step; a quiet window and the
    pair's release at the end of each example."""

    make_pair: Callable[..., PairHarness]

    @initialize()
    def connect(self) -> None:
        self.h = self.make_pair()  # its own modifies take the keyed fill (unmasked.Keyed)
        self.h.lifecycle.connect()

    def _state(self, side: str) -> QPState:
        if self.h.desynced:  # a known divergence left WRs the model cannot place
            self.h.lifecycle.resync()
        return self.h.model.qp(side).state

    @rule(side=SIDES)
    def post_recv(self, side: str) -> None:
        self._state(side)
        self.h.post.recv(side)

    @invariant()
    def states_match(self) -> None:
        deliver_pending()  # a Ctrl-C or time bound a gc callback swallowed stops here
        if hasattr(self, "h"):
            for side in ("a", "b"):
                self.h.query(side)

    def teardown(self) -> None:
        """The example's quiet window, then the pair is parked: observed while the next
        example runs, destroyed once its hold has passed since its last step
        (PairHarness.park, park_hold; closed at once with no park). The window is skipped, and the
        pair closed at once, once an unknown divergence was raised: completions polled
        with it were never matched, and the error being shrunk must not be replaced by a
        consequence of it."""
        if hasattr(self, "h"):
            try:
                if not self.h.judge.raised:
                    self.h.quiet()
            except BaseException:
                self.h.close()
                raise
            self.h.park()


def outstanding(h: PairHarness, side: str) -> int:
    """WRs the model says are outstanding on one end (receives and sends)."""
    qp = h.model.qp(side)
    return 0 if side in h.model.gone else len(qp.queues.recvs) + len(qp.queues.outstanding_sends)


def loaded(machine: PairMachine, n: int) -> bool:
    """Has either end at least `n` WRs outstanding?"""
    h = getattr(machine, "h", None)
    return h is not None and any(outstanding(h, s) >= n for s in ("a", "b"))


def srq_end(machine: PairMachine) -> str | None:
    """The end of the machine's pair that has an SRQ (None: neither)."""
    h = getattr(machine, "h", None)
    return next(iter(sorted(h.model.srq_sides)), None) if h is not None else None


def bystander_end(machine: PairMachine) -> str | None:
    """The end of the machine's pair whose CQs a bystander QP shares (None: neither)."""
    h = getattr(machine, "h", None)
    if h is None:
        return None
    return next((s for s in sorted(h.shared.bystanders) if s not in h.model.gone), None)
