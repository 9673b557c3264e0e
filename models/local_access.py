"""Memory protection at the requester: the checks a device makes of its own SGEs.

A send WR's local data segment names memory through an lkey, and the lkey's MR bounds
it: [addr, addr+length) must lie inside the MR, and the MR must belong to the QP's PD
(IBTA ch. 10.6: the L_Key checks). A WR whose SGE fails either is completed in error by
the requester, Local Protection Error, before any of its data leaves: the peer sees
nothing, the QP leaves RTS as for any send error (RC: ERR; UC/UD: SQE). The pair adapters
point such an SGE into the requester's own target MRs (models/access.py), and an RDMA
WRITE carrying one at the peer's granted window, so the guard bands see that no byte
moved at either end (`window_of`).
"""

from __future__ import annotations

from models.access import ATOMIC_LEN, MID, READ_ONLY, TARGET_LEN, WR_LEN, Window
from models.operations import Op
from models.pair_rules import BAD_LKEY
from models.sources import DRIVER, MUST, Rule, Source

#: The operations that carry a local SGE's data out (a READ's or atomic's SGE is the sink
#: the response lands in, checked when it comes back: SINK_RIGHTS).
LOCAL_OPS = (Op.SEND, Op.SEND_WITH_IMM, Op.RDMA_WRITE, Op.WRITE_WITH_IMM)
#: The operations whose local SGE is a sink the response is written to.
SINK_OPS = (Op.RDMA_READ, Op.COMP_SWAP, Op.FETCH_ADD)
#: A local SGE across its MR's end starts this many bytes before the end.
ACROSS = 8

_CHECKS = "ch. 10.6 Memory protection (the L_Key checks: bounds, PD, access rights)"
_STATUS = "ch. 10.8.3 Completion status (Local Protection Error)"
_DRIVERS = (
    "The check and the status are the hardware's; each driver maps it to "
    "IB_WC_LOC_PROT_ERR: mlx5 cq.c mlx5_handle_error_cqe() MLX5_CQE_SYNDROME_LOCAL_PROT_ERR; "
    "bnxt_re ib_verbs.c __req_to_ib_wc_status() CQ_REQ_STATUS_LOCAL_PROTECTION_ERR; irdma "
    "hw.c irdma_set_flush_fields() IRDMA_AE_AMP_BOUNDS_VIOLATION and IRDMA_AE_AMP_BAD_PD -> "
    "FLUSH_PROT_ERR, verbs.c irdma_flush_err_to_ib_wc_status() -> IB_WC_LOC_PROT_ERR; hns "
    "hns_roce_hw_v2.c HNS_ROCE_CQE_V2_LOCAL_PROT_ERR; efa efa_io_defs.h "
    "EFA_IO_COMP_STATUS_LOCAL_ERROR_INVALID_LKEY ('LKEY not registered or does not match "
    "IOVA') -> IBV_WC_LOC_PROT_ERR (Linux 6.12); man ibv_poll_cq(3) IBV_WC_LOC_PROT_ERR: "
    "'the locally posted Work Request's buffers in the scatter/gather list does not "
    "reference a Memory Region that is valid for the requested operation' (LOC_LEN_ERR "
    "is a message beyond the port's maximum, not an SGE beyond its MR). rxe: "
    "rxe_req.c rxe_requester() maps only -EFAULT from finish_packet()/copy_data() to "
    "LOC_PROT_ERR, else LOC_QP_OP_ERR"
)


def _source(location: str, rxe: str, quote: str) -> Source:
    return Source("IBTA Vol. 1 and linux drivers/infiniband",
                  f"IBTA {location}; {_DRIVERS}; {rxe}", quote)


LOCAL_BOUNDS = Rule(
    "pair.local.bounds",
    "a SEND or RDMA WRITE (with or without immediate) whose local SGE reaches past the end "
    "of the MR its lkey names completes with LOC_PROT_ERR; nothing reaches the peer and no "
    "byte moves (RC then enters ERR, UD/UC enter SQE)",
    _source(f"{_CHECKS} and {_STATUS}",
            "rxe 6.1 rxe_mr.c mr_check_range() -EFAULT (LOC_PROT_ERR); 6.12 -EINVAL "
            "(LOC_QP_OP_ERR), and from 6.4 the failing WQE is flushed (WR_FLUSH_ERR)",
            "the address range of a data segment is not within the memory region"),
    kind=MUST,
    layer=DRIVER,
)
LOCAL_OTHER_PD = Rule(
    "pair.local.pd",
    "a SEND or RDMA WRITE (with or without immediate) whose local SGE names the lkey of an "
    "MR in another PD than the QP's completes with LOC_PROT_ERR; nothing reaches the peer "
    "and no byte moves (RC then enters ERR, UD/UC enter SQE)",
    _source(f"{_CHECKS}, ch. 10.2 protection domains and {_STATUS}",
            "rxe rxe_mr.c lookup_mr(): mr_pd(mr) != pd -> NULL, copy_data() -EINVAL "
            "(LOC_QP_OP_ERR in 6.1; WR_FLUSH_ERR from 6.4)",
            "the PD of the memory region does not match the PD of the QP"),
    kind=MUST,
    layer=DRIVER,
)

