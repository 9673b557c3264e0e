"""The operations a send WR carries, and what their completions must say.

A QP type allows some operations and not others (UD: SEND only; UC adds RDMA WRITE; RC
adds RDMA READ and the atomics, which a device may lack: atomic_cap NONE, an optional
feature), each completes with its own opcode, and an operation with immediate
data hands the responder a value its receive completion must carry. The pair model
(models/pair.py) decides what the wire does with each; this module only knows the
operations themselves, and the rules about their completions.
"""

from dataclasses import replace
from enum import StrEnum

from models.enums import QPType, WCOpcode, WCStatus
from models.outcomes import Expectation, ExpectedCompletion
from models.sources import DRIVER, MAY, MUST, PROVIDER, Rule, Source, ibta

_WR_PROCESSING = "ch. 10.8 Work request processing"
_POLL = "ch. 11.4.2.1 Poll for Completion (the work completion's fields)"


class Op(StrEnum):
    """The send operations the pair model knows."""

    SEND = "send"
    RDMA_WRITE = "write"
    SEND_WITH_IMM = "send_imm"
    WRITE_WITH_IMM = "write_imm"
    RDMA_READ = "read"
    COMP_SWAP = "cmp_swap"  # atomic compare-and-swap of 8 aligned bytes
    FETCH_ADD = "fetch_add"  # atomic fetch-and-add of 8 aligned bytes

    @property
    def consumes_recv(self) -> bool:
        """Does it take one of the responder's receive WRs (and so meet an empty RQ)?"""
        return self in (Op.SEND, Op.SEND_WITH_IMM, Op.WRITE_WITH_IMM)

    @property
    def remote(self) -> bool:
        """Does it name the responder's memory by an rkey (and so meet a bad one)?"""
        return self in (Op.RDMA_WRITE, Op.WRITE_WITH_IMM, Op.RDMA_READ, *ATOMICS)

    @property
    def atomic(self) -> bool:
        """Is it an atomic (a device may lack them: an optional feature)?"""
        return self in ATOMICS

    @property
    def carries_imm(self) -> bool:
        """Does the responder's receive completion carry immediate data?"""
        return self in (Op.SEND_WITH_IMM, Op.WRITE_WITH_IMM)

    @property
    def inlinable(self) -> bool:
        """May it be posted with IBV_SEND_INLINE (it carries the requester's data: a READ
        or an atomic carries none out)?"""
        return self in (Op.SEND, Op.SEND_WITH_IMM, Op.RDMA_WRITE, Op.WRITE_WITH_IMM)

    @property
    def fenceable(self) -> bool:
        """May the model post it with IBV_SEND_FENCE? The operations that carry the
        requester's data out (siw refuses a fenced READ: "cannot fence read"; a fenced
        atomic is not modelled)."""
        return self.inlinable

    @property
    def send_opcode(self) -> WCOpcode:
        """The requester's completion opcode."""
        return _SEND_OPCODES[self]

    @property
    def recv_opcode(self) -> WCOpcode | None:
        """The responder's receive completion opcode (None: it consumes no receive)."""
        return _RECV_OPCODES.get(self)


_SEND_OPCODES = {
    Op.SEND: WCOpcode.SEND,
    Op.SEND_WITH_IMM: WCOpcode.SEND,
    Op.RDMA_WRITE: WCOpcode.RDMA_WRITE,
    Op.WRITE_WITH_IMM: WCOpcode.RDMA_WRITE,
    Op.RDMA_READ: WCOpcode.RDMA_READ,
    Op.COMP_SWAP: WCOpcode.COMP_SWAP,
    Op.FETCH_ADD: WCOpcode.FETCH_ADD,
}
_RECV_OPCODES = {
    Op.SEND: WCOpcode.RECV,
    Op.SEND_WITH_IMM: WCOpcode.RECV,
    Op.WRITE_WITH_IMM: WCOpcode.RECV_RDMA_WITH_IMM,
}

#: The operations each connected QP type carries (IBTA ch. 9.8.1, the service types' table
#: of supported operations; Linux: ib_post_send's opcodes per QP type, rxe_opcode.c masks).
ATOMICS = (Op.COMP_SWAP, Op.FETCH_ADD)
OPS_BY_TYPE: dict[QPType, tuple[Op, ...]] = {
    QPType.RC: (
        Op.SEND, Op.RDMA_WRITE, Op.SEND_WITH_IMM, Op.WRITE_WITH_IMM, Op.RDMA_READ, *ATOMICS
    ),
    QPType.UC: (Op.SEND, Op.RDMA_WRITE, Op.SEND_WITH_IMM, Op.WRITE_WITH_IMM),
    QPType.UD: (Op.SEND, Op.SEND_WITH_IMM),
}
#: iWARP (RFC 5040 RDMAP) has SEND, RDMA WRITE and RDMA READ, no immediate data and no
#: atomics (siw: atomic_cap 0).
IWARP_OPS: tuple[Op, ...] = (Op.SEND, Op.RDMA_WRITE, Op.RDMA_READ)


