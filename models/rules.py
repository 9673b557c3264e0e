"""Named rules of the model beyond the transition table and the value ranges."""

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
