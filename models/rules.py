"""Named rules of the model beyond the transition table and the value ranges."""

from models.operations import IMM_DELIVERED
from models.sources import (
    DRIVER,
    KERNEL_UVERBS_CMD_C,
    KERNEL_VERBS_C,
    LIBIBVERBS,
    MAY,
    MUST,
    OPTIONAL,
    PROVIDER,
    UVERBS,
    Rule,
    Source,
    ibta,
    iwarp_drivers,
    siw,
)

_STATES = "ch. 10.3.1 QP states"

UNKNOWN_MASK_BITS = Rule(
    "uverbs.modify_qp.unknown_mask",
    "attr_mask bits outside the defined set are refused with EOPNOTSUPP",
    Source(
        KERNEL_UVERBS_CMD_C,
        "ib_uverbs_modify_qp(): attr_mask & ~IB_QP_ATTR_STANDARD_BITS -> -EOPNOTSUPP "
        "(and libibverbs ibv_cmd_modify_qp)",
    ),
    kind=MUST,
    layer=UVERBS,
)
STATE_RANGE = Rule(
    "uverbs.modify_qp.state_range",
    "qp_state and cur_qp_state above ERR are refused with EINVAL",
    Source(KERNEL_UVERBS_CMD_C, "modify_qp(): qp_state/cur_qp_state > IB_QPS_ERR -> -EINVAL"),
    kind=MUST,
    layer=UVERBS,
)
CUR_STATE_ALLOWED = Rule(
    "linux.cur_state.allowed",
    "CUR_STATE may be in the mask only when the current state is RTR, RTS, SQD or SQE",
    Source(
        KERNEL_VERBS_C,
        "ib_modify_qp_is_ok(): first test on IB_QP_CUR_STATE (a helper the driver calls)",
    ),
    kind=MUST,
    layer=DRIVER,
)
CUR_STATE_ASSUMED = Rule(
    "linux.cur_state.assumed",
    "a CUR_STATE that differs from the QP's state is what the driver is told to assume: "
    "the table is checked from it, and the driver may accept or refuse",
    Source(LIBIBVERBS, "man ibv_modify_qp(3): qp_cur_state 'Assume this is the current QP state'"),
    kind=MAY,
    layer=DRIVER,
)
REQUIRED_MISSING = "required"  # suffixes of the transition rule id
EXTRA_BITS = "extra"

