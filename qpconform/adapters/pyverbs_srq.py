"""A pyverbs QP's SRQ, read back and resized: what create_srq wrote back, query_srq and
modify_srq(IBV_SRQ_MAX_WR) (models/srq_sizes.py judges them; qpconform/engine/srq_sizes.py).

Apart from pyverbs_qp.py, which makes the SRQ and posts to it: these verbs only read or
resize it, and take the QP's SRQ and the init attr create_srq wrote back into.
"""

from __future__ import annotations

from typing import Any

from qpconform.adapters import pyverbs_compat as pc
from qpconform.adapters.pyverbs_sets import QP_DEPTH
from qpconform.engine.device import SrqCreated, VerbResult

#: What create_srq is asked (struct ibv_srq_attr): as deep as a QP's own receive queue.
ASKED = {"max_wr": QP_DEPTH, "max_sge": 1}


def written_back(asked: dict[str, int], srq_init: Any) -> SrqCreated | None:
    """What create_srq wrote back into its SrqInitAttr (None: this pyverbs hides it)."""
    try:
        returned = {"max_wr": int(srq_init.max_wr), "max_sge": int(srq_init.max_sge)}
    except AttributeError:
        return None
    return SrqCreated(asked=dict(asked), returned=returned)


def query(srq: Any, pv: Any) -> dict[str, int] | None:
    """query_srq: max_wr, max_sge and srq_limit (None: refused)."""
    try:
        srq_attr = srq.query()
    except (pv.RDMAError, pv.Error):
        return None
    return {"max_wr": int(srq_attr.max_wr), "max_sge": int(srq_attr.max_sge),
            "srq_limit": int(srq_attr.srq_limit)}


def resize(srq: Any, pv: Any, max_wr: int) -> VerbResult:
    """modify_srq(max_wr, IBV_SRQ_MAX_WR); a refusal is a VerbResult."""
    try:
        srq.modify(pv.srq.SrqAttr(max_wr=max_wr), pc.const("IBV_SRQ_MAX_WR"))
    except (pv.RDMAError, pv.Error) as exc:
        code = pc.error_code(exc)
        return VerbResult(False, code, f"{type(exc).__name__}: {exc}")
    return VerbResult(True)


def can_resize(dev_attr: Any) -> bool:
    """Does query_device say the device resizes SRQs (IBV_DEVICE_SRQ_RESIZE)?"""
    flags = int(getattr(dev_attr, "device_cap_flags", 0))
    return bool(flags & pc.const("IBV_DEVICE_SRQ_RESIZE"))
