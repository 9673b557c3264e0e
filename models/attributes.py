"""Attribute value rules: the ranges a device must enforce on modify_qp.

Values are given in a flat dict whose keys are pyverbs QPAttr field names
(`timeout`, `port_num`, ...) plus `ah_port_num` and `ah_sgid_index` for the
address vector. Ranges come from the field widths of the IBTA and the checks
of the Linux uverbs layer; device limits come from `DeviceCaps`.
"""

import errno
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from models.enums import MTU, AccessFlag, Attr
from models.sources import (
    CORE,
    DRIVER,
    KERNEL_UVERBS_CMD_C,
    KERNEL_VERBS_C,
    MUST,
    SPEC,
    UVERBS,
    Rule,
    Source,
    ibta,
)

PSN_LIMIT = 1 << 24  # PSNs and QP numbers are 24-bit fields of the BTH


@dataclass(frozen=True)
class DeviceCaps:
    """The device limits the value rules depend on (from query_device/query_port)."""

    phys_port_cnt: int = 1
    pkey_tbl_len: int = 1
    gid_tbl_len: int = 16
    max_mtu: MTU = MTU.MTU_4096
    max_qp_rd_atom: int = 16  # responder resources: limit of max_dest_rd_atomic
    max_qp_init_rd_atom: int = 16  # initiator depth: limit of max_rd_atomic
    link_layer: str = "ethernet"  # "ethernet" (RoCE) or "infiniband"


@dataclass(frozen=True)
class ValueRule:
    """One value check: which mask bit it applies to, the rule, and the test."""

    bit: Attr
    rule: Rule
    valid: Callable[[Mapping[str, int], DeviceCaps], bool]
    variants: frozenset[str] = frozenset({"linux", "ibta"})


def _uverbs(where: str) -> Source:
    return Source(KERNEL_UVERBS_CMD_C, where)


def _r(rule_id: str, summary: str, source: Source, kind: str, layer: str) -> Rule:
    return Rule(f"attr.{rule_id}", summary, source, kind=kind, layer=layer)


_MODIFY = "ch. 11.2.5.2 Modify Queue Pair (input modifiers)"
_QP_ACCESS = int(
    AccessFlag.LOCAL_WRITE
    | AccessFlag.REMOTE_WRITE
    | AccessFlag.REMOTE_READ
    | AccessFlag.REMOTE_ATOMIC
)

_IBTA_ONLY = frozenset({"ibta"})
_LINUX_ONLY = frozenset({"linux"})