def ops_for(qp_type: QPType, iwarp: bool = False, atomics: bool = True) -> tuple[Op, ...]:
    """The operations a connected QP of `qp_type` carries (without `atomics`: on a device
    whose atomic_cap is NONE)."""
    ops = IWARP_OPS if iwarp else OPS_BY_TYPE.get(QPType(qp_type), ())
    return ops if atomics else tuple(op for op in ops if not op.atomic)


def foreign_ops(qp_type: QPType) -> tuple[Op, ...]:
    """The operations an InfiniBand QP of `qp_type` lacks though another type carries them
    (UC: READ and the atomics; UD: WRITE, WRITE with immediate, READ and the atomics)."""
    mine = OPS_BY_TYPE.get(QPType(qp_type), ())
    return tuple(op for op in OPS_BY_TYPE[QPType.RC] if op not in mine)


#: What a fenced WR carries (its data is the requester's READ sink: the local buffer its
#: RDMA READs and atomics land in), as the adapter names the bytes the responder received:
#: the sink's first bytes (no READ or atomic ran yet), a READ's, an atomic's original value.
SINK_STALE, SINK_READ, SINK_ATOMIC = "stale", "read", "atomic"
#: What a WR not fenced carries (models.access.PAYLOAD), as the adapter names the bytes: an
#: inline SEND's receive must hold them (pair.inline.delivered).
SINK_PAYLOAD = "payload"


def sink_label(op: Op) -> str:
    """What a READ or an atomic leaves in the requester's READ sink."""
    return SINK_ATOMIC if op.atomic else SINK_READ


def imm_for(wr_id: int) -> int:
    """The immediate data a WR carries: derived from its id, so the adapter that posts it
    and the model that expects it agree without passing it around (32 bits, never 0)."""
    return (0x5A000000 | (wr_id & 0xFFFFFF)) & 0xFFFFFFFF


