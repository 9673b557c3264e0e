"""PairModel: two connected QPs and the wire between them.

A single QPModel knows what its own verbs do, but not what happens to a send
once it leaves: that depends on the peer's state, its posted receives and the
fault planted in the WR. PairModel joins two QPModels ("a" and "b") and decides,
for the oldest started send of each side, the wire outcome (success consuming
the peer's oldest receive, RNR, retry exhaustion, silent drop, access or
protection error), then drives both QPModels through their automatic events.
Every decision names its rule (models/pair_rules.py); the sides, faults and settings of the
wire are models/wire.py's, what its steps' expectations also promise models/wire_expect.py's.
"""

import errno
from collections.abc import Mapping
from dataclasses import replace

from models import access, qkey
from models.enums import Attr, EventType, QPState, QPType, WCStatus
from models.local_access import RECV_RIGHTS
from models.local_access import rule_of as local_rule
from models.operations import (
    ATOMIC_DELIVERED,
    ATOMIC_MISALIGNED_POST,
    ATOMICS,
    FENCE_AFTER_READS,
    IMM_DELIVERED,
    INLINE_DELIVERED,
    INLINE_OVER_CAP,
    OP_NOT_OF_TYPE,
    RC_ATOMIC_MISALIGNED,
    READ_DELIVERED,
    READ_DEPTH,
    SINK_PAYLOAD,
    SINK_STALE,
    Op,
    foreign_ops,
    imm_for,
    ops_for,
    sink_label,
    with_byte_len,
)
from models.outcomes import Expectation, Outcome
from models.pair_rules import (
    COMM_EST_ON_FIRST_PACKET,
    RC_BAD_RKEY,
    RC_RECV_BAD_LKEY,
    RC_RECV_TOO_SHORT,
    RC_RETRY_EXHAUSTED,
    RC_RNR_EXHAUSTED,
    RC_RNR_WAITING,
    SEND_DELIVERED,
    TOO_LONG_DROPPED,
    TOO_LONG_ERROR,
    UC_BAD_RKEY,
    UNRELIABLE_DROPPED,
    UNRELIABLE_RECV_TOO_SHORT,
    WRITE_DELIVERED,
)
from models.qp import QPModel
from models.sources import Rule
from models.srq import SRQ_RECV_CONSUMED, SRQModel
from models.variant import LINUX, Variant
from models.wire import SIDES, Fault, WireSettings, WireStep, check_plantable
from models.wire_expect import ERROR_EVENTS, checking, either_status, guarded, may_raise, with_data

S = QPState
RNR_INFINITE = 7
_RECEIVING = frozenset({S.RTR, S.RTS, S.SQD, S.SQE})
_RELIABLE = frozenset({QPType.RC})
_COMM_EST_TYPES = frozenset({QPType.RC, QPType.UC})