MODIFY_NO_EVENT = Rule(
    "ibta.modify.no_error_event",
    "a transition made by Modify QP raises no error async event",
    ibta("ch. 11.6.3 Asynchronous events", "affiliated errors are events the CI detects"),
    kind=MUST,
    layer=DRIVER,
)
FLUSH_ON_ERROR = Rule(
    "ibta.err.flush",
    "entering ERR completes every outstanding WR with WR_FLUSH_ERR, in posting order per queue",
    ibta(_STATES + " (Error state)", "outstanding and newly posted WRs complete with flush error"),
    kind=MUST,
    layer=DRIVER,
)
DISCARD_ON_RESET = Rule(
    "ibta.reset.discard",
    "entering RESET discards every outstanding WR without a completion",
    ibta(_STATES + " (Reset state)", "WQEs are removed from the queues without completions"),
    kind=MUST,
    layer=DRIVER,
)
CQ_NO_OVERRUN = Rule(
    "ibta.cq.no_overrun",
    "a CQ created with room for every WR of its queue never overruns: no CQ_ERR event while "
    "each poll reads what arrived (the harness sizes every CQ to its queue's depth)",
    ibta("ch. 11.2.8.1 Create CQ and ch. 11.6.3 Asynchronous events",
         "the CQ holds at least the requested number of entries; a CQ overrun is reported "
         "as a CQ error"),
    kind=MUST,
    layer=DRIVER,
)
SQD_DRAINED_EVENT = Rule(
    "ibta.sqd.drained_event",
    "SQ_DRAINED is raised once draining ends, if and only if EN_SQD_ASYNC_NOTIFY was asked for",
    ibta(_STATES + " (Send Queue Drain state) and ch. 11.6.3 Asynchronous events"),
    kind=OPTIONAL,
    layer=DRIVER,
)
SQD_DRAINED_UNASKED = Rule(
    "ibta.sqd.drained_event.unasked",
    "SQ_DRAINED is raised at the end of a drain only if EN_SQD_ASYNC_NOTIFY was asked for on "
    "RTS->SQD",
    ibta(_STATES + " (Send Queue Drain state) and ch. 11.6.3 Asynchronous events",
         "generated only if the consumer requested it"),
    kind=OPTIONAL,
    layer=DRIVER,
)
SQD_DRAINED_OUTSIDE_SQD = Rule(
    "ibta.sqd.drained_event.outside_sqd",
    "SQ_DRAINED is raised only by a QP whose drain (RTS->SQD) ended; a QP that never "
    "entered SQD raises none",
    ibta(_STATES + " (Send Queue Drain state) and ch. 11.6.3 Asynchronous events"),
    kind=OPTIONAL,
    layer=DRIVER,
)
SQD_DRAINED_ONCE = Rule(
    "ibta.sqd.drained_event.once",
    "SQ_DRAINED is raised at most once per drain (per RTS->SQD)",
    ibta(_STATES + " (Send Queue Drain state) and ch. 11.6.3 Asynchronous events"),
    kind=OPTIONAL,
    layer=DRIVER,
)
SQD_HOLDS_NEW_SENDS = Rule(
    "ibta.sqd.hold",
    "send WRs posted in SQD are queued but not started until SQD->RTS",
    ibta(_STATES + " (Send Queue Drain state)"),
    kind=OPTIONAL,
    layer=DRIVER,
)
SQE_ON_SEND_ERROR = Rule(
    "ibta.sqe.enter",
    "a send WR completing in error moves a UD/UC QP to SQE and flushes later sends; "
    "receives keep working",
    ibta(_STATES + " (Send Queue Error state)"),
    kind=OPTIONAL,
    layer=DRIVER,
)
ERR_ON_SEND_ERROR = Rule(
    "ibta.err.send_error",
    "a send WR completing in error moves an RC/XRC QP to ERR; the rest is flushed",
    ibta(_STATES + " (Error state)"),
    kind=MUST,
    layer=DRIVER,
)
ERR_ON_RECV_ERROR = Rule(
    "ibta.err.recv_error",
    "a receive WR completing in error moves the QP to ERR; the rest is flushed",
    ibta(_STATES + " (Error state)"),
    kind=MUST,
    layer=DRIVER,
)
ERR_ON_ASYNC_ERROR = Rule(
    "ibta.err.async_error",
    "an affiliated error (QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR) moves the QP to ERR with its event",
    ibta("ch. 11.6.3 Asynchronous events"),
    kind=MUST,
    layer=DRIVER,
)
SEND_DONE = Rule(
    "ibta.send.complete",
    "a started send WR completes once, with its status, in posting order",
    ibta("ch. 10.8 Work request processing / completion ordering"),
    kind=MUST,
    layer=DRIVER,
)
RECV_DONE = Rule(
    "ibta.recv.complete",
    "an incoming message consumes the oldest receive WR, which completes once",
    ibta("ch. 10.8 Work request processing / completion ordering"),
    kind=MUST,
    layer=DRIVER,
)
QUERY = Rule(
    "ibta.query.state",
    "query_qp reports the QP's current state",
    ibta("ch. 11.2.5.3 Query Queue Pair"),
    kind=MUST,
    layer=DRIVER,
)
DESTROY = Rule(
    "ibta.destroy.discard",
    "destroying a QP discards its outstanding WRs; none runs afterwards",
    ibta("ch. 11.2.5.4 Destroy Queue Pair"),
    kind=MUST,
    layer=DRIVER,
)

