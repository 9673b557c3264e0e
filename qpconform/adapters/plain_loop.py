"""The plain loop: modify_qp calls per second on one QP, nothing compared or logged, the
ceiling the device itself allows. The throughput line of a run and `qpconform bench` put
the checked machine's rate beside it; the guest's executor serves it to a host engine.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from models.enums import Attr, QPState, QPType
from qpconform.adapters.pyverbs_device import open_device
from qpconform.adapters.pyverbs_qp import DEFAULT_QKEY
from qpconform.engine.device import UnsupportedQPType

#: RESET->INIT masks of the plain loop: UD where the device has it, else RC (iWARP: RC only).
_TO_INIT = {
    QPType.UD: Attr.STATE | Attr.PKEY_INDEX | Attr.PORT | Attr.QKEY,
    QPType.RC: Attr.STATE | Attr.PKEY_INDEX | Attr.PORT | Attr.ACCESS_FLAGS,
}


def modify_rate(device_name: str, seconds: float = 5.0, port: int | None = None) -> float:
    """modify_qp calls per second (each RESET->INIT or INIT->RESET counts as one), on a
    device context of its own."""
    device = open_device(device_name, port)
    try:
        qp_type = next((t for t in _TO_INIT if t in device.supported_qp_types()), None)
        if qp_type is None:
            raise UnsupportedQPType(f"{device_name}: the plain modify loop needs a UD or RC QP")
        qp = device.create_qp(qp_type)
        qp_mod = device.pv.qp
        to_init = qp_mod.QPAttr(qp_state=int(QPState.INIT), port_num=device.port)
        to_init.pkey_index = 0
        to_init.qkey = DEFAULT_QKEY
        to_init.qp_access_flags = 0
        to_reset = qp_mod.QPAttr(qp_state=int(QPState.RESET))
        calls = 0
        start = time.monotonic()
        deadline = start + seconds
        while time.monotonic() < deadline:
            qp.qp.modify(to_init, int(_TO_INIT[qp_type]))
            qp.qp.modify(to_reset, int(Attr.STATE))
            calls += 2
        return calls / (time.monotonic() - start)
    finally:
        device.close()


def pyverbs_call_costs(device: str, seconds: float, mask: int, depth: int) -> dict[str, float]:
    """Microseconds a call of modify, query, poll and create+destroy, straight through
    pyverbs on one RC QP: the loops of qpconform/vm/verbs_cost.c, for its C-against-pyverbs
    table (the guest runs both)."""
    import pyverbs.enums as e
    from pyverbs.cq import CQ
    from pyverbs.device import Context
    from pyverbs.pd import PD
    from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

    with Context(name=device) as ctx, PD(ctx) as pd, CQ(ctx, depth) as cq:
        cap = QPCap(max_send_wr=depth, max_recv_wr=depth, max_send_sge=1, max_recv_sge=1)
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)
        to_init = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1)
        to_init.pkey_index, to_init.qp_access_flags = 0, 0
        to_reset = QPAttr(qp_state=e.IBV_QPS_RESET)
        init_mask = (e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT
                     | e.IBV_QP_ACCESS_FLAGS)
        with QP(pd, init) as qp:
            def modify() -> int:
                qp.modify(to_init, init_mask)
                qp.modify(to_reset, e.IBV_QP_STATE)
                return 2

            def create_destroy() -> int:
                QP(pd, init).close()
                return 1

            loops = {"modify": modify, "query": lambda: qp.query(mask) and 1,
                     "poll": lambda: cq.poll(num_entries=depth) and 1,
                     "create_destroy": create_destroy}
            return {verb: _timed(loop, seconds) for verb, loop in loops.items()}


def _timed(loop: Callable[[], int], seconds: float) -> float:
    calls, start = 0, time.monotonic()
    while time.monotonic() - start < seconds:
        calls += loop()
    return 1e6 * (time.monotonic() - start) / calls