# ---------------------------------------------------------------------------------- rules
COMPLETION_OPCODE = Rule(
    "pair.completion.opcode",
    "a successful completion names the WR's operation: SEND, RDMA_WRITE or RDMA_READ on the "
    "requester; RECV (SEND, SEND_WITH_IMM) or RECV_RDMA_WITH_IMM (RDMA WRITE with immediate) "
    "on the responder",
    ibta(_POLL, "Opcode: the operation of the completed WR (valid when the status is success)"),
    kind=MUST,
    layer=DRIVER,
)
IMM_DELIVERED = Rule(
    "pair.imm.delivered",
    "a SEND or RDMA WRITE with immediate data consumes the responder's oldest receive, whose "
    "completion carries the immediate data (IBV_WC_WITH_IMM); a message without it carries "
    "none",
    ibta(
        "ch. 9.4.1 SEND operation and ch. 9.4.3 RDMA WRITE operation (immediate data); " + _POLL,
        "the immediate data is placed in the receive completion",
    ),
    kind=MUST,
    layer=DRIVER,
)
READ_DELIVERED = Rule(
    "pair.read.delivered",
    "an RC RDMA READ with a valid rkey completes with SUCCESS (RDMA_READ) and consumes no "
    "receive at the responder",
    ibta("ch. 9.4.4 RDMA READ operation"),
    kind=MUST,
    layer=DRIVER,
)
ATOMIC_DELIVERED = Rule(
    "pair.atomic.delivered",
    "an RC atomic (compare-and-swap, fetch-and-add: 8 bytes at an 8-byte aligned address) "
    "with a valid rkey completes with SUCCESS and its opcode (COMP_SWAP, FETCH_ADD) and "
    "consumes no receive at the responder; a device whose atomic_cap is NONE lacks the "
    "feature (ATOMICS)",
    ibta("ch. 9.4.5 ATOMIC operations and ch. 11.2.1.2 Query HCA (atomic capability)"),
    kind=MUST,
    layer=DRIVER,
)
ATOMIC_MISALIGNED_POST = Rule(
    "pair.atomic.misaligned.post",
    "an atomic whose remote address is not 8-byte aligned may be refused at post (EINVAL: "
    "the provider checks it) and then never runs, or be posted (the responder finds it: "
    "pair.rc.atomic_misaligned)",
    Source(
        "rdma-core providers and linux drivers/infiniband",
        "rdma-core providers/rxe/rxe.c validate_send_wr(): remote_addr & 0x7 -> EINVAL (the "
        "ibv_wr_atomic_*() builders do not check); mlx5, bnxt_re, hns providers post it "
        "unchecked (mlx5 qp.c _mlx5_post_send(), set_raddr_seg()); rdma-core tests/"
        "test_atomic.py test_atomic_non_aligned_addr() accepts a post error or an error "
        "completion",
        "IBTA ch. 9.4.5: the virtual address of an atomic is naturally aligned to 8 bytes",
    ),
    kind=MAY,
    layer=PROVIDER,
)
RC_ATOMIC_MISALIGNED = Rule(
    "pair.rc.atomic_misaligned",
    "an RC atomic to a remote address not 8-byte aligned that was posted never executes: "
    "the responder NAKs it (Invalid Request) and enters ERR; whether it raises an affiliated "
    "error event, and which, is the driver's (IBTA's Invalid Request Local Work Queue Error "
    "is QP_REQ_ERR; rxe raises none, bnxt_re 6.7+ QP_ACCESS_ERR, irdma QP_FATAL); the "
    "requester completes it with REM_INV_REQ_ERR and enters ERR",
    Source(
        "IBTA and linux drivers/infiniband",
        "IBTA ch. 9.4.5 ATOMIC operations (naturally aligned) and ch. 9.7.5.2.1 Responder "
        "class C errors (Invalid Request NAK, the QP enters Error); rxe rxe_resp.c "
        "RESPST_ERR_MISALIGNED_ATOMIC -> do_class_ac_error(AETH_NAK_INVALID_REQ, "
        "IB_WC_REM_INV_REQ_ERR), goto_error, rxe_qp_error() (no event); rxe_comp.c "
        "check_ack(): AETH_NAK_INVALID_REQ -> IB_WC_REM_INV_REQ_ERR, COMPST_ERROR; mlx5 cq.c "
        "MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR -> IB_WC_REM_INV_REQ_ERR, qp.c "
        "MLX5_EVENT_TYPE_WQ_INVAL_REQ_ERROR -> IB_EVENT_QP_REQ_ERR; hns the same mapping; "
        "bnxt_re (6.7+) RES_UNALIGN_ATOMIC -> IB_EVENT_QP_ACCESS_ERR; irdma GEN3 "
        "IRDMA_AE_ATOMIC_ALIGNMENT -> QP_EVENT_CATASTROPHIC",
        "Remote Invalid Request Error",
    ),
    kind=MUST,
    layer=DRIVER,
)
UNSIGNALED_SILENT = Rule(
    "pair.unsignaled.silent",
    "a send WR posted without IBV_SEND_SIGNALED (sq_sig_all = 0) that completes successfully "
    "produces no completion; once a later signaled WR of the same send queue completed, it "
    "has completed too, and no completion of it may follow",
    ibta(
        _WR_PROCESSING + ", selective signaling",
        "a completion is generated for an unsignaled WR only if it completes in error",
    ),
    # In error it completes like any WR: its own error (pair.bad_lkey, ...) or a flush
    # (ibta.err.flush: every outstanding WR, signaled or not: rxe do_complete(), siw
    # siw_sq_flush(), bnxt_re, irdma in source; mlx5, hns in hardware); efa refuses
    # unsignaled WRs at post (EINVAL).
    kind=MUST,
    layer=DRIVER,
)
UNSIGNALED_FLUSH_UNRETIRED = Rule(
    "pair.unsignaled.flush_unretired",
    "an unsignaled WR the transport finished, but no later signaled completion has yet "
    "retired, may still be flushed when the QP enters ERR (the consumer cannot tell it "
    "finished): a WR_FLUSH_ERR completion of it is allowed, a SUCCESS one is not",
    ibta(
        _WR_PROCESSING + ", selective signaling",
        "an unsignaled WR is known complete only when a later signaled WR completes",
    ),
    kind=MAY,
    layer=DRIVER,
)