XRC_RECV_NO_SQ = Rule(
    "xrc.post_send.no_sq",
    "an XRC_RECV (XRC target) QP has no send queue: post_send is refused (errno is the "
    "provider's) and the WR never runs",
    Source(
        KERNEL_UVERBS_CMD_C,
        "create_qp(): IB_QPT_XRC_TGT is created on an XRCD with no send or receive queue "
        "(no CQs, mlx5 sq_overhead() 0); ibv_post_send() goes to the provider unchecked",
    ),
    kind=OPTIONAL,
    layer=PROVIDER,
)
XRC_NO_RQ = Rule(
    "xrc.post_recv.no_rq",
    "XRC QPs have no receive queue (XRC_SEND: max_recv_wr forced to 0; XRC_RECV: none at "
    "all; receives go to the XRC SRQ): post_recv is refused (errno is the provider's) and the "
    "WR never runs",
    Source(
        KERNEL_UVERBS_CMD_C,
        "create_qp(): IB_QPT_XRC_INI -> cmd->max_recv_wr = 0, max_recv_sge = 0; "
        "IB_QPT_XRC_TGT has no queues; ibv_post_recv() goes to the provider unchecked",
    ),
    kind=OPTIONAL,
    layer=PROVIDER,
)


def post_rule(queue: str, state: str, accepted: bool, what: str) -> Rule:
    """The rule deciding a post_send/post_recv in one state.

    A refusal is the user-space provider's (posting does not enter the kernel for most
    providers); what becomes of an accepted WR is the driver's. SQD and SQE exist only
    on devices that have those optional states.
    """
    verb = "post_send" if queue == "send" else "post_recv"
    return Rule(
        f"ibta.{verb}.{state}",
        f"{verb} in {state}: {what}",
        ibta(
            f"{_STATES} ({state}) and ch. 11.4.1 Post {queue.capitalize()} Request",
            "posting is an immediate error" if not accepted else "",
        ),
        kind=OPTIONAL if state in ("SQD", "SQE") else MUST,
        layer=DRIVER if accepted else PROVIDER,
    )


# ------------------------------------------------------------------------------- iWARP
# The `iwarp` variant (models/iwarp_table.py) has rules of its own: an iWARP QP is not an
# InfiniBand QP. Each cites the Linux iWARP drivers (siw, cxgb4, irdma's iWARP path),
# iwcm.c, rdma-core's providers and, where they speak, the RDMAC verbs and RFC 5040/5044.
# "must" where the drivers agree, "may" where they legitimately differ; a behaviour of
# siw alone is a quirk for its profile, not a rule.

_IDLE_POST = (
    "siw_post_receive() (siw_verbs.c) refuses only a state above RTS; libsiw "
    "siw_post_recv() writes the mmapped RQ with no state check; libcxgb4 "
    "c4iw_post_receive() refuses only a WQ in error; irdma does not check the state"
)

