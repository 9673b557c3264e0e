"""The traffic state machines: a connected pair, traffic, modifies and injected faults.

Every rule is one verb through the engine's PairHarness, which after each step
compares both ends' completions (order, status, exactly once, never for discarded
WRs), async events and states with models/pair.py; a divergence a quirk covers is
known (the harness follows the device), any other raises DivergenceError with its
record. `machine_for` builds the InfiniBand machine of a QP type, `iwarp_machine_for`
the iWARP one (rdma_cm connections); both over pairs from a `make` callable (a real
device's adapter, or the self-tests' fake pair).

Sends are not posted in RESET/INIT/RTR here (rxe keeps a refused send in its ring,
a known deviation checked by the transition suites, not by this machine).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from models.access import TARGETED_OPS
from models.enums import AccessFlag, Attr, QPState, QPType
from models.operations import IWARP_OPS, Op, foreign_ops, ops_for
from models.variant import LINUX
from models.wire import Fault
from qpconform.engine.pair import PairHarness
from qpconform.machines.fills import FILLS, WR_FILLS
from qpconform.machines.stops import deliver_pending

S = QPState
SIDES = st.sampled_from(["a", "b"])
#: The faults a machine can inject: a bad local key, a bad remote key, a replaced peer, an
#: inline WR one byte beyond max_inline_data, an operation the QP type lacks, a receive
#: shorter than a SEND, a receive whose lkey names no MR (RC), a valid rkey asking more
#: than its MR grants (models/access.py: "access").
FAULTS = frozenset(
    {"bad_lkey", "bad_rkey", "peer", "inline_over_cap", "foreign_op", "short_recv",
     "bad_lkey_recv", "misaligned_atomic", "access"}
)
#: What an "access" draw names in the peer's target MRs: granted windows (mid-region, at
#: its last byte) as often as refused ones (past its end, without the right, another PD).
TARGET_FAULTS = st.sampled_from([Fault.GRANTED, Fault.AT_END, Fault.PAST_END,
                                 Fault.NO_RIGHT, Fault.OTHER_PD])
_TABLE = LINUX.table
_SENDABLE = (S.RTS, S.SQD, S.SQE, S.ERR)
#: The most unsignaled WRs a batch puts before its signaled one.
MAX_UNSIGNALED = 3


def _fence_draws(ops: tuple[Op, ...]) -> dict[str, st.SearchStrategy[Op]]:
    """What a fenced draw takes: the READ or atomic before it, the operation fenced."""
    return {
        "before": st.sampled_from([o for o in ops if o is Op.RDMA_READ or o.atomic]
                                  or [Op.RDMA_READ]),
        "op": st.sampled_from([o for o in ops if o.fenceable]),
    }


def _post_fenced(h: PairHarness, side: str, before: Op, op: Op) -> None:
    """`before` (a READ or an atomic), then a fenced `op` behind it with no wait between
    them: the fence holds it until `before` completed (pair.fence.after_reads)."""
    if not (_can(h, side, before) and _can(h, side, op)):
        return
    with h.post.back_to_back():
        h.post.send(side, before)
        h.post.send(side, op, fence=True)


def _can(h: PairHarness, side: str, op: Op) -> bool:
    """May `side` post `op` now? The pair carries it and the model can judge it (not an RC
    WRITE with immediate to a peer whose QP access flags lack REMOTE_WRITE:
    PairModel.judgeable)."""
    return op in h.ops and h.model.judgeable(side, op)


#: What a "qp_access" draw leaves a QP of each type (LOCAL_WRITE always; REMOTE_WRITE,
#: REMOTE_READ, REMOTE_ATOMIC drawn: UC has no READ or atomics).
_QP_RIGHTS = {
    QPType.RC: (AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ, AccessFlag.REMOTE_ATOMIC),
    QPType.UC: (AccessFlag.REMOTE_WRITE,),
}


def _batch(ops: tuple[Op, ...]) -> st.SearchStrategy[list[Op]]:
    """A batch of WRs as selective signaling posts them: up to MAX_UNSIGNALED unsignaled,
    then a signaled one (the last): its completion retires the others."""
    return st.lists(st.sampled_from(ops), min_size=2, max_size=MAX_UNSIGNALED + 1)


class PairMachine(RuleBasedStateMachine):
    """What both traffic machines share: a pair from `make_pair`, connected first; receives
    posted on either side; both states compared after every step; a quiet window and the
    pair's release at the end of each example."""

    make_pair: Callable[[], PairHarness]

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
        (PairHarness.park, parkable.park_hold; closed at once with no park). The window is
        skipped, and the pair closed at once, once an unknown divergence was raised:
        completions polled with it were never matched, and the error being shrunk must not be
        replaced by a consequence of it."""
        if hasattr(self, "h"):
            try:
                if not self.h.judge.raised:
                    self.h.quiet()
            except BaseException:
                self.h.close()
                raise
            self.h.park()


def _outstanding(h: PairHarness, side: str) -> int:
    """WRs the model says are outstanding on one end (receives and sends)."""
    qp = h.model.qp(side)
    return 0 if side in h.model.gone else len(qp.queues.recvs) + len(qp.queues.outstanding_sends)


def _loaded(machine: PairMachine, n: int) -> bool:
    """Has either end at least `n` WRs outstanding?"""
    h = getattr(machine, "h", None)
    return h is not None and any(_outstanding(h, s) >= n for s in ("a", "b"))


def _srq_end(machine: PairMachine) -> str | None:
    """The end of the machine's pair that has an SRQ (None: neither)."""
    h = getattr(machine, "h", None)
    return next(iter(sorted(h.model.srq_sides)), None) if h is not None else None