_RDMA_CORE = "rdma-core providers"
INLINE_DELIVERED = Rule(
    "pair.inline.delivered",
    "a SEND, SEND with immediate, RDMA WRITE or WRITE with immediate posted with "
    "IBV_SEND_INLINE and no more bytes than the max_inline_data query_qp reports behaves as "
    "the same WR not inline: the same completions at both ends, the data delivered (a "
    "SEND's receive holds the bytes the WR's SGE named when it was posted)",
    ibta(
        "ch. 11.4.1.1 Post Send Request (inline data: the data is copied at post, the "
        "lkey is not used)",
        "the inline WR is otherwise processed as any send WR",
    ),
    kind=MUST,
    layer=DRIVER,
)
INLINE_OVER_CAP = Rule(
    "pair.inline.over_cap",
    "a send WR posted with IBV_SEND_INLINE and more bytes than the QP's max_inline_data (as "
    "query_qp reports it: the device may round the asked cap up) is refused by post_send "
    "(any errno: EINVAL or ENOMEM); a refused WR never runs and changes nothing",
    Source(
        _RDMA_CORE,
        "every provider checks at post, before the WQE is handed to the device: rxe.c "
        "validate_send_wr() (length > sq->max_inline: EINVAL; the kernel's validate_send_wr() "
        "in rxe_verbs.c for kernel QPs); siw.c push_send_wqe() (bytes > SIW_MAX_INLINE, "
        "the value siw_query_qp() reports: -EINVAL); mlx5 qp.c set_data_inl_seg() "
        "(inl > qp->max_inline_data: ENOMEM); bnxt_re verbs.c bnxt_re_required_slots() "
        "(ilsize > qp->cap.max_inline: -EINVAL); irdma uk.c irdma_uk_inline_send() and "
        "irdma_uk_inline_rdma_write() "
        "(total_size > qp->max_inline_data: EINVAL); efa verbs.c "
        "efa_post_send_validate_wr() (EINVAL); hns hns_roce_u_hw_v2.c set_rc_inl() / "
        "set_ud_inl() (check_inl_data_len(): EINVAL)",
        "a WR the provider refuses is not posted (*bad_wr)",
    ),
    kind=MUST,
    layer=PROVIDER,
)
OP_NOT_OF_TYPE = Rule(
    "pair.op.not_of_type",
    "an operation the QP type does not carry (RDMA READ or an atomic on UC; RDMA WRITE, "
    "READ or an atomic on UD) is either refused by post_send (it never runs, nothing "
    "changes) or accepted and completed by the requester with LOC_QP_OP_ERR, the QP then "
    "leaving RTS as for any send completion error (RC: ERR; UC/UD: SQE); nothing reaches the "
    "peer (no receive consumed, nothing completes there); never SUCCESS",
    Source(
        "linux drivers/infiniband/sw/rxe and rdma-core providers",
        "refused at post: hns hns_roce_u_hw_v2.c check_ud_opcode() (UD: EINVAL), efa "
        "verbs.c efa_post_send_validate_wr() (unsupported opcode: EINVAL); accepted at "
        "post: rdma-core rxe.c post_one_send() (validate_send_wr() has no type check), "
        "then the kernel's rxe_req.c rxe_requester(): next_opcode() < 0 -> "
        "IB_WC_LOC_QP_OP_ERR, rxe_comp.c COMPST_ERROR: do_complete() (6.1; since 6.4 the "
        "requester's own rxe_qp_error() lets the completer flush it with WR_FLUSH_ERR: "
        "quirk rxe.foreign_op_completes_as_flush); "
        "mlx5 qp.c _mlx5_post_send() (UC: 'default: break', UD: no opcode check) and "
        "bnxt_re verbs.c bnxt_re_post_send() build the WQE: the hardware decides; man "
        "ibv_poll_cq(3): IBV_WC_LOC_QP_OP_ERR for 'an opcode which isn't supported by the "
        "transport type of the QP (for example: RDMA Write over a UD QP)'",
        "IBTA ch. 9.8.1 (service types' operations): the operation is not defined there",
    ),
    kind=MAY,
    layer=PROVIDER,
)
READ_DEPTH = Rule(
    "pair.read.initiator_depth",
    "RDMA READs and atomics posted back to back beyond the requester's max_rd_atomic "
    "(initiator depth) wait for the earlier ones to complete: none fails for it, each "
    "completes with SUCCESS, in posting order",
    ibta(
        "ch. 9.4.4 RDMA READ and ch. 11.2.4.2 Modify QP (Initiator Depth: the number of RDMA "
        "READ and atomic operations outstanding at once); rxe rxe_req.c check_init_depth() "
        "(need_rd_atomic: the requester stops until a READ completes), siw siw_qp.c "
        "siw_activate_tx() (ORQ full: orq_fence, the READ waits)",
        "the requester does not issue more outstanding requests than the initiator depth",
    ),
    kind=MUST,
    layer=DRIVER,
)