IWARP_RC_ONLY = Rule(
    "iwarp.qp_type.rc_only",
    "iWARP QPs are RC only: create_qp of any other type is refused (EOPNOTSUPP), so no "
    "verb of such a QP is modelled",
    iwarp_drivers(
        "siw_create_qp() (siw_verbs.c): qp_type != IB_QPT_RC -> -EOPNOTSUPP; c4iw_create_qp() "
        "(cxgb4 qp.c): qp_type != IB_QPT_RC -> -EOPNOTSUPP; irdma_validate_qp_attrs() "
        "(irdma verbs.c): not RoCE and qp_type != IB_QPT_RC -> -EOPNOTSUPP"
    ),
    kind=MUST,
    layer=DRIVER,
)
IWARP_CUR_STATE = Rule(
    "iwarp.cur_state.ignored",
    "CUR_STATE is not checked: no iWARP driver calls ib_modify_qp_is_ok(), so a modify is "
    "judged from the QP's own state; a cur_qp_state that differs from it may make the "
    "driver refuse",
    iwarp_drivers(
        "siw_verbs_modify_qp() (siw_verbs.c), c4iw_ib_modify_qp() (cxgb4 qp.c) and "
        "irdma_modify_qp() (irdma verbs.c) never read cur_qp_state; man ibv_modify_qp(3): "
        "qp_cur_state 'Assume this is the current QP state'"
    ),
    kind=MAY,
    layer=DRIVER,
)
IWARP_IB_ATTRIBUTES = Rule(
    "iwarp.modify.ib_attributes",
    "a mask bit for an InfiniBand attribute an iWARP QP has no use for (P_Key, Q_Key, port, "
    "AV, MTU, PSNs, timeouts, retries, RNR, rd_atomic depths, path migration, SQD "
    "notification, CAP), or ACCESS_FLAGS outside IDLE, is left to the driver: siw and irdma "
    "ignore it, cxgb4 refuses some (EIO, EINVAL)",
    iwarp_drivers(
        "siw_verbs_modify_qp() (siw_verbs.c) and irdma_modify_qp() (irdma verbs.c) read only "
        "IB_QP_STATE and IB_QP_ACCESS_FLAGS; c4iw_ib_modify_qp() (cxgb4 qp.c) also takes "
        "SQ_PSN/RQ_PSN as doorbells (-EINVAL unless T4) and c4iw_modify_qp() refuses attribute "
        "changes outside IDLE (-EIO); iwcm.c iwcm_init_qp_init_attr(): the iWARP CM asks for "
        "STATE|ACCESS_FLAGS only"
    ),
    kind=MAY,
    layer=DRIVER,
)
IWARP_RATE_LIMIT = Rule(
    "iwarp.modify.rate_limit",
    "RATE_LIMIT (beyond the standard mask bits) is refused with EOPNOTSUPP",
    iwarp_drivers(
        "siw_verbs_modify_qp() (siw_verbs.c), c4iw_ib_modify_qp() (cxgb4 qp.c) and "
        "irdma_modify_qp() (irdma verbs.c): attr_mask & ~IB_QP_ATTR_STANDARD_BITS -> "
        "-EOPNOTSUPP"
    ),
    kind=MUST,
    layer=DRIVER,
)
IWARP_QUERY = Rule(
    "iwarp.query.state",
    "query_qp reports the state as Linux names iWARP's: IDLE as INIT (a QP last moved to "
    "RESET or RTR may read back as that state instead), RTS, CLOSING as SQD, TERMINATE as "
    "SQE, ERROR as ERR; after RESET->INIT it reads INIT",
    iwarp_drivers(
        "siw_query_qp() (siw_verbs.c, 6.12): siw_qp_state_to_ib_qp_state[] maps IDLE to "
        "IB_QPS_INIT, CLOSING to SQD, TERMINATE to SQE (6.1 never sets qp_state: fixed by "
        "'RDMA/siw: Set qp_state in siw_query_qp'); c4iw_ib_query_qp() (cxgb4 qp.c): "
        "to_ib_qp_state() maps IDLE to IB_QPS_INIT; irdma_query_qp() (irdma verbs.c) reports "
        "ibqp_state, the IB state last asked for"
    ),
    kind=MUST,
    layer=DRIVER,
)
IWARP_IDLE_REPORTED = Rule(
    "iwarp.query.idle_state",
    "a QP in IDLE last moved to RESET or RTR (or never moved) may read back as INIT, the "
    "name siw and cxgb4 give IDLE, or as the state asked for (irdma)",
    iwarp_drivers(
        "siw_qp_state_to_ib_qp_state[SIW_QP_STATE_IDLE] = IB_QPS_INIT (siw_verbs.c, 6.12); "
        "to_ib_qp_state(C4IW_QP_STATE_IDLE) = IB_QPS_INIT (cxgb4 iw_cxgb4.h); "
        "irdma_query_qp(): attr->qp_state = iwqp->ibqp_state (irdma verbs.c)"
    ),
    kind=MAY,
    layer=DRIVER,
)
IWARP_IDLE_KEEPS_WRS = Rule(
    "iwarp.reset.idle",
    "->RESET, ->INIT and ->RTR of an idle QP leave it IDLE: outstanding WRs stay queued "
    "(neither discarded nor flushed) and are flushed by a later move to ERR",
    iwarp_drivers(
        "ib_qp_state_to_siw_qp_state[] (siw_verbs.c) maps RESET and INIT to IDLE and "
        "siw_qp_nextstate_from_idle() (siw_qp.c) changes nothing for them; c4iw_convert_state() "
        "(cxgb4 iw_cxgb4.h) maps RESET and INIT to IDLE, c4iw_modify_qp() does nothing for "
        "the same state (irdma_modify_qp() maps RESET to its ERROR state: an irdma difference)"
    ),
    kind=MUST,
    layer=DRIVER,
)
IWARP_FLUSH_ON_ERROR = Rule(
    "iwarp.err.flush",
    "entering ERR (or closing the connection) completes every outstanding WR with "
    "WR_FLUSH_ERR, in posting order per queue",
    iwarp_drivers(
        "siw_qp_nextstate_from_idle() and siw_qp_nextstate_from_rts() (siw_qp.c): "
        "siw_rq_flush()/siw_sq_flush(); c4iw_modify_qp() (cxgb4 qp.c): flush_qp(); "
        "irdma_modify_qp(): irdma_flush_wqes(); RDMAC verbs Error state: outstanding WRs "
        "complete in error"
    ),
    kind=MUST,
    layer=DRIVER,
)
IWARP_MODIFY_NO_EVENT = Rule(
    "iwarp.modify.no_event",
    "a modify of a QP without a connection (IDLE, ERR) raises no async event",
    siw(
        "siw_qp_modify() (siw_qp.c): no siw_qp_event() on a move from IDLE or ERROR (events "
        "come from the connection: siw_qp_rx.c/siw_qp_tx.c, and siw_sq_flush() after RTS)"
    ),
    kind=MUST,
    layer=DRIVER,
)


