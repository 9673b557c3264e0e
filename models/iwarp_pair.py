"""IwarpPairModel: two iWARP QPs joined by one connection (the iwarp variant's wire).

An iWARP QP has no path of its own: the connection (TCP, MPA, DDP, RDMAP) is its
transport, made and ended by the connection manager. So, unlike PairModel's IB wire:
- the connection moves both idle QPs to RTS (no modify can);
- there is no RNR and no retry: a SEND that finds no receive, or a WRITE naming a
  tagged buffer the peer does not have, is a DDP error the data sink answers with a
  Terminate message, and the connection ends;
- a SEND or WRITE completes at the requester once the LLP has taken it, before the
  peer could object, so it completes with SUCCESS even when the peer then terminates;
- when the connection ends (an error, a modify out of RTS, a destroy), each end still
  in RTS enters ERR and flushes what it holds; the end is seen on the CM channel
  (DISCONNECTED), not as an affiliated QP event.
Every decision names its rule, like models/pair.py.
"""

from dataclasses import replace

from models.enums import EventType, QPState, QPType, WCStatus
from models.operations import INLINE_DELIVERED, READ_DELIVERED, READ_DEPTH, Op
from models.outcomes import Expectation, Outcome
from models.pair import PairModel
from models.pair_rules import BAD_LKEY
from models.qp import QPModel
from models.sources import (
    DRIVER,
    KERNEL_SIW,
    MAY,
    MUST,
    RDMAC_VERBS,
    RFC5040,
    RFC5044,
    Rule,
    Source,
)
from models.variant import IWARP
from models.wire import SIDES, Fault, WireSettings, WireStep
from models.wire_expect import ERROR_EVENTS, checking, guarded, with_data

S = QPState
_DDP = "IETF RFC 5041 (DDP)"


def _both(rfc: str, where: str, drivers: str) -> Source:
    """A place in an iWARP RFC and the code of siw that does it."""
    return Source(f"{rfc}; {KERNEL_SIW}", f"{where}; {drivers}")