FENCE_AFTER_READS = Rule(
    "pair.fence.after_reads",
    "a send WR posted with IBV_SEND_FENCE starts only once every RDMA READ and atomic posted "
    "before it on the same send queue has completed: a fenced SEND whose data is the local "
    "buffer an earlier READ (or atomic) lands in delivers the bytes that READ returned (the "
    "atomic's original value), never the buffer's earlier bytes. Without the fence either "
    "the old or the new bytes conform (not checked); a fenced WR completes as the same WR "
    "without the fence",
    Source(
        "IBTA and linux drivers/infiniband, rdma-core providers",
        "IBTA ch. 10.8.3.3 (Fence indicator: the WR is not begun until all prior RDMA READ "
        "and atomic WRs on the send queue have completed); rxe rxe_req.c "
        "rxe_wqe_is_fenced() (6.1.176 and 6.12: a fenced WQE waits while rd_atomic != "
        "max_rd_atomic, i.e. while any READ or atomic is outstanding; rxe_comp.c "
        "do_complete() clears wait_fence and reschedules the requester); siw: libsiw "
        "map_send_flags() and siw_verbs.c siw_post_send() map the flag to "
        "SIW_WQE_READ_FENCE, siw_qp.c siw_activate_tx() holds the WR while the ORQ is not "
        "empty (orq_fence), siw_qp_rx.c siw_check_tx_fence() resumes it once the last READ "
        "response is placed (a fenced READ is refused: 'cannot fence read'); mlx5 qp.c "
        "MLX5_WQE_CTRL_FENCE, mlx4 fence_size, bnxt_re BNXT_RE_WR_FLAGS_UC_FENCE, irdma "
        "info.read_fence, hns RCWQE_FENCE, qedr, ocrdma, cxgb4 (the hardware orders); efa "
        "refuses any send flag but SIGNALED and INLINE (efa_post_send_validate(): it has no "
        "RC QP, so no READ to fence)",
        "a fenced WR waits for the earlier READs and atomics",
    ),
    kind=MUST,
    layer=DRIVER,
)

#: The bytes a WR of the pair adapters carries (an atomic: 8): the model's expected byte_len.
MESSAGE_LEN = 16
#: The bytes a UD receive buffer keeps first for the GRH (man ibv_post_recv(3)).
GRH_LEN = 40
#: ibv_wc.wc_flags bits (enum ibv_wc_flags, verbs.h).
WC_GRH, WC_WITH_IMM, WC_WITH_INV = 1 << 0, 1 << 1, 1 << 3