def iwarp_post_rule(queue: str, state: str, kind: str, what: str, where: str) -> Rule:
    """The rule deciding a post_send/post_recv in one state of an iWARP QP.

    A "must" rule accepts (the driver's); a "may" rule lets the provider refuse, and says
    what becomes of the WR if it accepts.
    """
    verb = "post_send" if queue == "send" else "post_recv"
    return Rule(
        f"iwarp.{verb}.{state}",
        f"{verb} in {state}: {what}",
        iwarp_drivers(where),
        kind=kind,
        layer=DRIVER if kind == MUST else PROVIDER,
    )


IWARP_RECV_IDLE = {
    st: iwarp_post_rule("recv", st, MUST, "accepted and queued (the QP is IDLE)", _IDLE_POST)
    for st in ("RESET", "INIT", "RTR")
}
IWARP_RECV_RTS = iwarp_post_rule("recv", "RTS", MUST, "accepted and queued", _IDLE_POST)
_FLUSHED_IF_ACCEPTED = "refused, or accepted and completed with WR_FLUSH_ERR"
IWARP_RECV_CLOSED = {
    st: iwarp_post_rule(
        "recv",
        st,
        MAY,
        _FLUSHED_IF_ACCEPTED,
        "siw_post_receive() (siw_verbs.c): -ENOTCONN above RTS but in ERROR, where it "
        "flushes the WR at once (ib_drain_rq() in verbs.c relies on that); libcxgb4 "
        "c4iw_post_receive(): -EINVAL once the WQ is in error; irdma accepts",
    )
    for st in ("SQD", "SQE", "ERR")
}
IWARP_SEND_IDLE = {
    st: iwarp_post_rule(
        "send",
        st,
        MAY,
        "refused (siw: ENOTCONN), or accepted and held until a connection brings the QP to "
        "RTS (flushed by a move to ERR); a refused WR must never run",
        "siw_post_send() (siw_verbs.c): -ENOTCONN outside RTS and ERROR (libsiw rings that "
        "doorbell with write(), which returns -1: pyverbs sees no errno); libcxgb4 "
        "c4iw_post_send() and irdma do not check the state",
    )
    for st in ("RESET", "INIT", "RTR")
}
IWARP_SEND_RTS = iwarp_post_rule(
    "send",
    "RTS",
    MUST,
    "accepted and started",
    "siw_post_send() (siw_verbs.c) in SIW_QP_STATE_RTS; libcxgb4 c4iw_post_send(); irdma",
)
IWARP_SEND_CLOSED = {
    st: iwarp_post_rule(
        "send",
        st,
        MAY,
        _FLUSHED_IF_ACCEPTED,
        "siw_post_send() (siw_verbs.c): -ENOTCONN in CLOSING and TERMINATE, in ERROR "
        "siw_sq_flush_wr() completes the WR at once (__ib_drain_sq() in verbs.c relies on "
        "that); libcxgb4 c4iw_post_send(): -EINVAL once the WQ is in error",
    )
    for st in ("SQD", "SQE", "ERR")
}