CM_ESTABLISHED = Rule(
    "iwarp.cm.rts",
    "a connection made through the iWARP connection manager (rdma_connect, rdma_accept, "
    "MPA negotiated) moves both idle QPs to RTS, with no affiliated event",
    _both(
        RFC5044,
        "ch. 7.1 Connection setup: the QP enters RDMA mode (RTS) when MPA negotiation ends",
        "siw_accept() and siw_proc_mpareply() (siw_cm.c): siw_qp_modify(qp, RTS) once the "
        "MPA request/reply is exchanged",
    ),
    kind=MUST,
    layer=DRIVER,
)
LLP_CLOSED = Rule(
    "iwarp.llp.close",
    "when one end of the connection leaves RTS (modify to ERR/SQD/SQE, an error, a destroy) "
    "the connection ends: the other end, if still in RTS, enters ERR and flushes every "
    "outstanding WR (WR_FLUSH_ERR, in order per queue); no affiliated event is required",
    _both(
        RFC5040,
        "ch. 6.2 RDMAP Stream Teardown (abortive termination: outstanding WRs complete in error)",
        "siw_qp_llp_close() (siw_qp.c): RTS -> ERROR, siw_sq_flush() and siw_rq_flush(); the "
        "ULP learns of the close from iw_cm (IW_CM_EVENT_CLOSE, rdma_cm DISCONNECTED)",
    ),
    kind=MUST,
    layer=DRIVER,
)
SEND_DELIVERED = Rule(
    "iwarp.send.delivered",
    "a SEND reaching a peer in RTS with a posted receive consumes the peer's oldest receive; "
    "both complete with SUCCESS",
    _both(
        RFC5040,
        "ch. 5.3 Send (untagged buffer model of RFC 5041: receives consumed in order)",
        "siw_proc_send() (siw_qp_rx.c): siw_rqe_get() takes the oldest RQE",
    ),
    kind=MUST,
    layer=DRIVER,
)
WRITE_DELIVERED = Rule(
    "iwarp.write.delivered",
    "an RDMA WRITE with a valid STag completes with SUCCESS and consumes no receive",
    _both(RFC5040, "ch. 5.1 RDMA Write", "siw_proc_write() (siw_qp_rx.c)"),
    kind=MUST,
    layer=DRIVER,
)
NO_RECEIVE = Rule(
    "iwarp.send.no_receive",
    "a SEND arriving where no receive is posted is a DDP error (no RNR in iWARP): the data "
    "sink sends Terminate and the connection ends; the requester's SEND completes with "
    "SUCCESS (the LLP had it) and both ends enter ERR, flushing",
    _both(
        f"{_DDP}; {RFC5040}",
        "DDP ch. 7 Error Management (untagged buffer: no buffer available); RDMAP ch. 7 "
        "Error Management (Terminate) and ch. 6.2 Stream Teardown",
        "siw_proc_send() (siw_qp_rx.c): no RQE -> siw_init_terminate(DDP_ETYPE_UNTAGGED_BUF, "
        "DDP_ECODE_UT_INVALID_MSN_NOBUF); siw_qp_sq_proc_tx() completed the SEND when sent",
    ),
    kind=MUST,
    layer=DRIVER,
)
BAD_STAG = Rule(
    "iwarp.write.bad_stag",
    "an RDMA WRITE naming an STag the peer does not have is a DDP tagged-buffer error: the "
    "data sink sends Terminate (it may also raise QP_ACCESS_ERR) and the connection ends; "
    "the requester's WRITE completes with SUCCESS and both ends enter ERR, flushing",
    _both(
        f"{_DDP}; {RFC5040}",
        "DDP ch. 7 Error Management (tagged buffer: invalid STag); RDMAP ch. 7 Error "
        "Management (Terminate)",
        "siw_proc_write() (siw_qp_rx.c): unknown STag -> siw_init_terminate(DDP_ETYPE_TAGGED_BUF, "
        "DDP_ECODE_T_INVALID_STAG); a failed siw_check_mem() also raises IB_EVENT_QP_ACCESS_ERR",
    ),
    kind=MUST,
    layer=DRIVER,
)
WRITE_REFUSED = Rule(
    "iwarp.write.access_refused",
    "an RDMA WRITE naming a valid STag of a region registered without REMOTE_WRITE, in "
    "another PD than the data sink's QP, or with [addr, addr+len) past its end, is a DDP "
    "tagged-buffer error: the data sink sends Terminate (it may also raise QP_ACCESS_ERR), "
    "no byte of the region changes and the connection ends; the requester's WRITE "
    "completes with SUCCESS and both ends enter ERR, flushing",
    _both(
        f"{_DDP}; {RFC5040}",
        "DDP tagged buffer model (the data sink validates the STag: its access rights, PD, "
        "base and bounds) and ch. 7 Error Management; RDMAP ch. 7 Error Management "
        "(Terminate)",
        "siw_proc_write() (siw_qp_rx.c) -> siw_check_mem() (siw_mem.c): E_PD_MISMATCH, "
        "E_ACCESS_PERM, E_BASE_BOUNDS -> siw_init_terminate(DDP_ETYPE_TAGGED_BUF, "
        "siw_tagged_error()) and IB_EVENT_QP_ACCESS_ERR",
    ),
    kind=MUST,
    layer=DRIVER,
)
LOCAL_ERROR_EVENT = Rule(
    "iwarp.send.local_error_event",
    "a send WR that fails at the requester (a bad lkey) completes in error, the connection "
    "ends, and the requester may also raise QP_FATAL: the iWARP verbs surface a local "
    "catastrophic error both ways (unlike InfiniBand's pair.completion_error.no_event)",
    _both(
        RDMAC_VERBS,
        "ch. 8.3.2 (as siw cites it): a local error turns the WQE into a signalled one and "
        "the local catastrophic error must be surfaced",
        "siw_qp_sq_process() (siw_qp_tx.c): siw_qp_cm_drop(), siw_sqe_complete(..., "
        "SIW_WC_LOC_QP_OP_ERR), siw_qp_event(qp, IB_EVENT_QP_FATAL)",
    ),
    kind=MAY,
    layer=DRIVER,
)
#: Rules of wire steps that move a QP on their own (the pair harness follows them).
AUTOMATIC = (CM_ESTABLISHED.id, LLP_CLOSED.id, NO_RECEIVE.id, BAD_STAG.id)