VALUE_RULES: tuple[ValueRule, ...] = (
    ValueRule(
        Attr.PORT,
        _r(
            "port_num.range",
            "port_num must be a port of the device (1..phys_port_cnt)",
            _uverbs("modify_qp(): rdma_is_port_valid(port_num) else -EINVAL"),
            MUST,
            UVERBS,
        ),
        lambda v, c: 1 <= v["port_num"] <= c.phys_port_cnt,
    ),
    ValueRule(
        Attr.AV,
        _r(
            "ah_port_num.range",
            "the address vector's port must be a port of the device",
            _uverbs("modify_qp(): rdma_is_port_valid(dest.port_num) else -EINVAL"),
            MUST,
            UVERBS,
        ),
        lambda v, c: 1 <= v["ah_port_num"] <= c.phys_port_cnt,
    ),
    ValueRule(
        Attr.AV,
        _r(
            "ah_sgid_index.range",
            "the address vector's source GID index must be in the GID table",
            ibta(_MODIFY, "Primary path address vector: SGID index into the port's GID table"),
            MUST,
            CORE,
        ),
        lambda v, c: 0 <= v["ah_sgid_index"] < c.gid_tbl_len,
    ),
    ValueRule(
        Attr.PKEY_INDEX,
        _r(
            "pkey_index.range",
            "pkey_index must be an index into the port's P_Key table",
            ibta(_MODIFY, "P_Key index: index into the port's P_Key table"),
            MUST,
            DRIVER,
        ),
        lambda v, c: 0 <= v["pkey_index"] < c.pkey_tbl_len,
    ),
    ValueRule(
        Attr.PATH_MTU,
        _r(
            "path_mtu.range",
            "path_mtu must be an ibv_mtu value not above the port's max_mtu",
            ibta(_MODIFY, "Path MTU: shall not exceed the MTU capability of the port"),
            MUST,
            DRIVER,
        ),
        lambda v, c: MTU.MTU_256 <= v["path_mtu"] <= c.max_mtu,
    ),
    ValueRule(
        Attr.TIMEOUT,
        _r(
            "timeout.range",
            "timeout (local ACK timeout exponent) is a 5-bit value: 0..31",
            ibta(_MODIFY, "Local ACK Timeout: 5 bits, 4.096 us * 2^timeout"),
            MUST,
            DRIVER,
        ),
        lambda v, c: 0 <= v["timeout"] <= 31,
    ),
    ValueRule(
        Attr.RETRY_CNT,
        _r(
            "retry_cnt.range",
            "retry_cnt is a 3-bit value: 0..7",
            ibta(_MODIFY, "Retry count: 3 bits"),
            MUST,
            DRIVER,
        ),
        lambda v, c: 0 <= v["retry_cnt"] <= 7,
    ),
    ValueRule(
        Attr.RNR_RETRY,
        _r(
            "rnr_retry.range",
            "rnr_retry is a 3-bit value: 0..7 (7 = infinite)",
            ibta(_MODIFY, "RNR retry count: 3 bits, 7 means infinite"),
            MUST,
            DRIVER,
        ),
        lambda v, c: 0 <= v["rnr_retry"] <= 7,
    ),
    ValueRule(
        Attr.MIN_RNR_TIMER,
        _r(
            "min_rnr_timer.range",
            "min_rnr_timer is a 5-bit encoded value: 0..31",
            ibta(_MODIFY, "Minimum RNR NAK timer field value: 5 bits (Table 45 encoding)"),
            MUST,
            DRIVER,
        ),
        lambda v, c: 0 <= v["min_rnr_timer"] <= 31,
    ),
    ValueRule(
        Attr.SQ_PSN,
        _r(
            "sq_psn.range",
            "sq_psn is a 24-bit PSN",
            ibta("ch. 9.2 Base Transport Header: PSN is 24 bits", "PSN: 24 bits"),
            MUST,
            SPEC,
        ),
        lambda v, c: 0 <= v["sq_psn"] < PSN_LIMIT,
        _IBTA_ONLY,
    ),
    ValueRule(
        Attr.RQ_PSN,
        _r(
            "rq_psn.range",
            "rq_psn is a 24-bit PSN",
            ibta("ch. 9.2 Base Transport Header: PSN is 24 bits", "PSN: 24 bits"),
            MUST,
            SPEC,
        ),
        lambda v, c: 0 <= v["rq_psn"] < PSN_LIMIT,
        _IBTA_ONLY,
    ),
    ValueRule(
        Attr.DEST_QPN,
        _r(
            "dest_qp_num.range",
            "dest_qp_num is a 24-bit QP number",
            ibta("ch. 9.2 Base Transport Header: DestQP is 24 bits", "DestQP: 24 bits"),
            MUST,
            DRIVER,
        ),
        lambda v, c: 0 <= v["dest_qp_num"] < PSN_LIMIT,
    ),
    ValueRule(
        Attr.MAX_QP_RD_ATOMIC,
        _r(
            "max_rd_atomic.range",
            "max_rd_atomic must not exceed the device's max_qp_init_rd_atom",
            ibta(
                _MODIFY,
                "Number of outstanding RDMA Read/Atomic as initiator: not above the HCA's limit",
            ),
            MUST,
            DRIVER,
        ),
        lambda v, c: 0 <= v["max_rd_atomic"] <= c.max_qp_init_rd_atom,
    ),
    ValueRule(
        Attr.MAX_DEST_RD_ATOMIC,
        _r(
            "max_dest_rd_atomic.range",
            "max_dest_rd_atomic must not exceed the device's max_qp_rd_atom",
            ibta(_MODIFY, "Responder resources for RDMA Read/Atomic: not above the HCA's limit"),
            MUST,
            DRIVER,
        ),
        lambda v, c: 0 <= v["max_dest_rd_atomic"] <= c.max_qp_rd_atom,
    ),
    ValueRule(
        Attr.ACCESS_FLAGS,
        _r(
            "qp_access_flags.defined",
            "qp_access_flags holds only defined access bits",
            ibta(_MODIFY, "Enable RDMA Read / RDMA Write / Atomic operations"),
            MUST,
            DRIVER,
        ),
        lambda v, c: v["qp_access_flags"] & ~_QP_ACCESS == 0,
    ),
    ValueRule(
        Attr.ALT_PATH,
        _r(
            "alt_port_num.range",
            "the alternate path's port must be a port of the device",
            _uverbs("modify_qp(): IB_QP_ALT_PATH, !rdma_is_port_valid(alt_port_num) -> -EINVAL"),
            MUST,
            UVERBS,
        ),
        lambda v, c: 1 <= v["alt_port_num"] <= c.phys_port_cnt,
    ),
    ValueRule(
        Attr.ALT_PATH,
        _r(
            "alt_path.roce",
            "alternate paths (APM) are refused on RoCE ports",
            Source(KERNEL_VERBS_C, "_ib_modify_qp(): 'Ban them in roce mode' -> -EINVAL"),
            MUST,
            CORE,
        ),
        lambda v, c: c.link_layer != "ethernet",
        _LINUX_ONLY,
    ),
)

#: Linux masks PSNs to 24 bits instead of refusing them (IB and RoCE ports).
PSN_MASKED = Rule(
    "attr.psn.masked",
    "sq_psn/rq_psn above 24 bits are masked to 24 bits (with a kernel warning), not refused",
    Source(
        KERNEL_VERBS_C, "_ib_modify_qp(): IB_QP_RQ_PSN/IB_QP_SQ_PSN & ~0xffffff -> dev_warn, mask"
    ),
    kind=MUST,
    layer=CORE,
)

#: Value errors are reported as EINVAL by the uverbs layer and the drivers.
VALUE_ERRNOS = frozenset({errno.EINVAL})


def value_violations(
    attrs: Mapping[str, int], mask: Attr, caps: DeviceCaps, variant: str = "linux"
) -> list[Rule]:
    """The value rules broken by the attributes a mask selects (fields absent: not checked)."""
    broken = []
    for vr in VALUE_RULES:
        if not mask & vr.bit or variant not in vr.variants:
            continue
        try:
            ok = vr.valid(attrs, caps)
        except KeyError:
            continue  # the field was not given: nothing to check
        if not ok:
            broken.append(vr.rule)
    return broken


def rules_for(mask: Attr, variant: str = "linux") -> list[Rule]:
    """Every value rule that a mask brings into play (for coverage)."""
    found = [vr.rule for vr in VALUE_RULES if mask & vr.bit and variant in vr.variants]
    if variant == "linux" and mask & (Attr.SQ_PSN | Attr.RQ_PSN):
        found.append(PSN_MASKED)
    return found