#: Rules of the InfiniBand variants the iwarp variant never consults (it has its own, or the
#: feature does not exist on iWARP): a report of an iwarp run does not list them.
IWARP_NEVER_CONSULTS = frozenset(
    {
        CUR_STATE_ALLOWED.id,
        CUR_STATE_ASSUMED.id,
        MODIFY_NO_EVENT.id,
        FLUSH_ON_ERROR.id,
        DISCARD_ON_RESET.id,
        QUERY.id,
        XRC_RECV_NO_SQ.id,
        XRC_NO_RQ.id,
        IMM_DELIVERED.id,  # iWARP has no immediate data (RFC 5040)
        # the InfiniBand wire's rules: the iWARP wire (models/iwarp_pair.py) has its own for
        # delivery and its errors (iwarp.send.delivered, iwarp.write.delivered,
        # iwarp.send.no_receive, iwarp.write.bad_stag, iwarp.llp.close), and no RNR or
        # transport retries, COMM_EST, SQD drain (SQD is CLOSING) or SQD hold
        "pair.send.delivered",
        "pair.write.delivered",
        "pair.rc.bad_rkey",
        # the InfiniBand responder's access checks: iwarp.write.access_refused is iWARP's
        # (READs and atomics naming a target are not modelled on iWARP yet)
        "pair.rc.access.mr_rights",
        "pair.rc.access.bounds",
        "pair.rc.access.pd",
        "pair.rc.access.event",
        # the QP's own access flags narrowed while connected: not modelled on iWARP yet
        # (siw's checks of qp_access_flags differ from the InfiniBand responder's)
        "pair.rc.access.qp_rights",
        "pair.uc.access.qp_rights",
        # the requester's own SGE checks (models/local_access.py): not on iWARP yet
        "pair.local.bounds", "pair.local.pd", "pair.rc.local.sink_write",
        "pair.rc.local.recv_write",
        "pair.rc.retry_exc",
        "pair.rc.rnr_retry_exc",
        "pair.rc.rnr_wait",
        "pair.completion_error.no_event",
        "pair.comm_est.first_packet",
        SQD_DRAINED_UNASKED.id,
        SQD_DRAINED_OUTSIDE_SQD.id,
        SQD_DRAINED_ONCE.id,
        SQD_HOLDS_NEW_SENDS.id,
        ERR_ON_RECV_ERROR.id,
        ERR_ON_ASYNC_ERROR.id,
        # a receive too short or naming no MR: the InfiniBand wire's (the iWARP pair model
        # refuses to post one: iWARP's DDP/RDMAP errors for them are not modelled yet)
        "pair.rc.recv_too_short",
        "pair.rc.recv_bad_lkey",
        "pair.unreliable.recv_too_short",  # iWARP has no UC or UD
        "pair.ud.qkey.mismatch",  # nor Q_Keys
        # a receive's byte_len: the iWARP pair model (models/iwarp_pair.py) books none yet
        # (issue 45; docs/fields.md), and iWARP has no WRITE with immediate
        "pair.wc.byte_len",
        "pair.wc.byte_len.write_imm",
    }
)

#: The rules declared above, by name: models/catalog.py lists the model's rules from these
#: (tests/test_model_catalog.py checks that none is left out).
RULES: tuple[Rule, ...] = (
    UNKNOWN_MASK_BITS, STATE_RANGE, CUR_STATE_ALLOWED, CUR_STATE_ASSUMED, MODIFY_NO_EVENT,
    FLUSH_ON_ERROR, DISCARD_ON_RESET, CQ_NO_OVERRUN, SQD_DRAINED_EVENT, SQD_DRAINED_UNASKED,
    SQD_DRAINED_OUTSIDE_SQD, SQD_DRAINED_ONCE, SQD_HOLDS_NEW_SENDS, SQE_ON_SEND_ERROR,
    ERR_ON_SEND_ERROR, ERR_ON_RECV_ERROR, ERR_ON_ASYNC_ERROR, SEND_DONE, RECV_DONE, QUERY,
    DESTROY, XRC_RECV_NO_SQ, XRC_NO_RQ, IWARP_RC_ONLY, IWARP_CUR_STATE, IWARP_IB_ATTRIBUTES,
    IWARP_RATE_LIMIT, IWARP_QUERY, IWARP_IDLE_REPORTED, IWARP_IDLE_KEEPS_WRS,
    IWARP_FLUSH_ON_ERROR, IWARP_MODIFY_NO_EVENT, IWARP_RECV_RTS, IWARP_SEND_RTS,
)
