"""What the Linux uverbs layer does to a modify_qp before any driver sees it.

These are part of the `linux` variant only: `modify_qp()` in
drivers/infiniband/core/uverbs_cmd.c rewrites the mask (XRC bit stripping,
PORT implied by AV), checks the AV port against the QP's port and refuses a
controlled Q_Key (bit 31) from an unprivileged process.
"""

import errno
from collections.abc import Mapping

from models.enums import Attr, QPState, QPType
from models.sources import KERNEL_UVERBS_CMD_C, MUST, UVERBS, Rule, Source

AV_PORT_AT_RTR = Rule(
    "uverbs.modify_qp.av_port",
    "at ->RTR the address vector's port must be the QP's port (set at RESET->INIT)",
    Source(
        KERNEL_UVERBS_CMD_C, "modify_qp(): IB_QP_AV with qp_state RTR, dest.port_num != qp->port"
    ),
    kind=MUST,
    layer=UVERBS,
)
AV_IMPLIES_PORT = Rule(
    "uverbs.modify_qp.av_implies_port",
    "outside ->RTR an AV without PORT makes uverbs add PORT (the AV's port) to the mask",
    Source(KERNEL_UVERBS_CMD_C, "modify_qp(): attr_mask |= IB_QP_PORT; port_num = dest.port_num"),
    kind=MUST,
    layer=UVERBS,
)
PORT_MATCHES_AV = Rule(
    "uverbs.modify_qp.port_matches_av",
    "outside ->RTR, PORT and AV together must name the same port",
    Source(KERNEL_UVERBS_CMD_C, "modify_qp(): port_num != dest.port_num -> -EINVAL"),
    kind=MUST,
    layer=UVERBS,
)
XRC_STRIP = Rule(
    "uverbs.modify_qp.xrc_strip",
    "uverbs silently drops the bits an XRC side cannot use before the table check",
    Source(KERNEL_UVERBS_CMD_C, "modify_qp_mask(): XRC_INI and XRC_TGT masks"),
    kind=MUST,
    layer=UVERBS,
)

QKEY_PRIVILEGED = Rule(
    "uverbs.modify_qp.qkey_privileged",
    "a Q_Key with bit 31 set (a controlled Q_Key) is refused with EPERM unless the process "
    "is privileged (CAP_NET_RAW, or `rdma system set privileged-qkey on`)",
    Source(
        KERNEL_UVERBS_CMD_C,
        "modify_qp(): qkey & IB_QP_SET_QKEY && !rdma_nl_get_privileged_qkey() -> -EPERM "
        "(nldev.c: privileged_qkey || capable(CAP_NET_RAW); in the 6.1.192 and 6.12 sources)",
    ),
    kind=MUST,
    layer=UVERBS,
)

#: The rules declared above, by name: models/catalog.py lists the model's rules from these
#: (tests/test_model_catalog.py checks that none is left out).
RULES: tuple[Rule, ...] = (
    AV_PORT_AT_RTR, AV_IMPLIES_PORT, PORT_MATCHES_AV, XRC_STRIP, QKEY_PRIVILEGED,
)

CONTROLLED_QKEY = 0x80000000  # IB_QP_SET_QKEY (include/rdma/ib_mad.h)

#: The errno of each refusal (EINVAL unless named).
REFUSAL_ERRNOS = {QKEY_PRIVILEGED.id: frozenset({errno.EPERM})}

_XRC_DROPPED = {
    QPType.XRC_SEND: Attr.MAX_DEST_RD_ATOMIC | Attr.MIN_RNR_TIMER,
    QPType.XRC_RECV: Attr.MAX_QP_RD_ATOMIC | Attr.RETRY_CNT | Attr.RNR_RETRY,
}


def rewrite(
    qp_type: QPType,
    attrs: Mapping[str, int],
    mask: Attr,
    qp_port: int | None,
    privileged_qkey: bool = True,
) -> tuple[Attr, dict[str, int], Rule | None, list[Rule]]:
    """The mask and attributes the driver will see, a refusal rule if uverbs refuses, and
    the rules consulted. `privileged_qkey`: may this process set a controlled Q_Key?"""
    attrs = dict(attrs)
    checked: list[Rule] = []
    if Attr.AV in mask:
        to_rtr = Attr.STATE in mask and attrs.get("qp_state") == QPState.RTR
        if to_rtr:
            checked.append(AV_PORT_AT_RTR)
            if qp_port is not None and attrs.get("ah_port_num") != qp_port:
                return mask, attrs, AV_PORT_AT_RTR, checked
        elif Attr.PORT in mask:
            checked.append(PORT_MATCHES_AV)
            if attrs.get("port_num") != attrs.get("ah_port_num"):
                return mask, attrs, PORT_MATCHES_AV, checked
        else:
            checked.append(AV_IMPLIES_PORT)
            mask |= Attr.PORT
            if "ah_port_num" in attrs:
                attrs["port_num"] = attrs["ah_port_num"]
    if Attr.QKEY in mask:
        checked.append(QKEY_PRIVILEGED)
        if attrs.get("qkey", 0) & CONTROLLED_QKEY and not privileged_qkey:
            return mask, attrs, QKEY_PRIVILEGED, checked
    dropped = _XRC_DROPPED.get(qp_type)
    if dropped is not None:
        checked.append(XRC_STRIP)
        mask = Attr(int(mask) & ~int(dropped))
    return mask, attrs, None, checked
