"""Several QPs on one CQ: each completion names its QP, a flush or a RESET is one QP's.

A CQ may serve many QPs (ibv_create_qp takes any send_cq and recv_cq of the context): the
consumer tells their completions apart by `wc.qp_num`. Entering ERR flushes the WRs of the
QP that entered it, never those of another QP completing on the same CQ; a modify to
RESET may clean the CQ of that QP's own unpolled completions (the providers that clean at
all clean by QP number), never of another QP's.

What is left unjudged: whether a QP's *own* unpolled completions survive its RESET. mlx5,
mlx4, mthca and hns (rdma-core providers, and the kernel for kernel QPs) remove them
(`mlx5_cq_clean(cq, qp_num, srq)`); rxe, siw and efa leave the CQ alone; irdma and bnxt_re
clean only when the QP is destroyed. The harness excuses such completions (they may come
or not) instead of naming a rule for them.

In the harness a pair end may get a *bystander* (PairDevice.shared_cq_sides): a QP of the
same type in the end's own context and PD, on the end's send and receive CQs, moved by
modify only (no SRQ, no traffic), so the end's async events stay attributable by the
context's fd. It holds receives (and, in ERR, flushed sends), so the shared CQs carry its
entries next to the end's; the engine routes each completion by qp_num
(qpconform/engine/shared_cq.py).
"""

from models.sources import DRIVER, MUST, Rule, Source, ibta

_POLL = "ch. 11.4.2.1 Poll for Completion (the work completion's Local QP Number)"
_ERR = "ch. 10.3.1 QP state transitions, Error state"

QP_NUM = Rule(
    "cq.completion.qp_num",
    "every completion names, in wc.qp_num, the QP whose WR it completes: on a CQ several "
    "QPs share, the end's completions carry the end's number and another QP's carry that "
    "QP's, never each other's",
    Source(
        "IBTA Vol. 1 " + _POLL + "; man ibv_poll_cq(3); linux drivers/infiniband/sw/rxe/"
        "rxe_comp.c, rxe_resp.c; drivers/infiniband/sw/siw/siw_qp.c; rdma-core providers/"
        "mlx5/cq.c, providers/efa/verbs.c",
        "rxe make_send_cqe() and do_complete(): uwc->qp_num = qp->ibqp.qp_num; siw "
        "siw_sqe_complete()/siw_rqe_complete(): cqe->qp_id = qp_id(qp); mlx5 "
        "mlx5_parse_cqe(): the QP looked up by the CQE's qpn; efa: wc->qp_num = "
        "cqe->qp_num; bnxt_re, irdma and hns the same from the CQE's QP handle or number",
        "qp_num: local QP number of completed WR",
    ),
    kind=MUST,
    layer=DRIVER,
)
FLUSH_OWN_ONLY = Rule(
    "cq.shared.flush_own_only",
    "a QP that enters ERR flushes its own outstanding WRs only: another QP completing on "
    "the same CQ keeps its WRs posted (no completion of them, its state unchanged)",
    ibta(_ERR, "the WQEs of the QP in the Error state are completed with flush error"),
    # rxe: flush_send_queue()/flush_recv_queue() walk the QP's own queues; siw:
    # siw_sq_flush()/siw_rq_flush() the same; mlx5, hns, irdma: the hardware flushes the
    # QP's WQEs (the CQEs carry its qpn); bnxt_re: bnxt_qplib_add_flush_qp() queues that QP
    # on the CQ's flush lists; efa flushes nothing (its quirk, not this rule's).
    kind=MUST,
    layer=DRIVER,
)
RESET_KEEPS_OTHERS = Rule(
    "cq.shared.reset_keeps_others",
    "a modify of one QP to RESET removes no other QP's completions already on a CQ they "
    "share: they are polled after it, as they were (the QP's own may go: unjudged)",
    Source(
        "rdma-core providers/mlx5/verbs.c, providers/mlx4/verbs.c, providers/hns/"
        "hns_roce_u_hw_v2.c; linux drivers/infiniband/hw/mlx5/qp.c, hw/hns/hns_roce_hw_v2.c, "
        "hw/irdma/verbs.c",
        "mlx5_modify_qp(): on ->RESET mlx5_cq_clean(recv_cq, qp_num, srq) and "
        "mlx5_cq_clean(send_cq, qp_num, NULL) (kernel QPs: __mlx5_ib_cq_clean(cq, qpn)); "
        "mlx4, mthca and hns likewise by qp_num; irdma_clean_cqes() and bnxt_re_cleanup_cq() "
        "by QP, at destroy only; rxe, siw and efa never clean a CQ on RESET",
        "a CQ is not one QP's: RESET discards that QP's work, not other QPs' results",
    ),
    kind=MUST,
    layer=DRIVER,
)

#: The rules declared above, by name (models/catalog.py lists the model's rules from these).
RULES: tuple[Rule, ...] = (QP_NUM, FLUSH_OWN_ONLY, RESET_KEEPS_OTHERS)