WC_BYTE_LEN = Rule(
    "pair.wc.byte_len",
    "a successful RC or UC receive completion of a SEND or SEND with immediate reports in "
    "byte_len the length of the message it delivered",
    Source(
        "IBTA and linux drivers/infiniband, rdma-core providers",
        "IBTA " + _POLL + " (the number of bytes transferred); rxe rxe_resp.c do_complete(): "
        "byte_len = the bytes placed in the receive (dma.length - dma.resid); siw siw_qp_rx.c "
        "(bytes placed), libsiw siw.c wc->byte_len = cqe->bytes; mlx5 cq.c handle_responder(), "
        "bnxt_re verbs.c bnxt_re_poll_rcqe(), hns hns_roce_u_hw_v2.c, irdma uverbs.c "
        "irdma_process_cqe(): the byte count of the receive CQE",
        "byte_len: number of bytes transferred",
    ),
    kind=MUST,
    layer=DRIVER,
)
UD_WC_BYTE_LEN = Rule(
    "pair.ud.wc.byte_len",
    "a successful UD receive completion reports in byte_len the message's length plus the 40 "
    "bytes of the GRH area the receive buffer starts with (rxe, mlx5, hns: the GRH is placed "
    "and counted), or the message's length alone (a device that places no GRH: efa sets no "
    "IBV_WC_GRH)",
    Source(
        "linux drivers/infiniband and rdma-core providers",
        "man ibv_post_recv(3): a UD receive's first 40 bytes hold the GRH, present or not; "
        "rxe rxe_resp.c execute(): send_data_in() of the GRH before the payload, do_complete() "
        "byte_len = bytes placed; efa verbs.c efa_process_cqe(): byte_len = the CQE length, "
        "no IBV_WC_GRH",
    ),
    kind=MAY,
    layer=DRIVER,
)
WC_BYTE_LEN_WRITE_IMM = Rule(
    "pair.wc.byte_len.write_imm",
    "a successful receive completion of an RDMA WRITE with immediate (RECV_RDMA_WITH_IMM) "
    "reports in byte_len the length of the write (rxe, efa in source) or 0 (the bytes placed "
    "in the receive's own buffer: none)",
    Source(
        "linux drivers/infiniband and rdma-core providers",
        "rxe rxe_resp.c do_complete(): RXE_IMMDT_MASK and RXE_WRITE_MASK -> byte_len = "
        "qp->resp.length (the write's length); efa verbs.c: IBV_WC_RECV_RDMA_WITH_IMM byte_len "
        "= the write length (length_hi << 16 | length); mlx5, bnxt_re, hns, irdma: the CQE's "
        "byte count (hardware); IBTA " + _POLL + " does not say which",
    ),
    kind=MAY,
    layer=DRIVER,
)
UD_WC_SRC_QP = Rule(
    "pair.ud.wc.src_qp",
    "a successful UD receive completion names in src_qp the QP number of the QP that sent "
    "the message",
    Source(
        "IBTA, libibverbs and rdma-core providers",
        "IBTA " + _POLL + " (source QP, UD only); man ibv_poll_cq(3): src_qp, valid only for "
        "UD QPs; rxe rxe_resp.c do_complete(): src_qp = deth_sqp(pkt); mlx5 cq.c "
        "handle_responder(): src_qp from the CQE's flags_rqpn; bnxt_re, hns, irdma, efa: "
        "the CQE's remote QPN",
        "Source QP number (remote QP number) of completed WR (valid only for UD QPs)",
    ),
    kind=MUST,
    layer=DRIVER,
)


def recv_byte_len(op: Op, ud: bool) -> tuple[frozenset[int], Rule] | None:
    """The byte_len values a successful receive completion of `op` may report (a message
    of MESSAGE_LEN bytes), and the rule that says so; None: `op` consumes no receive."""
    if op is Op.WRITE_WITH_IMM:
        return frozenset({MESSAGE_LEN, 0}), WC_BYTE_LEN_WRITE_IMM
    if op not in (Op.SEND, Op.SEND_WITH_IMM):
        return None
    if ud:
        return frozenset({MESSAGE_LEN + GRH_LEN, MESSAGE_LEN}), UD_WC_BYTE_LEN
    return frozenset({MESSAGE_LEN}), WC_BYTE_LEN


def with_byte_len(exp: Expectation, op: Op, ud: bool) -> Expectation:
    """A receive's expectation whose successful completions must report the byte_len a
    message of `op` allows (recv_byte_len), naming the rule that says so."""
    allowed = recv_byte_len(op, ud)
    if allowed is None or not exp.completions:
        return exp
    done = tuple(replace(c, byte_len=allowed) if c.status == WCStatus.SUCCESS else c
                 for c in exp.completions)
    return replace(exp, completions=done, checked=(*exp.checked, allowed[1]))


def _received(c: ExpectedCompletion) -> bool:
    return c.queue == "recv" and c.status == WCStatus.SUCCESS


def with_src_qp(exp: Expectation, qp_num: int) -> Expectation:
    """A UD receive's expectation whose successful completions must name `qp_num` (the
    sender's QP) in src_qp (UD_WC_SRC_QP)."""
    if not any(_received(c) for c in exp.completions):
        return exp
    done = tuple(replace(c, src_qp=qp_num) if _received(c) else c for c in exp.completions)
    return replace(exp, completions=done, checked=(*exp.checked, UD_WC_SRC_QP))


#: The rules declared above, by name (models/catalog.py lists the model's rules from these).
RULES: tuple[Rule, ...] = (
    COMPLETION_OPCODE, IMM_DELIVERED, READ_DELIVERED, ATOMIC_DELIVERED, UNSIGNALED_SILENT,
    UNSIGNALED_FLUSH_UNRETIRED, INLINE_DELIVERED, INLINE_OVER_CAP, OP_NOT_OF_TYPE, READ_DEPTH,
    FENCE_AFTER_READS, ATOMIC_MISALIGNED_POST, RC_ATOMIC_MISALIGNED, WC_BYTE_LEN,
    UD_WC_BYTE_LEN, WC_BYTE_LEN_WRITE_IMM, UD_WC_SRC_QP,
)
