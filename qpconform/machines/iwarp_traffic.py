"""The traffic machine over an iWARP pair (one RC connection made through rdma_cm).

Only what an iWARP connection has: traffic both ways, a SEND meeting no receive or a
WRITE with a bad STag (Terminate: the connection ends), a modify to ERR, SQD (CLOSING)
or SQE (TERMINATE) (the peer enters ERR), a destroyed peer; then a new connection on
two new QPs (an iWARP QP is never reused). No modify back to RTS (only the connection
manager gets there).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from models.enums import QPState
from models.operations import IWARP_OPS, Op
from models.wire import Fault
from qpconform.engine.pair import PairHarness
from qpconform.machines.fills import WR_FILLS
from qpconform.machines.pair_machine import (
    SIDES,
    TARGET_FAULTS,
    PairMachine,
    batch,
    bystander_end,
    fence_draws,
    post_fenced,
)

S = QPState


class IwarpTrafficMachine(PairMachine):
    """The rules over an iWARP pair, injecting the named `faults` (a subset of
    machines.pair.FAULTS); `over` makes the class Hypothesis runs."""

    faults: ClassVar[frozenset[str]]

    @classmethod
    def over(
        cls, make: Callable[..., PairHarness], faults: Collection[str]
    ) -> type[IwarpTrafficMachine]:
        """The machine class over pairs built by `make`."""
        return type("IwarpTrafficMachine", (cls,),
                    {"faults": frozenset(faults), "make_pair": staticmethod(make)})

    @rule(side=SIDES, op=st.sampled_from(IWARP_OPS), unused=WR_FILLS)
    def post_send(self, side: str, op: Op, unused: str) -> None:
        """A send in RTS, after a close (CLOSING, TERMINATE: refused, or accepted and
        flushed) or in ERR (the fields its opcode does not use filled as drawn)."""
        if self._state(side) in (S.RTS, S.SQD, S.SQE, S.ERR):
            self.h.post.send(side, op, unused=unused)

    @rule(side=SIDES, ops=batch(IWARP_OPS))
    def post_batch(self, side: str, ops: list[Op]) -> None:
        """Unsignaled WRs, then a signaled one (selective signaling)."""
        for i, op in enumerate(ops):
            if self._state(side) not in (S.RTS, S.ERR):
                return
            self.h.post.send(side, op, signaled=i == len(ops) - 1)

    @rule(side=SIDES, **fence_draws(IWARP_OPS))
    def post_fenced(self, side: str, before: Op, op: Op) -> None:
        """A READ, then a fenced SEND or WRITE sending what it returned."""
        if self._state(side) == S.RTS:
            post_fenced(self.h, side, before, op)

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

    @precondition(lambda self: "bad_rkey" in self.faults)
    @rule(side=SIDES)
    def write_bad_rkey(self, side: str) -> None:
        if self._state(side) == S.RTS:
            self.h.post.send(side, Op.RDMA_WRITE, Fault.BAD_RKEY)

    @precondition(lambda self: "access" in self.faults)
    @rule(side=SIDES, fault=TARGET_FAULTS)
    def access_write(self, side: str, fault: Fault) -> None:
        """A WRITE with a valid STag of one of the peer's target regions: granted, or
        refused (the data sink terminates); the guard bands compared after it."""
        if self._state(side) == S.RTS:
            self.h.post.send(side, Op.RDMA_WRITE, fault)

    @precondition(lambda self: "peer" in self.faults)
    @rule(side=SIDES)
    def destroy_peer(self, side: str) -> None:
        """Destroy one end; the other sees the connection end, and sends into ERR."""
        other = "b" if side == "a" else "a"
        self._state(side)
        self.h.lifecycle.destroy(side)
        self.h.post.send(other)
        self.h.lifecycle.reconnect()

    @rule()
    def reconnect(self) -> None:
        """Two new QPs and a new connection, once the old one has ended."""
        if any(self._state(s) != S.RTS for s in ("a", "b")):
            self.h.lifecycle.reconnect()


def _idle_bystander(h: PairHarness, side: str) -> QPState:
    """The bystander of `side` brought from RESET to IDLE (INIT) if it is there; returns
    its state (INIT or ERR: it is never connected, and an iWARP QP never leaves ERR)."""
    by = h.shared.bystander(side).model
    if by.state == S.RESET:
        h.shared.modify(side, S.INIT)
    return by.state


class SharedCQIwarpTrafficMachine(IwarpTrafficMachine):
    """Each example draws whether its pair's "a" end shares its CQs with a bystander QP
    (the new ends of a reconnect get a new one). The bystander is never connected: it
    holds receives in IDLE (INIT) and flushes them in ERR, its own only, while the end
    carries traffic and is flushed or closed beside it. No RESET rules (an iWARP QP is
    not reused: siw keeps ERROR) and no WR posted on a bystander in ERR (a user QP's post
    in ERR never reaches siw's kernel: the lone suites judge that, under
    siw.user_post_in_err_never_flushed)."""

    @initialize(bystander=st.booleans())
    def connect(self, bystander: bool) -> None:  # type: ignore[override]
        self.h = self.make_pair(shared_cq_sides=("a",) if bystander else ())
        self.h.lifecycle.connect()

    @precondition(lambda self: bystander_end(self) is not None)
    @rule()
    def bystander_recv(self) -> None:
        """A receive on the idle bystander: it waits on the end's receive CQ,
        untouched by the end's traffic, close and flushes."""
        side = bystander_end(self)
        assert side is not None
        self._state(side)  # (a resync reconnects: a new end, a new bystander)
        if _idle_bystander(self.h, side) == S.INIT:
            self.h.shared.post_recv(side)

    @precondition(lambda self: bystander_end(self) is not None)
    @rule()
    def bystander_flush(self) -> None:
        """The bystander to ERR with a receive or more: its own receives flush on the
        end's CQs, naming its qp_num; the end's WRs stay posted."""
        side = bystander_end(self)
        assert side is not None
        self._state(side)
        if _idle_bystander(self.h, side) == S.ERR:
            return
        if not self.h.shared.bystander(side).model.queues.recvs:
            self.h.shared.post_recv(side)
        self.h.shared.modify(side, S.ERR)

    @precondition(lambda self: bystander_end(self) is not None)
    @rule(how=st.sampled_from([S.ERR, S.SQD, S.SQE]))
    def end_flush_over_bystander(self, how: QPState) -> None:
        """The connected end to ERR, CLOSING (SQD) or TERMINATE (SQE) while its
        bystander holds a receive: the end's flush must leave the bystander's WRs
        posted."""
        side = bystander_end(self)
        assert side is not None
        if self._state(side) != S.RTS:
            return
        if _idle_bystander(self.h, side) == S.INIT and not (
            self.h.shared.bystander(side).model.queues.recvs
        ):
            self.h.shared.post_recv(side)
        self.h.modify(side, how)