SINK_RIGHTS = Rule(
    "pair.rc.local.sink_write",
    "an RC RDMA READ or atomic whose local SGE (the sink its response is written to) lies "
    "in an MR registered without LOCAL_WRITE goes out and is answered (the responder stays "
    "in RTS), but the response is not placed: the requester completes it with "
    "LOC_PROT_ERR and enters ERR; no byte of the sink's MR changes",
    _source(f"{_CHECKS} (LOCAL_WRITE: the HCA may write the region), ch. 9.7.5.1.x "
            f"requester class B/C errors and {_STATUS}",
            "rxe rxe_comp.c do_read() and do_atomic(): copy_data(qp->pd, "
            "IB_ACCESS_LOCAL_WRITE, ...) fails (lookup_mr(): access & mr->access != access) "
            "-> wqe->status = IB_WC_LOC_PROT_ERR, COMPST_ERROR: do_complete() then "
            "rxe_qp_error() (the same in 6.1 and 6.12)",
            "the memory region does not grant Local Write access for the data written"),
    kind=MUST,
    layer=DRIVER,
)

RECV_RIGHTS = Rule(
    "pair.rc.local.recv_write",
    "an RC SEND (or SEND with immediate) meets a receive whose SGE lies in an MR registered "
    "without LOCAL_WRITE: post_recv accepted it (the rights are checked when data is "
    "placed); the receive completes with LOC_PROT_ERR and the responder enters ERR, "
    "flushing the rest; the responder NAKs it (Remote Operational Error): the requester "
    "completes it with REM_OP_ERR and enters ERR; no byte of the receive's MR changes. As "
    "pair.rc.recv_bad_lkey: an L_Key that does not permit the write is an error local to "
    "the responder",
    Source(
        "IBTA Vol. 1 and linux drivers/infiniband",
        f"IBTA {_CHECKS} and ch. 9.7.5.2 Responder error behavior (an error local to the "
        "responder: Remote Operational Error NAK, the receive WQE completes in error, the "
        "QP enters Error), ch. 10.8.3; man ibv_poll_cq(3) IBV_WC_LOC_PROT_ERR ('does not "
        "reference a Memory Region that is valid for the requested operation'). The NAK "
        "and the receive's status are the hardware's (mlx5 MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, "
        "bnxt_re CQ_RES_RC_STATUS_LOCAL_PROTECTION_ERR, hns HNS_ROCE_CQE_V2_LOCAL_PROT_ERR "
        "-> IB_WC_LOC_PROT_ERR); rxe rxe_resp.c send_data_in(): copy_data(qp->pd, "
        "IB_ACCESS_LOCAL_WRITE, ...) -> lookup_mr() NULL -> -EINVAL -> "
        "RESPST_ERR_MALFORMED_WQE -> do_class_ac_error(AETH_NAK_REM_OP_ERR, "
        "IB_WC_LOC_QP_OP_ERR): the receive LOC_QP_OP_ERR, as its bad-lkey receive",
        "the memory region does not grant Local Write access for the data written",
    ),
    kind=MUST,
    layer=DRIVER,
)

RULES: tuple[Rule, ...] = (LOCAL_BOUNDS, LOCAL_OTHER_PD, SINK_RIGHTS, RECV_RIGHTS)


def local_ops(fault: str) -> tuple[Op, ...]:
    """The operations a local SGE fault is planted on."""
    return SINK_OPS if fault == "sink_read_only" else LOCAL_OPS


def window_of(op: Op, fault: str) -> Window:
    """Where in the requester's own target MRs a local fault (models.wire.Fault's value)
    of a WR of `op` points its SGE: "local_past_end" across the end of the "full" target,
    "local_other_pd" mid-way into the target of the second PD, "sink_read_only" mid-way
    into the target without LOCAL_WRITE (an atomic's 8 bytes)."""
    if fault == "local_past_end":
        return Window("full", TARGET_LEN - ACROSS, WR_LEN)
    if fault == "local_other_pd":
        return Window("other_pd", MID, WR_LEN)
    if fault == "sink_read_only":
        return Window(READ_ONLY, MID, ATOMIC_LEN if op.atomic else WR_LEN)
    raise ValueError(f"{fault!r} names no local window")


def rule_of(fault: str) -> Rule:
    """The rule a WR with a local fault (models.wire.Fault.local or local_sge) is judged by."""
    return {"bad_lkey": BAD_LKEY, "local_past_end": LOCAL_BOUNDS,
            "local_other_pd": LOCAL_OTHER_PD, "sink_read_only": SINK_RIGHTS}[fault]
