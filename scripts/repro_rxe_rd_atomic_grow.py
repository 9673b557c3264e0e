"""rxe on Linux 6.1 corrupts memory when a modify grows max_dest_rd_atomic: a reproducer.

    qpconform vm [--release trixie] -- python3 scripts/repro_rxe_rd_atomic_grow.py [GROW] [QPS]

Each of QPS RC QPs (default 400) is brought to RTR with max_dest_rd_atomic 1, then RTS, SQD,
and SQD->SQD with max_dest_rd_atomic GROW (default 16). rxe_qp_from_attr() on 6.1 sets the
new value before free_rd_atomic_resources() walks that many entries of the old array and
clears each: past its end. Measured (docs/measured.md, "Every suite on the host"): bookworm
(6.1) GROW 16, the guest kernel oopses within the first QPs; GROW 1, or trixie (6.12, which
frees first), all QPs pass.
"""

from __future__ import annotations

import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

TO_INIT = e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS
TO_RTR = (e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN
          | e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
TO_RTS = (e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY
          | e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC)


def one_qp(pd: PD, cq: CQ, gid: object, grow: int) -> None:
    cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
    try:
        attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1)
        attr.pkey_index, attr.qp_access_flags = 0, 7
        qp.modify(attr, TO_INIT)
        attr = QPAttr(qp_state=e.IBV_QPS_RTR)
        attr.ah_attr = AHAttr(gr=GlobalRoute(dgid=gid, sgid_index=0), is_global=1, port_num=1)
        attr.path_mtu, attr.dest_qp_num, attr.rq_psn = 3, qp.qp_num, 0
        attr.max_dest_rd_atomic, attr.min_rnr_timer = 1, 12
        qp.modify(attr, TO_RTR)
        attr = QPAttr(qp_state=e.IBV_QPS_RTS)
        attr.timeout, attr.retry_cnt, attr.rnr_retry, attr.sq_psn = 14, 7, 7, 0
        attr.max_rd_atomic = 1
        qp.modify(attr, TO_RTS)
        qp.modify(QPAttr(qp_state=e.IBV_QPS_SQD), e.IBV_QP_STATE)
        time.sleep(0.01)  # the (empty) drain ends
        attr = QPAttr(qp_state=e.IBV_QPS_SQD)
        attr.max_dest_rd_atomic = grow
        qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_MAX_DEST_RD_ATOMIC)
    finally:
        qp.close()


def main() -> int:
    grow = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    qps = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    with Context(name="rxe0") as ctx, PD(ctx) as pd, CQ(ctx, 16) as cq:
        gid = ctx.query_gid(1, 0)
        for _ in range(qps):
            one_qp(pd, cq, gid, grow)
    print(f"{qps} QPs grew max_dest_rd_atomic 1 -> {grow}: no crash", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
