"""The plain loop: modify_qp calls per second on one QP, nothing compared or logged, the
ceiling the device itself allows. The throughput line of a run and `qpconform bench` put
the checked machine's rate beside it; the guest's executor serves it to a host engine.
"""

from __future__ import annotations

import time

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
