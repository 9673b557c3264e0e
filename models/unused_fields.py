"""What a send WR's opcode does not use must not matter.

ibv_post_send(qp, wr, bad_wr) hands over a whole `struct ibv_send_wr`; which of its fields
are input depends on the opcode and the QP type (IBTA Vol 1 ch. 11.4.1.1 Post Send
Request: the input modifiers listed per operation). `imm_data` is input only to the
operations with immediate data; the union `wr` holds `rdma` (remote_addr, rkey: RDMA
WRITE, WRITE with immediate, READ), `atomic` (remote_addr, compare_add, swap, rkey: the
atomics) or `ud` (ah, remote_qpn, remote_qkey: a SEND on a UD QP); a SEND on a connected QP
uses none of it. The completion statuses, the bytes and immediate data delivered and the
QP's state must be the same whatever the unused fields hold: `UNUSED_FIELDS`.

The union's members overlap: a fill writes the union through its `atomic` member (every
byte of it), then the opcode's own member is set on top, so what the opcode uses holds its
value and the bytes it does not use keep the fill's (`atomic.swap` and `atomic.rkey` under
an `rdma` or `ud` member; all of it under a connected SEND, where `ud.ah` then holds the
fill's remote_addr: a pointer the provider must not follow).
"""

from __future__ import annotations

from models.enums import QPType
from models.operations import Op
from models.sources import LIBIBVERBS, MUST, PROVIDER, Rule, Source

UNUSED_FIELDS = Rule(
    "ibta.post_send.unused_fields_ignored",
    "the outcome of post_send (completion statuses, opcodes, bytes and immediate data "
    "delivered, the QP's state) does not depend on the ibv_send_wr fields its opcode does "
    "not use (imm_data without immediate, wr.rdma/wr.atomic of a SEND, wr.atomic of a "
    "WRITE or READ, wr.ud on a connected QP)",
    Source(
        LIBIBVERBS,
        "IBTA Vol 1 ch. 11.4.1.1 Post Send Request (the input modifiers of each "
        "operation); verbs.h struct ibv_send_wr (imm_data; the union wr of rdma, atomic "
        "and ud); man ibv_post_send(3). Providers and kernel drivers switch on the opcode "
        "(and the QP type) before reading them. Read: irdma_post_send() (kernel and "
        "libirdma) sets imm_data_valid only under the *_WITH_IMM opcodes and reads "
        "rdma_wr()/atomic_wr() under theirs; bnxt_re's send WQE builder reads ex.imm_data "
        "only under IB_WR_SEND_WITH_IMM and wr.ud only on a UD/GSI QP; hns send_ieth() "
        "returns imm_data only for *_WITH_IMM and set_rc_wqe() reads rdma_wr() under the "
        "RDMA opcodes. mlx5 (send_ieth(), its segments per opcode) and efa (UD/SRD SENDs, "
        "wr.ud their own) follow the same switch; rxe's provider copies rdma/atomic/ud per "
        "opcode and its requester adds the immediate only under RXE_IMMDT_MASK: must",
        "opcode: the operation; the other fields are its modifiers",
    ),
    kind=MUST,
    layer=PROVIDER,
)
RULES: tuple[Rule, ...] = (UNUSED_FIELDS,)

#: The fields a fill values: imm_data, then the union written through its atomic member.
IMM = "imm_data"
UNION: tuple[str, ...] = ("remote_addr", "rkey", "compare_add", "swap")
FIELDS: tuple[str, ...] = (IMM, *UNION)


def member(op: Op, qp_type: QPType) -> str | None:
    """The member of the union `wr` that `op` uses on a QP of `qp_type` (None: none)."""
    if op.atomic:
        return "atomic"
    if op.remote:
        return "rdma"
    return "ud" if QPType(qp_type) is QPType.UD else None


def unused(op: Op, qp_type: QPType) -> tuple[str, ...]:
    """The FIELDS a fill values for `op` on `qp_type`: imm_data unless the operation carries
    it, and the union unless the atomic member (all of it) is the operation's own."""
    out = () if op.carries_imm else (IMM,)
    return out if member(op, qp_type) == "atomic" else (*out, *UNION)