def _bystander_end(machine: PairMachine) -> str | None:
    """The end of the machine's pair whose CQs a bystander QP shares (None: neither)."""
    h = getattr(machine, "h", None)
    if h is None:
        return None
    return next((s for s in sorted(h.shared.bystanders) if s not in h.model.gone), None)


def machine_for(
    qp_type: QPType,
    make: Callable[..., PairHarness],
    faults: Collection[str] = FAULTS,
    srq: bool = False,
    shared_cq: bool = False,
) -> type[RuleBasedStateMachine]:
    """A state machine class over pairs built by `make` (real device or fake), injecting
    the named `faults` (a subset of FAULTS). With `srq`, each example draws whether its
    pair's "b" end takes its receives from an SRQ: `make(srq_sides=("b",))`; with
    `shared_cq`, whether its "a" end shares its CQs with a bystander QP:
    `make(shared_cq_sides=("a",))`."""

    class TrafficMachine(PairMachine):
        make_pair = staticmethod(make)

        if srq and not shared_cq:

            @initialize(with_srq=st.booleans())
            def connect(self, with_srq: bool) -> None:  # type: ignore[override]
                self.h = self.make_pair(srq_sides=("b",) if with_srq else ())
                self.h.lifecycle.connect()

        elif shared_cq:

            @initialize(
                with_srq=st.booleans() if srq else st.just(False),
                bystander=st.booleans(),
            )
            def connect(self, with_srq: bool, bystander: bool) -> None:  # type: ignore[override]
                kwargs: dict[str, tuple[str, ...]] = {}
                if srq:
                    kwargs["srq_sides"] = ("b",) if with_srq else ()
                if shared_cq:
                    kwargs["shared_cq_sides"] = ("a",) if bystander else ()
                self.h = self.make_pair(**kwargs)
                self.h.lifecycle.connect()

        @precondition(lambda self: _srq_end(self) is not None)
        @rule(data=st.data())
        def arm_srq(self, data: st.DataObject) -> None:
            """Arm the SRQ's limit at, or one below, the receives it holds: SRQ Limit
            Reached comes once, when one of the next receives taken leaves fewer."""
            side = _srq_end(self)
            assert side is not None
            waiting = len(self.h.model.qp(side).receives())
            if side not in self.h.model.gone and waiting >= 1:
                limit = data.draw(st.integers(max(1, waiting - 1), waiting), label="limit")
                self.h.post.arm_srq(side, limit)

        @precondition(lambda self: _srq_end(self) is not None)
        @rule()
        def post_recv_on_srq_qp(self) -> None:
            """A receive posted on the QP of the SRQ's end: refused, never runs (made in a
            child process: a provider that crashes on it is a divergence, not the end)."""
            side = _srq_end(self)
            assert side is not None
            if side not in self.h.model.gone:
                self.h.post.qp_recv(side, isolated=True)

        if shared_cq:  # (only then: a machine without them explores as it always did)

            @precondition(lambda self: _bystander_end(self) is not None)
            @rule()
            def bystander_recv(self) -> None:
                """A receive on the bystander (brought to INIT first if in RESET): it waits on
                the end's receive CQ, untouched by the end's traffic and flushes."""
                side = _bystander_end(self)
                assert side is not None
                self._state(side)
                if self.h.shared.bystander(side).model.state == S.RESET:
                    self.h.shared.modify(side, S.INIT)
                self.h.shared.post_recv(side)

            @precondition(lambda self: _bystander_end(self) is not None)
            @rule(send=st.booleans())
            def bystander_flush(self, send: bool) -> None:
                """The bystander to ERR: its own WRs flush on the end's CQs, naming its qp_num
                (then, drawn, a SEND posted in ERR flushes too)."""
                side = _bystander_end(self)
                assert side is not None
                self._state(side)
                if self.h.shared.bystander(side).model.state != S.ERR:
                    self.h.shared.modify(side, S.ERR)
                if send:
                    self.h.shared.post_send(side)

            @precondition(lambda self: _bystander_end(self) is not None)
            @rule()
            def end_flush_over_bystander(self) -> None:
                """The end to ERR while its bystander holds a receive: the end's flush must
                leave the bystander's WRs posted."""
                side = _bystander_end(self)
                assert side is not None
                if self._state(side) in (S.RESET, S.ERR):
                    return
                by = self.h.shared.bystander(side).model
                if by.state == S.RESET:
                    self.h.shared.modify(side, S.INIT)
                if not by.queues.recvs:
                    self.h.shared.post_recv(side)
                self.h.modify(side, S.ERR)

            @precondition(lambda self: _bystander_end(self) is not None)
            @rule()
            def bystander_reset(self) -> None:
                side = _bystander_end(self)
                assert side is not None
                self._state(side)
                self.h.shared.modify(side, S.RESET)

            @precondition(lambda self: _bystander_end(self) is not None)
            @rule()
            def reset_end_over_bystander_entries(self) -> None:
                """The bystander's flushes left unpolled on the CQs while its end is reset: they
                must still be there after."""
                side = _bystander_end(self)
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


        @rule(side=SIDES, op=st.sampled_from(ops_for(qp_type)), inline=st.booleans(),
              unused=WR_FILLS)
        def post_send(self, side: str, op: Op, inline: bool, unused: str) -> None:
            """One WR of `op`, inline (within the reported cap) when drawn and it can be, the
            fields its opcode does not use filled as drawn."""
            if self._state(side) in _SENDABLE and _can(self.h, side, op):
                inline = inline and op.inlinable and self.h.post.can_inline(side)
                self.h.post.send(side, op, inline=inline, unused=unused)

        @precondition(lambda self: "inline_over_cap" in faults)
        @rule(side=SIDES, op=st.sampled_from([o for o in ops_for(qp_type) if o.inlinable]))
        def post_inline_over_cap(self, side: str, op: Op) -> None:
            """An inline WR one byte beyond max_inline_data: refused, it never runs."""
            if self._state(side) in _SENDABLE and self.h.post.can_inline(side, over_cap=True):
                self.h.post.send(side, op, Fault.INLINE_OVER_CAP)

        @precondition(lambda self: "foreign_op" in faults and bool(foreign_ops(qp_type)))
        @rule(side=SIDES, op=st.sampled_from(foreign_ops(qp_type) or (Op.SEND,)))
        def post_foreign_op(self, side: str, op: Op) -> None:
            """An operation the QP type lacks, in RTS: refused, or it fails (never SUCCESS)."""
            if self._state(side) == S.RTS and op in foreign_ops(qp_type):
                self.h.post.send(side, op)

        @precondition(lambda self: "misaligned_atomic" in faults and qp_type is QPType.RC)
        @rule(side=SIDES, op=st.sampled_from([Op.COMP_SWAP, Op.FETCH_ADD]))
        def post_misaligned_atomic(self, side: str, op: Op) -> None:
            """An atomic to a remote address off 8-byte alignment (on a pair whose device
            has atomics): refused at post, or an Invalid Request error; never executed."""
            if self._state(side) in _SENDABLE and _can(self.h, side, op):
                self.h.post.send(side, op, Fault.MISALIGNED)

        @precondition(lambda self: Op.RDMA_READ in ops_for(qp_type))
        @rule(side=SIDES, ops=st.lists(st.sampled_from(
            [o for o in ops_for(qp_type) if o is Op.RDMA_READ or o.atomic] or [Op.SEND]),
            min_size=2, max_size=4))
        def read_burst(self, side: str, ops: list[Op]) -> None:
            """READs and atomics back to back, beyond the initiator depth: they wait."""
            if self._state(side) not in _SENDABLE:
                return
            with self.h.post.back_to_back():
                for op in ops:
                    if _can(self.h, side, op):
                        self.h.post.send(side, op)

        @precondition(lambda self: Op.RDMA_READ in ops_for(qp_type))
        @rule(side=SIDES, **_fence_draws(ops_for(qp_type)))
        def post_fenced(self, side: str, before: Op, op: Op) -> None:
            """A READ or an atomic, then a fenced WR sending what it returned."""
            if self._state(side) in _SENDABLE:
                _post_fenced(self.h, side, before, op)

        @precondition(lambda self: "short_recv" in faults)
        @rule(side=SIDES)
        def post_short_recv(self, side: str) -> None:
            """A receive with room for less than a SEND carries (an end without an SRQ): RC:
            a SEND into it fails at both ends; UC/UD: the responder drops it or completes
            the receive in error, the same way each time (pair.unreliable.recv_too_short);
            a WRITE with immediate fills it."""
            self._state(side)
            if side not in self.h.model.srq_sides:
                self.h.post.recv(side, short=True)

        @precondition(lambda self: "bad_lkey_recv" in faults and qp_type == QPType.RC)
        @rule(side=SIDES)
        def post_bad_lkey_recv(self, side: str) -> None:
            """A receive whose lkey names no MR (an end without an SRQ): a SEND into it
            fails at both ends (pair.rc.recv_bad_lkey), a WRITE with immediate fills it."""
            self._state(side)
            if side not in self.h.model.srq_sides:
                self.h.post.recv(side, bad_lkey=True)

        @rule(side=SIDES, op=st.sampled_from(ops_for(qp_type)), unused=WR_FILLS,
              inline=st.booleans())
        def exchange(self, side: str, op: Op, unused: str, inline: bool) -> None:
            """The peer posts a receive, then `side` posts `op`: traffic as applications
            run it (a receive waiting), so each operation's completions are compared at
            both ends, not only its errors (the unused fields filled as drawn; inline when
            drawn and it can be: an inline SEND's received bytes are compared only here
            and after a `post_recv`, which `post_send` alone meets rarely)."""
            if self._state(side) in _SENDABLE and _can(self.h, side, op):
                inline = inline and op.inlinable and self.h.post.can_inline(side)
                self.h.post.recv(self.h.model.peer_of(side))
                self.h.post.send(side, op, unused=unused, inline=inline)

        @rule(side=SIDES, ops=_batch(ops_for(qp_type)))
        def post_batch(self, side: str, ops: list[Op]) -> None:
            """Unsignaled WRs, then a signaled one (selective signaling)."""
            for i, op in enumerate(ops):
                if self._state(side) not in _SENDABLE or not _can(self.h, side, op):
                    return
                self.h.post.send(side, op, signaled=i == len(ops) - 1)

        @rule(side=SIDES, data=st.data())
        def modify(self, side: str, data: st.DataObject) -> None:
            targets = _TABLE.targets(qp_type, self._state(side))
            nxt = data.draw(st.sampled_from(targets), label="target")
            extra: dict[str, int] = {}
            if nxt == S.SQD and self._state(side) == S.RTS:
                notify = data.draw(st.booleans(), label="notify")
                extra = {"en_sqd_async_notify": int(notify)}
            psns = self.h.lifecycle.peer_psns(side) if nxt in (S.RTR, S.RTS) else {}
            fill = data.draw(FILLS, label="unmasked")  # one draw: the fields outside the mask

            bit = Attr.EN_SQD_ASYNC_NOTIFY if extra else Attr(0)
            self.h.modify(side, nxt, {**psns, **extra}, bit, fill=fill)

        @precondition(lambda self: _loaded(self, 2))
        @rule(side=SIDES)
        def flush_outstanding(self, side: str) -> None:
            """An end with two WRs or more outstanding moves to ERR: each is flushed, in
            posting order (drawn when it can mean something: a lost or reordered flush
            needs two)."""
            if _outstanding(self.h, side) >= 2:
                self.h.modify(side, S.ERR)

        @precondition(lambda self: "bad_lkey" in faults)
        @rule(side=SIDES, signaled=st.booleans())
        def send_bad_lkey(self, side: str, signaled: bool) -> None:
            """A SEND whose local key is bad: it completes in error, signaled or not."""
            if self._state(side) in _SENDABLE:
                self.h.post.send(side, fault=Fault.BAD_LKEY, signaled=signaled)

        @precondition(lambda self: "bad_rkey" in faults and qp_type != QPType.UD)
        @rule(side=SIDES, op=st.sampled_from([o for o in ops_for(qp_type) if o.remote
                                              and not o.consumes_recv]))
        def write_bad_rkey(self, side: str, op: Op) -> None:
            if self._state(side) in _SENDABLE and _can(self.h, side, op):
                self.h.post.send(side, op, Fault.BAD_RKEY)

        @precondition(lambda self: "access" in faults and qp_type != QPType.UD)
        @rule(side=SIDES, fault=TARGET_FAULTS,
              op=st.sampled_from([o for o in ops_for(qp_type) if o in TARGETED_OPS]
                                 or [Op.RDMA_WRITE]))
        def access_target(self, side: str, op: Op, fault: Fault) -> None:
            """A valid rkey of one of the peer's target MRs: a window it grants, or one it
            refuses (RC: REM_ACCESS_ERR, both ERR; UC: dropped); the guard bands are
            compared after the step."""
            if self._state(side) in _SENDABLE and _can(self.h, side, op):
                self.h.post.send(side, op, fault)

        @precondition(lambda self: "access" in faults and qp_type in _QP_RIGHTS)
        @rule(side=SIDES, rights=st.lists(st.sampled_from(
            _QP_RIGHTS.get(qp_type, (AccessFlag.REMOTE_WRITE,))), unique=True))
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

        @precondition(lambda self: "peer" in faults)
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

    TrafficMachine.__name__ = f"TrafficMachine{qp_type.name}"
    return TrafficMachine


