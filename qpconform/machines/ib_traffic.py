"""The traffic machine over an InfiniBand pair of one QP type: traffic, modifies and
injected faults, with an SRQ end and a bystander sharing an end's CQs as drawn.

Sends are not posted in RESET/INIT/RTR here (rxe keeps a refused send in its ring,
a known deviation checked by the transition suites, not by this machine).

A rule's strategies are fixed when it is declared, and most of these draw from the
operations of the QP type, so those rules are declared with `typed_rule`: the class
`TrafficMachine.over` makes for a QP type turns each into a Hypothesis rule with that
type's draws.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection
from typing import Any, ClassVar, TypeVar

from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from models.access import TARGETED_OPS
from models.enums import AccessFlag, Attr, QPState, QPType
from models.local_access import LOCAL_OPS
from models.operations import Op, foreign_ops, ops_for
from models.variant import LINUX
from models.wire import Fault
from qpconform.engine.pair import PairHarness
from qpconform.machines.fills import FILLS, WR_FILLS
from qpconform.machines.pair_machine import (
    SIDES,
    TARGET_FAULTS,
    PairMachine,
    batch,
    bystander_end,
    can_post,
    fence_draws,
    loaded,
    outstanding,
    post_fenced,
    srq_end,
)

S = QPState
_TABLE = LINUX.table
_SENDABLE = (S.RTS, S.SQD, S.SQE, S.ERR)
#: What a "qp_access" draw leaves a QP of each type (LOCAL_WRITE always; REMOTE_WRITE,
#: REMOTE_READ, REMOTE_ATOMIC drawn: UC has no READ or atomics).
_QP_RIGHTS = {
    QPType.RC: (AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ, AccessFlag.REMOTE_ATOMIC),
    QPType.UC: (AccessFlag.REMOTE_WRITE,),
}
#: The local SGE faults a machine draws, each with the fault name that enables it.
_LOCAL_DRAWS = ((Fault.BAD_LKEY, "bad_lkey"), (Fault.LOCAL_PAST_END, "local"),
                (Fault.LOCAL_OTHER_PD, "local"), (Fault.SINK_READ_ONLY, "local"))
#: The attribute `typed_rule` marks a method with: its draws, given the QP type.
_TYPED_DRAWS = "qpconform_typed_draws"

Draws = Callable[[QPType], dict[str, st.SearchStrategy[Any]]]
F = TypeVar("F", bound=Callable[..., Any])


def typed_rule(draws: Draws) -> Callable[[F], F]:
    """Declare a rule whose draws depend on the machine's QP type (`draws(qp_type)`: the
    keyword strategies of @rule, in drawing order); preconditions go below it."""

    def mark(f: F) -> F:
        setattr(f, _TYPED_DRAWS, draws)
        return f

    return mark


def _qkey_draw(qp_type: QPType) -> dict[str, st.SearchStrategy[bool]]:
    """UD's exchange also draws whether its SEND names a wrong Q_Key (no other type has
    one: their draws stay as they were)."""
    return {"wrong_qkey": st.booleans()} if qp_type is QPType.UD else {}


def _reads_and_atomics(qp_type: QPType) -> list[Op]:
    return [o for o in ops_for(qp_type) if o is Op.RDMA_READ or o.atomic] or [Op.SEND]


class TrafficMachine(PairMachine):
    """The rules over a pair of `qp_type` QPs, injecting the named `faults` (a subset of
    machines.pair.FAULTS); `over` makes the class Hypothesis runs."""

    qp_type: ClassVar[QPType]
    faults: ClassVar[frozenset[str]]

    @classmethod
    def over(
        cls, qp_type: QPType, make: Callable[..., PairHarness], faults: Collection[str]
    ) -> type[TrafficMachine]:
        """The machine class over pairs of `qp_type` built by `make`: each `typed_rule`
        made a rule with the draws of `qp_type`."""
        namespace: dict[str, Any] = {
            "qp_type": qp_type, "faults": frozenset(faults), "make_pair": staticmethod(make),
        }
        for name, method in inspect.getmembers(cls, inspect.isfunction):
            draws = getattr(method, _TYPED_DRAWS, None)
            if draws is not None:
                namespace[name] = rule(**draws(qp_type))(method)
        return type(f"TrafficMachine{qp_type.name}", (cls,), namespace)

    @precondition(lambda self: srq_end(self) is not None)
    @rule(data=st.data())
    def arm_srq(self, data: st.DataObject) -> None:
        """Arm the SRQ's limit at, or one below, the receives it holds: SRQ Limit
        Reached comes once, when one of the next receives taken leaves fewer."""
        side = srq_end(self)
        assert side is not None
        waiting = len(self.h.model.qp(side).receives())
        if side not in self.h.model.gone and waiting >= 1:
            limit = data.draw(st.integers(max(1, waiting - 1), waiting), label="limit")
            self.h.post.arm_srq(side, limit)

    @precondition(lambda self: srq_end(self) is not None)
    @rule()
    def post_recv_on_srq_qp(self) -> None:
        """A receive posted on the QP of the SRQ's end: refused, never runs (made in a
        child process: a provider that crashes on it is a divergence, not the end)."""
        side = srq_end(self)
        assert side is not None
        if side not in self.h.model.gone:
            self.h.post.qp_recv(side, isolated=True)

    @typed_rule(lambda t: {"side": SIDES, "op": st.sampled_from(ops_for(t)),
                           "inline": st.booleans(), "unused": WR_FILLS})
    def post_send(self, side: str, op: Op, inline: bool, unused: str) -> None:
        """One WR of `op`, inline (within the reported cap) when drawn and it can be, the
        fields its opcode does not use filled as drawn."""
        if self._state(side) in _SENDABLE and can_post(self.h, side, op):
            inline = inline and op.inlinable and self.h.post.can_inline(side)
            self.h.post.send(side, op, inline=inline, unused=unused)

    @typed_rule(lambda t: {"side": SIDES,
                           "op": st.sampled_from([o for o in ops_for(t) if o.inlinable])})
    @precondition(lambda self: "inline_over_cap" in self.faults)
    def post_inline_over_cap(self, side: str, op: Op) -> None:
        """An inline WR one byte beyond max_inline_data: refused, it never runs."""
        if self._state(side) in _SENDABLE and self.h.post.can_inline(side, over_cap=True):
            self.h.post.send(side, op, Fault.INLINE_OVER_CAP)

    @typed_rule(lambda t: {"side": SIDES, "op": st.sampled_from(foreign_ops(t) or (Op.SEND,))})
    @precondition(lambda self: "foreign_op" in self.faults and bool(foreign_ops(self.qp_type)))
    def post_foreign_op(self, side: str, op: Op) -> None:
        """An operation the QP type lacks, in RTS: refused, or it fails (never SUCCESS)."""
        if self._state(side) == S.RTS and op in foreign_ops(self.qp_type):
            self.h.post.send(side, op)

    @precondition(lambda self: "misaligned_atomic" in self.faults
                  and self.qp_type is QPType.RC)
    @rule(side=SIDES, op=st.sampled_from([Op.COMP_SWAP, Op.FETCH_ADD]))
    def post_misaligned_atomic(self, side: str, op: Op) -> None:
        """An atomic to a remote address off 8-byte alignment (on a pair whose device
        has atomics): refused at post, or an Invalid Request error; never executed."""
        if self._state(side) in _SENDABLE and can_post(self.h, side, op):
            self.h.post.send(side, op, Fault.MISALIGNED)

    @typed_rule(lambda t: {"side": SIDES, "ops": st.lists(
        st.sampled_from(_reads_and_atomics(t)), min_size=2, max_size=4)})
    @precondition(lambda self: Op.RDMA_READ in ops_for(self.qp_type))
    def read_burst(self, side: str, ops: list[Op]) -> None:
        """READs and atomics back to back, beyond the initiator depth: they wait."""
        if self._state(side) not in _SENDABLE:
            return
        with self.h.post.back_to_back():
            for op in ops:
                if can_post(self.h, side, op):
                    self.h.post.send(side, op)

    @typed_rule(lambda t: {"side": SIDES, **fence_draws(ops_for(t))})
    @precondition(lambda self: Op.RDMA_READ in ops_for(self.qp_type))
    def post_fenced(self, side: str, before: Op, op: Op) -> None:
        """A READ or an atomic, then a fenced WR sending what it returned."""
        if self._state(side) in _SENDABLE:
            post_fenced(self.h, side, before, op)

    @precondition(lambda self: "short_recv" in self.faults)
    @rule(side=SIDES)
    def post_short_recv(self, side: str) -> None:
        """A receive with room for less than a SEND carries (an end without an SRQ): RC:
        a SEND into it fails at both ends; UC/UD: the responder drops it or completes
        the receive in error, the same way each time (pair.unreliable.recv_too_short);
        a WRITE with immediate fills it."""
        self._state(side)
        if side not in self.h.model.srq_sides:
            self.h.post.recv(side, short=True)

    @precondition(lambda self: bool({"bad_lkey_recv", "local"} & self.faults)
                  and self.qp_type == QPType.RC)
    @rule(side=SIDES, data=st.data())
    def post_unwritable_recv(self, side: str, data: st.DataObject) -> None:
        """A receive the responder may not write (an end without an SRQ): its lkey names
        no MR ("bad_lkey_recv": pair.rc.recv_bad_lkey), or its MR lacks LOCAL_WRITE
        ("local": pair.rc.local.recv_write). A SEND into it fails at both ends, a WRITE
        with immediate fills it."""
        kinds = [k for k, name in (("bad_lkey", "bad_lkey_recv"), ("read_only", "local"))
                 if name in self.faults]
        kind = data.draw(st.sampled_from(kinds), label="receive")
        self._state(side)
        if side not in self.h.model.srq_sides:
            self.h.post.recv(side, **{kind: True})

    @typed_rule(lambda t: {"side": SIDES, "op": st.sampled_from(ops_for(t)),
                           "unused": WR_FILLS, "inline": st.booleans(), **_qkey_draw(t)})
    def exchange(
        self, side: str, op: Op, unused: str, inline: bool, wrong_qkey: bool = False
    ) -> None:
        """The peer posts a receive, then `side` posts `op`: traffic as applications
        run it (a receive waiting), so each operation's completions are compared at
        both ends, not only its errors (the unused fields filled as drawn; inline when
        drawn and it can be: an inline SEND's received bytes are compared only here
        and after a `post_recv`, which `post_send` alone meets rarely). On UD, drawn
        (fault "bad_qkey"), a SEND names a wrong Q_Key: the peer drops it, and its
        receive waits for the next datagram (models/qkey.py)."""
        if self._state(side) in _SENDABLE and can_post(self.h, side, op):
            wrong_qkey = wrong_qkey and "bad_qkey" in self.faults
            inline = inline and op.inlinable and self.h.post.can_inline(side) and not wrong_qkey
            self.h.post.recv(self.h.model.peer_of(side))
            fault = Fault.BAD_QKEY if wrong_qkey else Fault.NONE
            self.h.post.send(side, op, fault, unused=unused, inline=inline)

    @typed_rule(lambda t: {"side": SIDES, "ops": batch(ops_for(t))})
    def post_batch(self, side: str, ops: list[Op]) -> None:
        """Unsignaled WRs, then a signaled one (selective signaling)."""
        for i, op in enumerate(ops):
            if self._state(side) not in _SENDABLE or not can_post(self.h, side, op):
                return
            self.h.post.send(side, op, signaled=i == len(ops) - 1)

    @rule(side=SIDES, data=st.data())
    def modify(self, side: str, data: st.DataObject) -> None:
        targets = _TABLE.targets(self.qp_type, self._state(side))
        nxt = data.draw(st.sampled_from(targets), label="target")
        extra: dict[str, int] = {}
        if nxt == S.SQD and self._state(side) == S.RTS:
            notify = data.draw(st.booleans(), label="notify")
            extra = {"en_sqd_async_notify": int(notify)}
        psns = self.h.lifecycle.peer_psns(side) if nxt in (S.RTR, S.RTS) else {}
        fill = data.draw(FILLS, label="unmasked")  # one draw: the fields outside the mask

        bit = Attr.EN_SQD_ASYNC_NOTIFY if extra else Attr(0)
        self.h.modify(side, nxt, {**psns, **extra}, bit, fill=fill)

    @precondition(lambda self: loaded(self, 2))
    @rule(side=SIDES)
    def flush_outstanding(self, side: str) -> None:
        """An end with two WRs or more outstanding moves to ERR: each is flushed, in
        posting order (drawn when it can mean something: a lost or reordered flush
        needs two)."""
        if outstanding(self.h, side) >= 2:
            self.h.modify(side, S.ERR)

    @typed_rule(lambda t: {"side": SIDES, "op": st.sampled_from(
        [o for o in ops_for(t) if o in LOCAL_OPS]), "signaled": st.booleans(),
        "data": st.data()})
    @precondition(lambda self: bool({"bad_lkey", "local"} & self.faults))
    def send_local_fault(self, side: str, op: Op, signaled: bool, data: st.DataObject) -> None:
        """A WR whose local SGE the requester refuses, signaled or not: a SEND whose lkey
        names no MR ("bad_lkey"), or a SEND or WRITE whose SGE crosses its MR's end or
        names an MR of another PD ("local": pair.local.*; nothing leaves), an RC READ or
        atomic whose sink lacks LOCAL_WRITE ("local": pair.rc.local.sink_write; its
        response is not placed). It completes LOC_PROT_ERR; the guard bands see no byte
        of either end's targets move."""
        fault = data.draw(st.sampled_from(
            [f for f, name in _LOCAL_DRAWS if name in self.faults
             and (f is not Fault.SINK_READ_ONLY or self.qp_type == QPType.RC)]), label="fault")
        if fault is Fault.SINK_READ_ONLY:
            op = data.draw(st.sampled_from(_reads_and_atomics(self.qp_type)), label="op")
        op = Op.SEND if fault is Fault.BAD_LKEY else op
        if self._state(side) in _SENDABLE and can_post(self.h, side, op):
            self.h.post.send(side, op, fault, signaled=signaled)

    @typed_rule(lambda t: {"side": SIDES, "op": st.sampled_from(
        [o for o in ops_for(t) if o.remote and not o.consumes_recv])})
    @precondition(lambda self: "bad_rkey" in self.faults and self.qp_type != QPType.UD)
    def write_bad_rkey(self, side: str, op: Op) -> None:
        if self._state(side) in _SENDABLE and can_post(self.h, side, op):
            self.h.post.send(side, op, Fault.BAD_RKEY)

    @typed_rule(lambda t: {"side": SIDES, "fault": TARGET_FAULTS, "op": st.sampled_from(
        [o for o in ops_for(t) if o in TARGETED_OPS] or [Op.RDMA_WRITE])})
    @precondition(lambda self: "access" in self.faults and self.qp_type != QPType.UD)
    def access_target(self, side: str, op: Op, fault: Fault) -> None:
        """A valid rkey of one of the peer's target MRs: a window it grants, or one it
        refuses (RC: REM_ACCESS_ERR, both ERR; UC: dropped); the guard bands are
        compared after the step."""
        if self._state(side) in _SENDABLE and can_post(self.h, side, op):
            self.h.post.send(side, op, fault)

    @typed_rule(lambda t: {"side": SIDES, "rights": st.lists(st.sampled_from(
        _QP_RIGHTS.get(t, (AccessFlag.REMOTE_WRITE,))), unique=True)})
    @precondition(lambda self: "access" in self.faults and self.qp_type in _QP_RIGHTS)
    def set_qp_access(self, side: str, rights: list[AccessFlag]) -> None:
        """An RTS->RTS modify narrowing or widening `side`'s QP access flags while the
        pair is connected (models/access.py RC_QP_RIGHTS, UC_QP_RIGHTS): the requests
        its peer sends next are judged by the flags in force. Only with nothing
        outstanding at the peer (a request in flight across the change may meet either
        flags)."""
        peer = self.h.model.peer_of(side)
        if self._state(side) != S.RTS or peer in self.h.model.gone or (
            self.h.model.qp(peer).queues.outstanding_sends
        ):
            return
        flags = AccessFlag.LOCAL_WRITE
        for right in rights:
            flags |= right
        self.h.modify(side, S.RTS, {"qp_access_flags": int(flags)}, Attr.ACCESS_FLAGS)

    @precondition(lambda self: "peer" in self.faults)
    @rule(side=SIDES)
    def replace_peer(self, side: str) -> None:
        """Destroy one end, let the other send into the void, then rebuild both."""
        other = "b" if side == "a" else "a"
        self._state(side)
        self.h.lifecycle.destroy(side)
        if self._state(other) in _SENDABLE:
            self.h.post.send(other)
        self.h.lifecycle.recreate(side)
        self.h.lifecycle.reset(other)
        self.h.lifecycle.connect()