#: Every rule this module declares (models/catalog.py).
RULES: tuple[Rule, ...] = (
    CM_ESTABLISHED, LLP_CLOSED, SEND_DELIVERED, WRITE_DELIVERED, NO_RECEIVE, BAD_STAG,
    LOCAL_ERROR_EVENT, WRITE_REFUSED,
)

class IwarpPairModel(PairModel):
    """Expected behaviour of two iWARP RC QPs and the one connection between them."""

    iwarp = True

    def __init__(
        self,
        qp_type: QPType,
        settings: WireSettings | None = None,
        srq_sides: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__(qp_type, IWARP, settings, srq_sides)
        self.connected = False

    def establish(self) -> list[WireStep]:
        """The connection manager connected the two idle ends: both enter RTS."""
        if self.gone or any(self.ends[s].state not in (S.RESET, S.INIT, S.RTR) for s in SIDES):
            raise RuntimeError("only two idle QPs can be connected")
        self.connected = True
        return [
            WireStep(side, -1, CM_ESTABLISHED, ((side, _established(self.ends[side])),))
            for side in SIDES
        ]

    def progress(self) -> list[WireStep]:
        """Resolve every send the wire can finish, then end the connection if an end left
        RTS; repeated until nothing moves (a flush may follow a terminate)."""
        steps: list[WireStep] = []
        while True:
            more = super().progress()
            closed = self._close_if_left()
            steps += more + closed
            if not more and not closed:
                return steps

    def post_send(self, side: str, wr_id: int, op: Op = Op.SEND, fault: Fault = Fault.NONE,
                  *how: bool, **flags: bool) -> Expectation:
        """As PairModel's; a local SGE fault other than a bad lkey has no iWARP rule yet."""
        if fault.local_sge:
            raise ValueError("the iWARP model has no rule yet for a local SGE past its MR, "
                             "in another PD or a sink without LOCAL_WRITE")
        return super().post_send(side, wr_id, op, fault, *how, **flags)

    def decide(self, side: str) -> tuple[Rule, WCStatus | None, str]:
        """The oldest started send of `side`: delivered, or a DDP error that terminates."""
        wr_id = self.ends[side].queues.in_flight[0]
        op, fault = self._ops.get((side, wr_id), (Op.SEND, Fault.NONE))
        peer = self.ends[self.peer_of(side)]
        if fault is Fault.BAD_LKEY:
            return BAD_LKEY, WCStatus.LOC_PROT_ERR, "none"
        if op is Op.RDMA_WRITE:
            if fault is Fault.BAD_RKEY:
                return BAD_STAG, WCStatus.SUCCESS, "terminate"
            if fault.refused:
                return WRITE_REFUSED, WCStatus.SUCCESS, "terminate"
            return WRITE_DELIVERED, WCStatus.SUCCESS, "none"
        if op is Op.RDMA_READ:
            if fault is Fault.BAD_RKEY or fault.targeted:
                raise ValueError("the iWARP model has no rule yet for a READ naming a bad "
                                 "STag or a target region")
            if (side, wr_id) in self._beyond_depth:  # past the ORD: it waits (siw: orq_fence)
                return READ_DEPTH, WCStatus.SUCCESS, "none"
            return READ_DELIVERED, WCStatus.SUCCESS, "none"
        if peer.receives():
            return SEND_DELIVERED, WCStatus.SUCCESS, "recv"
        return NO_RECEIVE, WCStatus.SUCCESS, "terminate"

    def _resolve_head(self, side: str) -> WireStep | None:
        req = self.ends[side]
        peer_side = self.peer_of(side)
        if not self.connected or not req.queues.in_flight or req.state != S.RTS:
            return None
        if peer_side in self.gone or self.ends[peer_side].state != S.RTS:
            return None  # the connection is ending: _close_if_left decides
        wr_id = req.queues.in_flight[0]
        rule, status, at_peer = self.decide(side)
        assert status is not None
        op, fault = self._ops.get((side, wr_id), (Op.SEND, Fault.NONE))
        self._beyond_depth.discard((side, wr_id))
        if (side, wr_id) in self._inline and at_peer in ("recv", "none"):
            rule = INLINE_DELIVERED  # as the same WR not inline
        self._inline.discard((side, wr_id))
        effects: list[tuple[str, Expectation]] = []
        rule, data = self._delivered(side, wr_id, op, (rule, status, at_peer))
        self._ops.pop((side, wr_id), None)
        placed = self._placed(peer_side, op, fault, (status, at_peer))
        if at_peer == "recv":
            got = self.ends[peer_side].recv_completed(WCStatus.SUCCESS, op.recv_opcode)
            effects.append((peer_side, checking(with_data(got, data))))
        done = checking(guarded(req.send_completed(status, op.send_opcode), fault, placed))
        if status != WCStatus.SUCCESS:  # the QP left RTS: _close_if_left ends the connection
            done = replace(
                done,
                allowed_events=(EventType.QP_FATAL,),
                checked=(*done.checked, LOCAL_ERROR_EVENT),
            )
        effects.append((side, done))
        if at_peer == "terminate":
            self.connected = False
            allowed = (EventType.QP_ACCESS_ERR,) if rule in (BAD_STAG, WRITE_REFUSED) else ()
            effects.append((peer_side, _closed(self.ends[peer_side], rule, allowed)))
            effects.append((side, _closed(req, rule)))
        return WireStep(side, wr_id, rule, tuple(effects), placed=placed)

    def _close_if_left(self) -> list[WireStep]:
        """An end left RTS (or is gone) while connected: the connection ends, the other end
        enters ERR."""
        if not self.connected:
            return []
        left = [s for s in SIDES if s in self.gone or self.ends[s].state != S.RTS]
        if not left:
            return []
        self.connected = False
        return [
            WireStep(s, -1, LLP_CLOSED, ((s, _closed(self.ends[s], LLP_CLOSED)),))
            for s in SIDES
            if s not in self.gone and self.ends[s].state == S.RTS
        ]


def _established(qp: QPModel) -> Expectation:
    return _moved(qp, S.RTS, CM_ESTABLISHED, "connected", forbidden=ERROR_EVENTS)


def _closed(qp: QPModel, rule: Rule, allowed: tuple[EventType, ...] = ()) -> Expectation:
    """The connection ended under `qp`: ERR, with the flushes it owes (none if already ERR)."""
    return _moved(qp, S.ERR, rule, "connection_closed", allowed=allowed)


def _moved(
    qp: QPModel,
    to: QPState,
    rule: Rule,
    verb: str,
    forbidden: tuple[EventType, ...] = (),
    allowed: tuple[EventType, ...] = (),
) -> Expectation:
    """The connection moved `qp` to `to` (QPModel.follow: entering ERR flushes)."""
    before = qp.state
    flushed = qp.follow(to)
    into_err = to == S.ERR
    return Expectation(
        verb=verb,
        outcome=Outcome.ACCEPT,
        rule=rule,
        state_before=before,
        state_if_accepted=to,
        completions=flushed,
        events=qp.err_events(before) if into_err else (),  # an SRQ's QP: Last WQE Reached
        forbidden_events=forbidden,
        allowed_events=allowed,
        checked=(rule, *qp.err_checked(before)) if into_err else (rule,),
    )