def _idle_bystander(h: PairHarness, side: str) -> QPState:
    """iWARP: the bystander of `side` brought from RESET to IDLE (INIT) if it is there;
    returns its state (INIT or ERR: it is never connected, and an iWARP QP never leaves
    ERR)."""
    by = h.shared.bystander(side).model
    if by.state == S.RESET:
        h.shared.modify(side, S.INIT)
    return by.state


def iwarp_machine_for(
    make: Callable[..., PairHarness], faults: Collection[str] = FAULTS,
    shared_cq: bool = False,
) -> type[RuleBasedStateMachine]:
    """The machine over an iWARP pair (one RC connection made through rdma_cm).

    Only what an iWARP connection has: traffic both ways, a SEND meeting no receive or a
    WRITE with a bad STag (Terminate: the connection ends), a modify to ERR, SQD (CLOSING)
    or SQE (TERMINATE) (the peer enters ERR), a destroyed peer; then a new connection on
    two new QPs (an iWARP QP is never reused). No modify back to RTS (only the connection
    manager gets there).

    With `shared_cq`, each example draws whether its pair's "a" end shares its CQs with a
    bystander QP (`make(shared_cq_sides=("a",))`; the new ends of a reconnect get a new
    one). The bystander is never connected: it holds receives in IDLE (INIT) and flushes
    them in ERR, its own only, while the end carries traffic and is flushed or closed
    beside it. No RESET rules (an iWARP QP is not reused: siw keeps ERROR) and no WR posted
    on a bystander in ERR (a user QP's post in ERR never reaches siw's kernel: the lone
    suites judge that, under siw.user_post_in_err_never_flushed).
    """

    class IwarpTrafficMachine(PairMachine):
        make_pair = staticmethod(make)

        if shared_cq:

            @initialize(bystander=st.booleans())
            def connect(self, bystander: bool) -> None:  # type: ignore[override]
                self.h = self.make_pair(shared_cq_sides=("a",) if bystander else ())
                self.h.lifecycle.connect()

            @precondition(lambda self: _bystander_end(self) is not None)
            @rule()
            def bystander_recv(self) -> None:
                """A receive on the idle bystander: it waits on the end's receive CQ,
                untouched by the end's traffic, close and flushes."""
                side = _bystander_end(self)
                assert side is not None
                self._state(side)  # (a resync reconnects: a new end, a new bystander)
                if _idle_bystander(self.h, side) == S.INIT:
                    self.h.shared.post_recv(side)

            @precondition(lambda self: _bystander_end(self) is not None)
            @rule()
            def bystander_flush(self) -> None:
                """The bystander to ERR with a receive or more: its own receives flush on the
                end's CQs, naming its qp_num; the end's WRs stay posted."""
                side = _bystander_end(self)
                assert side is not None
                self._state(side)
                if _idle_bystander(self.h, side) == S.ERR:
                    return
                if not self.h.shared.bystander(side).model.queues.recvs:
                    self.h.shared.post_recv(side)
                self.h.shared.modify(side, S.ERR)

            @precondition(lambda self: _bystander_end(self) is not None)
            @rule(how=st.sampled_from([S.ERR, S.SQD, S.SQE]))
            def end_flush_over_bystander(self, how: QPState) -> None:
                """The connected end to ERR, CLOSING (SQD) or TERMINATE (SQE) while its
                bystander holds a receive: the end's flush must leave the bystander's WRs
                posted."""
                side = _bystander_end(self)
                assert side is not None
                if self._state(side) != S.RTS:
                    return
                if _idle_bystander(self.h, side) == S.INIT and not (
                    self.h.shared.bystander(side).model.queues.recvs
                ):
                    self.h.shared.post_recv(side)
                self.h.modify(side, how)

        @rule(side=SIDES, op=st.sampled_from(IWARP_OPS), unused=WR_FILLS)
        def post_send(self, side: str, op: Op, unused: str) -> None:
            """A send in RTS, after a close (CLOSING, TERMINATE: refused, or accepted and
            flushed) or in ERR (the fields its opcode does not use filled as drawn)."""
            if self._state(side) in (S.RTS, S.SQD, S.SQE, S.ERR):
                self.h.post.send(side, op, unused=unused)

        @rule(side=SIDES, ops=_batch(IWARP_OPS))
        def post_batch(self, side: str, ops: list[Op]) -> None:
            """Unsignaled WRs, then a signaled one (selective signaling)."""
            for i, op in enumerate(ops):
                if self._state(side) not in (S.RTS, S.ERR):
                    return
                self.h.post.send(side, op, signaled=i == len(ops) - 1)

        @rule(side=SIDES, **_fence_draws(IWARP_OPS))
        def post_fenced(self, side: str, before: Op, op: Op) -> None:
            """A READ, then a fenced SEND or WRITE sending what it returned."""
            if self._state(side) == S.RTS:
                _post_fenced(self.h, side, before, op)

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

        @precondition(lambda self: "bad_rkey" in faults)
        @rule(side=SIDES)
        def write_bad_rkey(self, side: str) -> None:
            if self._state(side) == S.RTS:
                self.h.post.send(side, Op.RDMA_WRITE, Fault.BAD_RKEY)

        @precondition(lambda self: "access" in faults)
        @rule(side=SIDES, fault=TARGET_FAULTS)
        def access_write(self, side: str, fault: Fault) -> None:
            """A WRITE with a valid STag of one of the peer's target regions: granted, or
            refused (the data sink terminates); the guard bands compared after it."""
            if self._state(side) == S.RTS:
                self.h.post.send(side, Op.RDMA_WRITE, fault)

        @precondition(lambda self: "peer" in faults)
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

    return IwarpTrafficMachine