class SrqTrafficMachine(TrafficMachine):
    """Each example draws whether its pair's "b" end takes its receives from an SRQ."""

    @initialize(with_srq=st.booleans())
    def connect(self, with_srq: bool) -> None:  # type: ignore[override]
        self.h = self.make_pair(srq_sides=("b",) if with_srq else ())
        self.h.lifecycle.connect()


class SharedCQTrafficMachine(TrafficMachine):
    """Each example draws whether its pair's "a" end shares its CQs with a bystander QP,
    which the bystander rules post on, flush and reset beside the end's traffic."""

    @initialize(with_srq=st.just(False), bystander=st.booleans())
    def connect(self, with_srq: bool, bystander: bool) -> None:  # type: ignore[override]
        """(`with_srq` is always False here: SrqSharedCQTrafficMachine draws it.)"""
        self.h = self.make_pair(shared_cq_sides=("a",) if bystander else ())
        self.h.lifecycle.connect()

    @precondition(lambda self: bystander_end(self) is not None)
    @rule()
    def bystander_recv(self) -> None:
        """A receive on the bystander (brought to INIT first if in RESET): it waits on
        the end's receive CQ, untouched by the end's traffic and flushes."""
        side = bystander_end(self)
        assert side is not None
        self._state(side)
        if self.h.shared.bystander(side).model.state == S.RESET:
            self.h.shared.modify(side, S.INIT)
        self.h.shared.post_recv(side)

    @precondition(lambda self: bystander_end(self) is not None)
    @rule(send=st.booleans())
    def bystander_flush(self, send: bool) -> None:
        """The bystander to ERR: its own WRs flush on the end's CQs, naming its qp_num
        (then, drawn, a SEND posted in ERR flushes too)."""
        side = bystander_end(self)
        assert side is not None
        self._state(side)
        if self.h.shared.bystander(side).model.state != S.ERR:
            self.h.shared.modify(side, S.ERR)
        if send:
            self.h.shared.post_send(side)

    @precondition(lambda self: bystander_end(self) is not None)
    @rule()
    def end_flush_over_bystander(self) -> None:
        """The end to ERR while its bystander holds a receive: the end's flush must
        leave the bystander's WRs posted."""
        side = bystander_end(self)
        assert side is not None
        if self._state(side) in (S.RESET, S.ERR):
            return
        by = self.h.shared.bystander(side).model
        if by.state == S.RESET:
            self.h.shared.modify(side, S.INIT)
        if not by.queues.recvs:
            self.h.shared.post_recv(side)
        self.h.modify(side, S.ERR)

    @precondition(lambda self: bystander_end(self) is not None)
    @rule()
    def bystander_reset(self) -> None:
        side = bystander_end(self)
        assert side is not None
        self._state(side)
        self.h.shared.modify(side, S.RESET)

    @precondition(lambda self: bystander_end(self) is not None)
    @rule()
    def reset_end_over_bystander_entries(self) -> None:
        """The bystander's flushes left unpolled on the CQs while its end is reset: they
        must still be there after."""
        side = bystander_end(self)
        assert side is not None
        if self._state(side) not in (S.INIT, S.RTR, S.RTS, S.ERR):
            return
        by = self.h.shared.bystander(side).model
        if by.state == S.RESET:
            return
        with self.h.shared.unpolled():
            if by.state != S.ERR:
                self.h.shared.modify(side, S.ERR)
            self.h.shared.pause()
            self.h.modify(side, S.RESET)


class SrqSharedCQTrafficMachine(SharedCQTrafficMachine):
    """Both draws: an SRQ at "b", a bystander at "a"."""

    @initialize(with_srq=st.booleans(), bystander=st.booleans())
    def connect(self, with_srq: bool, bystander: bool) -> None:  # type: ignore[override]
        self.h = self.make_pair(srq_sides=("b",) if with_srq else (),
                                shared_cq_sides=("a",) if bystander else ())
        self.h.lifecycle.connect()