class PairModel:
    """Expected behaviour of two connected QPs of one type and the messages between them."""

    def __init__(
        self,
        qp_type: QPType,
        variant: Variant | str = LINUX,
        settings: WireSettings | None = None,
        srq_sides: frozenset[str] = frozenset(),
    ) -> None:
        self.qp_type = QPType(qp_type)
        self.settings = settings or WireSettings()
        #: The ends whose receives come from an SRQ of their own (models/srq.py).
        self.srq_sides = frozenset(srq_sides)
        self.ends: dict[str, QPModel] = {
            s: QPModel(self.qp_type, variant, srq=self._new_srq(s)) for s in SIDES
        }
        self.gone: set[str] = set()
        self._ops: dict[tuple[str, int], tuple[Op, Fault]] = {}
        self._inline: set[tuple[str, int]] = set()  # sends posted inline (within the cap)
        self._beyond_depth: set[tuple[str, int]] = set()  # READs/atomics past max_rd_atomic
        #: Fenced sends: what their data (the requester's READ sink) must hold once they
        #: start (models.operations.SINK_*); and what each end's sink holds now.
        self._fenced: dict[tuple[str, int], str] = {}
        self._sink: dict[str, str] = dict.fromkeys(SIDES, SINK_STALE)
        self._short: set[tuple[str, int]] = set()  # receives shorter than a SEND's data
        #: Receives the responder may not write (RC_RECV_BAD_LKEY, RECV_RIGHTS): their rule.
        self._prot_recv: dict[tuple[str, int], Rule] = {}
        #: What the device does with a UC/UD message longer than the receive
        #: (UNRELIABLE_RECV_TOO_SHORT: TOO_LONG_DROPPED or TOO_LONG_ERROR); None: not seen
        #: yet, the model expects the drop and `undecided` holds the receives such a
        #: message met, until the harness saw which way the device went.
        self.too_long: str | None = None
        self.undecided: set[tuple[str, int]] = set()
        #: Receives a too-long message met once the device chose to drop it.
        self.met_dropped: set[tuple[str, int]] = set()
        #: What each end's target MRs must hold (models/access.py).
        self.memory = access.Memory()
        #: While not None: posts go back to back (no wait between them), and this counts
        #: each side's READs and atomics among them (see `back_to_back`).
        self.burst: dict[str, int] | None = None

    #: An iWARP pair model (models/iwarp_pair.py) carries iWARP's operations.
    iwarp = False

    # ------------------------------------------------------------------------ navigation
    @staticmethod
    def peer_of(side: str) -> str:
        """The other end of the pair."""
        return "b" if side == "a" else "a"

    def qp(self, side: str) -> QPModel:
        """The QPModel of one end."""
        return self.ends[side]

    # ----------------------------------------------------------------------------- verbs
    def modify(self, side: str, attrs: Mapping[str, int], mask: Attr | int) -> Expectation:
        """modify_qp on one end (commit with apply); the access flags it sets are in force
        once applied (ModifyJudge.access_flags)."""
        return self.ends[side].modify(attrs, mask)

    def lacks(self, side: str, op: Op) -> bool:
        """Does `side`'s QP, with the access flags in force, lack the remote right `op`
        needs of it as a responder?"""
        flags = self.ends[side].judge.access_flags
        return flags is not None and access.qp_lacks(flags, op)

    def judgeable(self, side: str, op: Op) -> bool:
        """Can the model judge `op` posted on `side` now? Not an RC WRITE with immediate to a
        peer whose QP lacks REMOTE_WRITE: with no receive waiting, which check comes first
        (the QP's rights or the receive queue: RNR) is the responder's order, which the
        spec does not fix."""
        return not (self.qp_type in _RELIABLE and op is Op.WRITE_WITH_IMM
                    and self.lacks(self.peer_of(side), op))

    def post_send(
        self,
        side: str,
        wr_id: int,
        op: Op = Op.SEND,
        fault: Fault = Fault.NONE,
        signaled: bool = True,
        inline: bool = False,
        fence: bool = False,
    ) -> Expectation:
        """post_send of one WR of `op` carrying `fault` (commit with apply); an unsignaled
        one completes only if it ends in error; an `inline` one (within max_inline_data)
        as the same WR not inline; a `fence`d one (IBV_SEND_FENCE, its data taken from the
        end's READ sink) waits for the READs and atomics before it (FENCE_AFTER_READS).
        An operation the QP type lacks: `_post_foreign`."""
        if fence and (not op.fenceable or inline or fault is not Fault.NONE):
            raise ValueError("the model fences a SEND or WRITE, not inline, without a fault")
        if op not in ops_for(self.qp_type, self.iwarp):
            if self.iwarp or op not in foreign_ops(self.qp_type) or fault is not Fault.NONE:
                raise ValueError(f"{self.qp_type.name} carries no {op.name}")
            return self._post_foreign(side, wr_id, op, signaled)
        check_plantable(op, fault, inline, self.qp_type)
        if fault is Fault.NONE and not self.judgeable(side, op):  # (a fault: never sent)
            raise ValueError("the model posts no RC WRITE with immediate to a QP without "
                             "REMOTE_WRITE (the responder's order of checks decides it)")
        exp = self.ends[side].post_send(wr_id, signaled)
        if fault is Fault.INLINE_OVER_CAP:
            if exp.outcome is Outcome.REFUSE:  # refused anyway (RESET, INIT, RTR)
                return exp
            return self.ends[side].proposal.overrule(exp, Outcome.REFUSE, INLINE_OVER_CAP)
        if fault is Fault.MISALIGNED and exp.outcome is Outcome.ACCEPT:
            exp = self.ends[side].proposal.overrule(
                exp, Outcome.EITHER, ATOMIC_MISALIGNED_POST, frozenset({errno.EINVAL}))
        self._ops[(side, wr_id)] = (op, fault)
        self.memory.used |= fault.touches_targets
        if inline:
            self._inline.add((side, wr_id))
        if fence:
            self._fenced[(side, wr_id)] = self._sink_when_started(side)
        if op in (Op.RDMA_READ, *ATOMICS) and self.burst is not None:
            ahead = self.burst.get(side, 0)
            self.burst[side] = ahead + 1
            if ahead >= self.settings.max_rd_atomic:
                self._beyond_depth.add((side, wr_id))
        return exp

    def _sink_when_started(self, side: str) -> str:
        """What `side`'s READ sink holds once every READ and atomic outstanding now has
        completed: the last one's result, or what it holds now."""
        last = self._sink[side]
        for wr in self.ends[side].queues.outstanding_sends:
            op, _ = self._ops.get((side, wr), (Op.SEND, Fault.NONE))
            if op is Op.RDMA_READ or op.atomic:
                last = sink_label(op)
        return last

    def _delivered(
        self, side: str, wr_id: int, op: Op, decided: tuple[Rule, WCStatus | None, str]
    ) -> tuple[Rule, str | None]:
        """Book what a finished send does to the sink data: a READ or atomic that succeeded
        fills `side`'s sink; a fenced one delivered is judged by FENCE_AFTER_READS and, if it
        is a SEND, names the data its receive must hold (None: nothing to compare)."""
        rule, status, at_peer = decided
        targeted = self._ops.get((side, wr_id), (op, Fault.NONE))[1].targeted
        if status == WCStatus.SUCCESS and (op is Op.RDMA_READ or op.atomic) and not targeted:
            self._sink[side] = sink_label(op)
        data = self._fenced.pop((side, wr_id), None)
        if data is None or status != WCStatus.SUCCESS or at_peer not in ("recv", "none"):
            return rule, None
        return FENCE_AFTER_READS, data if op in (Op.SEND, Op.SEND_WITH_IMM) else None

    def _post_foreign(self, side: str, wr_id: int, op: Op, signaled: bool) -> Expectation:
        """An operation the QP type lacks, posted in RTS: refused at post (it never runs), or
        accepted and started; the wire then fails it (`decide`: LOC_QP_OP_ERR). Only RTS
        is modelled: elsewhere the post's own state rule would have to meet this one."""
        if self.ends[side].state != S.RTS:
            raise ValueError(f"the model posts {op.name} on {self.qp_type.name} in RTS only")
        exp = self.ends[side].post_send(wr_id, signaled)
        self._ops[(side, wr_id)] = (op, Fault.NONE)
        return self.ends[side].proposal.overrule(exp, Outcome.EITHER, OP_NOT_OF_TYPE)

    def post_recv(self, side: str, wr_id: int, short: bool = False, bad_lkey: bool = False,
                  read_only: bool = False) -> Expectation:
        """post_recv on one end's own receive queue (commit with apply); a `short` one has
        room for less than a SEND carries (RC: RC_RECV_TOO_SHORT; UC, UD:
        UNRELIABLE_RECV_TOO_SHORT); a `bad_lkey` one names no MR, a `read_only` one an MR
        without LOCAL_WRITE (RC only: RC_RECV_BAD_LKEY, RECV_RIGHTS)."""
        if (short or bad_lkey or read_only) and self.iwarp:
            raise ValueError("iWARP: a short receive is a DDP Terminate, not modelled here")
        if (bad_lkey or read_only) and self.qp_type is not QPType.RC:
            raise ValueError("the model posts a bad-lkey or read-only receive on an RC QP only")
        exp = self.ends[side].post_recv(wr_id)
        if short:
            self._short.add((side, wr_id))
        if bad_lkey or read_only:
            self._prot_recv[(side, wr_id)] = RC_RECV_BAD_LKEY if bad_lkey else RECV_RIGHTS
        self.memory.used |= read_only  # it lies in the end's read_only target
        return exp

    def too_long_completed(self, side: str, wr_id: int) -> Expectation:
        """The device completed receive `wr_id`, which a UC/UD message too long for it met
        while the model expected the drop: it chose TOO_LONG_ERROR, and the model follows
        (the receive completes LOC_LEN_ERR, `side` enters ERR, flushing the rest)."""
        qp = self.ends[side]
        recvs = qp.queues.recvs
        if (side, wr_id) not in self.undecided or not recvs or recvs[0] != wr_id:
            raise ValueError(f"no undecided too-long message met receive {wr_id} on {side}")
        self.too_long = TOO_LONG_ERROR
        self.undecided.clear()
        exp = may_raise(qp.recv_completed(WCStatus.LOC_LEN_ERR))
        return replace(exp, checked=(*exp.checked, UNRELIABLE_RECV_TOO_SHORT))

    def too_long_dropped(self) -> None:
        """The device dropped the too-long messages the model holds undecided (no
        completion came within a quiet window): it chose TOO_LONG_DROPPED."""
        self.too_long = TOO_LONG_DROPPED
        self.met_dropped |= self.undecided
        self.undecided.clear()

    def post_srq_recv(self, side: str, wr_id: int) -> Expectation:
        """post_srq_recv to one end's SRQ (commit with apply)."""
        return self.ends[side].post_srq_recv(wr_id)

    def arm_srq(self, side: str, limit: int) -> Expectation:
        """modify_srq(IBV_SRQ_LIMIT) on one end's SRQ (commit with apply)."""
        return self.ends[side].arm_srq(limit)

    def destroy(self, side: str) -> Expectation:
        """destroy_qp on one end; once applied, that end is gone from the wire."""
        return self.ends[side].destroy()

    def apply(self, side: str, exp: Expectation, accepted: bool) -> None:
        """Commit what the device did with the last verb on `side`."""
        self.ends[side].apply(exp, accepted)
        if accepted and exp.verb == "destroy":
            self.gone.add(side)

    def recreate(self, side: str) -> None:
        """A new QP replaces a destroyed end (it starts in RESET)."""
        old = self.ends[side]
        self.ends[side] = QPModel(self.qp_type, old.variant, old.caps, srq=self._new_srq(side))
        self.gone.discard(side)
        self._sink[side] = SINK_STALE  # a new QP, a new sink
        self.memory.forget(side)  # and new target MRs

    def _new_srq(self, side: str) -> SRQModel | None:
        """A new, empty SRQ for an end that has one (it lives and dies with its QP)."""
        return SRQModel() if side in self.srq_sides else None

    # ------------------------------------------------------------------------------ wire
    def progress(self) -> list[WireStep]:
        """Resolve every send the wire can finish now, on both sides, until nothing moves."""
        steps: list[WireStep] = []
        moved = True
        while moved:
            moved = False
            for side in SIDES:
                step = self._resolve_head(side)
                if step is not None:
                    steps.append(step)
                    moved = True
        return steps

    def blocked(self) -> list[tuple[str, int]]:
        """Sends started but waiting (RC RNR with infinite retry): (side, wr_id)."""
        return [
            (side, self.ends[side].queues.in_flight[0])
            for side in SIDES
            if side not in self.gone and self.ends[side].queues.in_flight
        ]

    def decide(self, side: str) -> tuple[Rule, WCStatus | None, str]:
        """Pure verdict for the oldest started send of `side`.

        Returns (rule, requester status or None while it waits, what happens at the peer:
        "recv", "recv_error", "recv_prot_error", "none", "drop", "too_long" (a UC/UD
        message longer than the receive, dropped: the receive stays), "access_error" or
        "invalid_request").
        """
        req = self.ends[side]
        wr_id = req.queues.in_flight[0]
        op, fault = self._ops.get((side, wr_id), (Op.SEND, Fault.NONE))
        peer_side = self.peer_of(side)
        peer = self.ends[peer_side]
        reliable = self.qp_type in _RELIABLE
        receiving = peer_side not in self.gone and peer.state in _RECEIVING
        if op not in ops_for(self.qp_type, self.iwarp):  # found by the requester itself
            return OP_NOT_OF_TYPE, WCStatus.LOC_QP_OP_ERR, "none"
        if fault.local:
            return local_rule(fault), WCStatus.LOC_PROT_ERR, "none"
        if not receiving:
            if reliable:
                return RC_RETRY_EXHAUSTED, WCStatus.RETRY_EXC_ERR, "none"
            return UNRELIABLE_DROPPED, WCStatus.SUCCESS, "drop"
        if fault is Fault.BAD_QKEY:  # UD: the responder's Q_Key check, before anything
            return qkey.MISMATCH, WCStatus.SUCCESS, "drop"
        if self.lacks(peer_side, op):  # the QP's own rights: before any key (rule text)
            if reliable:
                return access.RC_QP_RIGHTS, access.QP_RIGHTS_STATUSES[0], "qp_refused"
            return access.UC_QP_RIGHTS, WCStatus.SUCCESS, "drop"
        if op.remote and fault is Fault.BAD_RKEY:
            if reliable:
                return RC_BAD_RKEY, WCStatus.REM_ACCESS_ERR, "access_error"
            return UC_BAD_RKEY, WCStatus.SUCCESS, "drop"
        if fault.refused:
            rule = access.refusal_rule(fault, reliable)
            return (rule, WCStatus.REM_ACCESS_ERR, "access_refused") if reliable else (
                rule, WCStatus.SUCCESS, "drop")
        if op.atomic and fault is Fault.MISALIGNED:
            return RC_ATOMIC_MISALIGNED, WCStatus.REM_INV_REQ_ERR, "invalid_request"
        if fault is Fault.SINK_READ_ONLY:  # answered; its response is not placed
            return local_rule(fault), WCStatus.LOC_PROT_ERR, "none"
        if (side, wr_id) in self._beyond_depth:
            return READ_DEPTH, WCStatus.SUCCESS, "none"
        if op is Op.RDMA_READ:
            return READ_DELIVERED, WCStatus.SUCCESS, "none"
        if op.atomic:
            return ATOMIC_DELIVERED, WCStatus.SUCCESS, "none"
        if op is Op.RDMA_WRITE:
            return WRITE_DELIVERED, WCStatus.SUCCESS, "none"
        if peer.receives():
            if peer.srq is not None:
                return SRQ_RECV_CONSUMED, WCStatus.SUCCESS, "recv"
            oldest = (peer_side, peer.queues.recvs[0])
            if op in (Op.SEND, Op.SEND_WITH_IMM) and oldest in self._short:
                if reliable:
                    return RC_RECV_TOO_SHORT, WCStatus.REM_INV_REQ_ERR, "recv_error"
                at_peer = "recv_error" if self.too_long == TOO_LONG_ERROR else "too_long"
                return UNRELIABLE_RECV_TOO_SHORT, WCStatus.SUCCESS, at_peer
            if op in (Op.SEND, Op.SEND_WITH_IMM) and oldest in self._prot_recv:
                return self._prot_recv[oldest], WCStatus.REM_OP_ERR, "recv_prot_error"
            return (IMM_DELIVERED if op.carries_imm else SEND_DELIVERED), WCStatus.SUCCESS, "recv"
        if not reliable:
            return UNRELIABLE_DROPPED, WCStatus.SUCCESS, "drop"
        if self.settings.rnr_retry >= RNR_INFINITE:
            return RC_RNR_WAITING, None, "none"
        return RC_RNR_EXHAUSTED, WCStatus.RNR_RETRY_EXC_ERR, "none"

    def _resolve_head(self, side: str) -> WireStep | None:
        req = self.ends[side]
        if side in self.gone or not req.queues.in_flight or req.state not in (S.RTS, S.SQD):
            return None
        wr_id = req.queues.in_flight[0]
        rule, status, at_peer = self.decide(side)
        if status is None:
            return None
        peer_side = self.peer_of(side)
        effects: list[tuple[str, Expectation]] = []
        forbidden: dict[str, tuple[EventType, ...]] = {}
        op, fault = self._ops.get((side, wr_id), (Op.SEND, Fault.NONE))
        peer = self.ends[peer_side]
        if (side, wr_id) in self._inline and status == WCStatus.SUCCESS and (
            rule not in (UNRELIABLE_RECV_TOO_SHORT, access.UC_QP_RIGHTS)
        ):
            rule = INLINE_DELIVERED  # as the same WR not inline: its completions follow
        sent_out = not fault.local and rule is not OP_NOT_OF_TYPE
        if sent_out and peer.awaiting_first_packet and self.qp_type in _COMM_EST_TYPES:
            effects.append((peer_side, self._first_packet(peer_side)))
        rule, data = self._delivered(side, wr_id, op, (rule, status, at_peer))
        data_rule = FENCE_AFTER_READS
        if rule is INLINE_DELIVERED and op in (Op.SEND, Op.SEND_WITH_IMM):
            data, data_rule = SINK_PAYLOAD, INLINE_DELIVERED  # the bytes it was posted with
        if at_peer == "recv":
            imm = imm_for(wr_id) if op.carries_imm else None
            got = with_data(peer.recv_completed(WCStatus.SUCCESS, op.recv_opcode, imm), data,
                            data_rule)
            got = with_byte_len(got, op, self.qp_type is QPType.UD)
            effects.append((peer_side, checking(got)))
        if at_peer == "recv_error":
            got = peer.recv_completed(WCStatus.LOC_LEN_ERR)
            effects.append((peer_side, may_raise(got) if rule is UNRELIABLE_RECV_TOO_SHORT
                            else got))
        if at_peer == "too_long":  # dropped (so far: the device may yet show otherwise)
            met = (peer_side, peer.queues.recvs[0])
            (self.undecided if self.too_long is None else self.met_dropped).add(met)
        if at_peer == "recv_prot_error":
            effects.append((peer_side, peer.recv_completed(WCStatus.LOC_PROT_ERR)))
        placed = self._placed(peer_side, op, fault, (status, at_peer))
        sent = guarded(req.send_completed(status, op.send_opcode), fault, placed)
        if at_peer == "qp_refused":
            sent = either_status(sent, access.QP_RIGHTS_STATUSES, access.RC_QP_RIGHTS)
        effects.append((side, checking(sent)))
        if status != WCStatus.SUCCESS:
            forbidden[side] = ERROR_EVENTS
        if at_peer == "access_error":
            effects.append((peer_side, self.ends[peer_side].async_error(EventType.QP_ACCESS_ERR)))
        if at_peer == "invalid_request":
            effects.append((peer_side, self.ends[peer_side].invalid_request()))
        if at_peer == "qp_refused":  # either NAK: whichever event its kind raises may come
            refused = self.ends[peer_side].invalid_request()
            effects.append((peer_side, replace(
                refused, checked=(*refused.checked, access.RC_QP_RIGHTS))))
        if at_peer == "access_refused":
            refused = self.ends[peer_side].access_refused()
            effects.append((peer_side, replace(
                refused, checked=(*refused.checked, access.ACCESS_EVENT))))
        self._ops.pop((side, wr_id), None)
        self._inline.discard((side, wr_id))
        self._beyond_depth.discard((side, wr_id))
        return WireStep(side, wr_id, rule, tuple(effects), forbidden, placed=placed)

    def _placed(
        self, responder: str, op: Op, fault: Fault, outcome: tuple[WCStatus | None, str]
    ) -> tuple[tuple[str, access.Window, bytes], ...]:
        """A granted RDMA WRITE the responder took (`outcome`: the requester's status and
        what happened at the peer, as `decide` says) into a target MR: its bytes, booked in
        `memory`. One the wire dropped (a UC peer not receiving) placed nothing."""
        status, at_peer = outcome
        delivered = status == WCStatus.SUCCESS and at_peer == "none"
        if op is not Op.RDMA_WRITE or not delivered or not fault.targeted or fault.refused:
            return ()
        window = access.window_of(op, fault)
        self.memory.place(responder, window, access.PAYLOAD)
        return ((responder, window, access.PAYLOAD),)

    def _first_packet(self, side: str) -> Expectation:
        """The first packet reached `side` in RTR: COMM_EST may follow, once."""
        self.ends[side].awaiting_first_packet = False
        state = self.ends[side].state
        return Expectation(
            verb="packet_received",
            outcome=Outcome.ACCEPT,
            rule=COMM_EST_ON_FIRST_PACKET,
            state_before=state,
            state_if_accepted=state,
            checked=(COMM_EST_ON_FIRST_PACKET,),
            allowed_events=(EventType.COMM_EST,),
        )

    # ------------------------------------------------------------------ following a device
    def follow_drained(self, side: str) -> list[int]:
        """The device ended an SQD drain the model still runs: its in-flight sends are held.

        A device that reports the drain over while sends are outstanding treats them as
        not started (rxe: an RNR-NAKed WQE is reset for retry and not restarted in SQD);
        the model follows: drain over, those sends held until the SQ resumes. Returns them.
        """
        qp = self.ends[side]
        held = qp.queues.in_flight
        qp.queues.hold(held)
        qp.draining = False
        return held

    def doorbell(self, side: str) -> list[int]:
        """A post_send's doorbell on a QP in RTS starts every send still waiting in its SQ
        (in posting order, before the new one). Returns the sends it started."""
        qp = self.ends[side]
        if qp.state != S.RTS:
            return []
        return qp.queues.start_waiting()
