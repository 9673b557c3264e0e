"""The operations a send WR carries, and what their completions must say.

A QP type allows some operations and not others (UD: SEND only; UC adds RDMA WRITE; RC
adds RDMA READ and the atomics, which a device may lack: atomic_cap NONE, an optional
feature), each completes with its own opcode, and an operation with immediate
data hands the responder a value its receive completion must carry. The pair model
(models/pair.py) decides what the wire does with each; this module only knows the
operations themselves, and the rules about their completions.
"""

from enum import StrEnum

from models.enums import QPType, WCOpcode
from models.sources import DRIVER, MAY, MUST, Rule, ibta

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

#: The rules declared above, by name (models/catalog.py lists the model's rules from these).
RULES: tuple[Rule, ...] = (
    COMPLETION_OPCODE, IMM_DELIVERED, READ_DELIVERED, ATOMIC_DELIVERED, UNSIGNALED_SILENT,
    UNSIGNALED_FLUSH_UNRETIRED,
)
