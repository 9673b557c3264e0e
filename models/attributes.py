"""Attribute value rules: the ranges a device must (or may) enforce on modify_qp.

Values are given in a flat dict whose keys are pyverbs QPAttr field names
(`timeout`, `port_num`, ...) plus `ah_port_num` and `ah_sgid_index` for the
address vector and `alt_ah_port_num` for the alternate one. Ranges come from the
field widths of the IBTA and the checks of the Linux uverbs layer and core; device
limits come from `DeviceCaps`.

A value rule of kind "may" (e.g. `attr.timeout.width`) is one no Linux layer
before the driver checks: a driver may refuse the value or store it masked to
the field width, and both conform (the model expects either). The `ibta` variant
keeps the spec's strict ranges for those fields.

The `iwarp` variant keeps only what uverbs and the core check for every device (port
numbers, the AV's port and GID, alternate paths, which the core allows on IB ports
only) and the access-flag rule: iWARP drivers read no other attribute, so a P_Key
index, MTU or PSN has no range there (siw reports a P_Key table of length 0).
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from models.enums import MTU, AccessFlag, Attr
from models.sources import (
    CORE,
    DRIVER,
    KERNEL_CACHE_C,
    KERNEL_UVERBS_CMD_C,
    KERNEL_VERBS_C,
    MAY,
    MUST,
    SPEC,
    UVERBS,
    Rule,
    Source,
    ibta,
)


class VariantFacts(Protocol):
    """What a value check asks of a variant (models/variant.py's Variant has it): the
    variant module builds on this one, so this one names only the questions."""

    @property
    def ib_transport(self) -> bool: ...

    @property
    def enforces_linux_abi(self) -> bool: ...

    @property
    def strict_spec_ranges(self) -> bool: ...

    @property
    def masks_psn(self) -> bool: ...

    @property
    def value_rules(self) -> tuple[ValueRule, ...]: ...

PSN_LIMIT = 1 << 24  # PSNs and QP numbers are 24-bit fields of the BTH

#: Value errors are reported as EINVAL by the uverbs layer and the drivers.
VALUE_ERRNOS = frozenset({errno.EINVAL})


@dataclass(frozen=True)
class DeviceCaps:
    """The device limits the value rules depend on (from query_device/query_port), and
    what the process may do with the device."""

    phys_port_cnt: int = 1
    pkey_tbl_len: int = 1
    gid_tbl_len: int = 16
    max_mtu: MTU = MTU.MTU_4096
    #: The port's active MTU (RoCE: the netdev's MTU, iboe_get_mtu()); never above max_mtu.
    active_mtu: MTU = MTU.MTU_4096
    max_qp_rd_atom: int = 16  # responder resources: limit of max_dest_rd_atomic
    max_qp_init_rd_atom: int = 16  # initiator depth: limit of max_rd_atomic
    link_layer: str = "ethernet"  # "ethernet" (RoCE) or "infiniband"
    #: In-range GID indices of the port whose entry is empty (the core answers ENODATA).
    empty_gids: frozenset[int] = frozenset()
    #: May the process set a controlled Q_Key (bit 31)? True with CAP_NET_RAW (the suite
    #: runs as root) or when `rdma system set privileged-qkey on`; see models/uverbs.py.
    privileged_qkey: bool = True

    def __post_init__(self) -> None:
        if self.active_mtu > self.max_mtu:  # a port never runs above its own maximum
            object.__setattr__(self, "active_mtu", self.max_mtu)


# Which variants make a value check: each asks the variant (models/variant.py) one question.
def _ib_transport(v: VariantFacts) -> bool:
    """A check of an InfiniBand attribute: iWARP drivers read none (linux, ibta)."""
    return v.ib_transport


def _every_device(v: VariantFacts) -> bool:
    """A uverbs or core check, before any driver (every variant)."""
    return True


def _linux_abi(v: VariantFacts) -> bool:
    """A check of the Linux uverbs layer or core (linux, iwarp)."""
    return v.enforces_linux_abi


def _spec_only(v: VariantFacts) -> bool:
    """The spec's strict range, which no Linux layer before the driver enforces (ibta)."""
    return v.strict_spec_ranges


def _linux_ib_ports(v: VariantFacts) -> bool:
    """What Linux does with an InfiniBand attribute where the spec is stricter or silent:
    leaves a field width to the driver, bans APM on RoCE (linux)."""
    return v.enforces_linux_abi and v.ib_transport


def _not_ib_ports(v: VariantFacts) -> bool:
    """The core refuses what only IB ports have (iwarp: alternate paths)."""
    return not v.ib_transport


@dataclass(frozen=True)
class ValueRule:
    """One value check: which mask bit it applies to, the rule, the test, the errnos, and
    which variants make it (`applies`: a question to the variant)."""

    bit: Attr
    rule: Rule
    valid: Callable[[Mapping[str, int], DeviceCaps], bool]
    applies: Callable[[VariantFacts], bool] = _ib_transport
    errnos: frozenset[int] = VALUE_ERRNOS


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
#: enum ib_mig_state (include/rdma/ib_verbs.h): what a consumer may ask for.
MIG_MIGRATED, MIG_REARM, MIG_ARMED = 0, 1, 2

#: Neither modify_qp() in uverbs_cmd.c nor _ib_modify_qp() in verbs.c looks at these.
_UNCHECKED = "not checked by modify_qp() (uverbs_cmd.c) nor _ib_modify_qp() (verbs.c)"
_MLX5 = "linux drivers/infiniband/hw/mlx5/qp.c"


def _width(field: str, bits: int, what: str, mlx5_where: str) -> tuple[ValueRule, ValueRule]:
    """A field the spec gives `bits` bits: strict in `ibta`, left to the driver in `linux`."""
    limit = 1 << bits
    bit = {
        "timeout": Attr.TIMEOUT,
        "retry_cnt": Attr.RETRY_CNT,
        "rnr_retry": Attr.RNR_RETRY,
        "min_rnr_timer": Attr.MIN_RNR_TIMER,
        "dest_qp_num": Attr.DEST_QPN,
    }[field]
    spec = "ch. 9.2 Base Transport Header" if field == "dest_qp_num" else _MODIFY

    def fits(v: Mapping[str, int], c: DeviceCaps) -> bool:
        return 0 <= v[field] < limit

    strict = ValueRule(
        bit,
        _r(f"{field}.range", f"{field} ({what}) is a {bits}-bit value: 0..{limit - 1}",
           ibta(spec, f"{what}: {bits} bits"), MUST, SPEC),
        fits,
        _spec_only,
    )
    lenient = ValueRule(
        bit,
        _r(
            f"{field}.width",
            f"{field} ({what}) above {limit - 1} does not fit its {bits}-bit field: no Linux "
            "layer before the driver checks it, so a driver may refuse it (EINVAL) or store "
            "it masked to the field width",
            Source(_MLX5, f"{mlx5_where}: MLX5_SET() masks to the field width; {_UNCHECKED}"),
            MAY,
            DRIVER,
        ),
        fits,
        _linux_ib_ports,
    )
    return strict, lenient


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
        _every_device,
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
        _every_device,
    ),
    ValueRule(
        Attr.AV,
        _r(
            "ah_sgid_index.range",
            "the address vector's source GID index must be in the GID table",
            Source(
                KERNEL_VERBS_C,
                "_ib_modify_qp() -> rdma_fill_sgid_attr() -> rdma_get_gid_attr() (cache.c): "
                "index >= table->sz -> -EINVAL (with a GRH; RoCE always has one)",
            ),
            MUST,
            CORE,
        ),
        lambda v, c: 0 <= v["ah_sgid_index"] < c.gid_tbl_len,
        _every_device,
    ),
    ValueRule(
        Attr.AV,
        _r(
            "ah_sgid_index.empty",
            "an in-range source GID index whose GID table entry is empty is refused with "
            "ENODATA",
            Source(
                KERNEL_CACHE_C,
                "rdma_get_gid_attr(): !is_gid_entry_valid() -> ERR_PTR(-ENODATA), returned by "
                "rdma_fill_sgid_attr() in _ib_modify_qp() (verbs.c)",
            ),
            MUST,
            CORE,
        ),
        lambda v, c: v["ah_sgid_index"] not in c.empty_gids,
        _linux_abi,
        frozenset({errno.ENODATA}),
    ),
    ValueRule(
        Attr.PKEY_INDEX,
        _r(
            "pkey_index.range",
            "pkey_index must be an index into the port's P_Key table",
            ibta(_MODIFY, "P_Key index: index into the port's P_Key table"),
            MUST,
            DRIVER,  # the core checks it only for IB QPs with qp_sec (security.c)
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
        Attr.PATH_MTU,
        _r(
            "path_mtu.above_active",
            "a path_mtu above the port's active MTU (on RoCE the netdev's MTU) but not above "
            "max_mtu is left to the driver: it may refuse it (EINVAL) or accept it",
            Source(
                "linux drivers/infiniband/hw (6.1, 6.12)",
                "bnxt_re/ib_verbs.c bnxt_re_modify_qp(): at ->RTR, path_mtu above "
                "iboe_get_mtu(netdev->mtu) -> -EINVAL; hns/hns_roce_qp.c check_mtu_validate(): "
                "path_mtu > active_mtu -> -EINVAL; mlx5/qp.c __mlx5_ib_modify_qp() checks "
                f"only IB_MTU_256..IB_MTU_4096; irdma stores it; {_UNCHECKED}",
            ),
            MAY,
            DRIVER,
        ),
        lambda v, c: not (c.active_mtu < v["path_mtu"] <= c.max_mtu),
    ),
    *_width("timeout", 5, "local ACK timeout exponent", "mlx5_set_path(): ack_timeout[0x5]"),
    *_width("retry_cnt", 3, "retry count", "__mlx5_ib_modify_qp(): retry_count[0x3]"),
    *_width("rnr_retry", 3, "RNR retry count, 7 = infinite",
            "__mlx5_ib_modify_qp(): rnr_retry[0x3]"),
    *_width("min_rnr_timer", 5, "minimum RNR NAK timer code",
            "__mlx5_ib_modify_qp(): min_rnr_nak[0x5]"),
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
        _spec_only,
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
        _spec_only,
    ),
    *_width("dest_qp_num", 24, "destination QP number",
            "__mlx5_ib_modify_qp(): remote_qpn[0x18]"),
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
            "qp_access_flags holds only the QP access bits (local write, remote write, remote "
            "read, remote atomic)",
            ibta(_MODIFY, "Enable RDMA Read / RDMA Write / Atomic operations"),
            MUST,
            SPEC,
        ),
        lambda v, c: v["qp_access_flags"] & ~_QP_ACCESS == 0,
        _spec_only,
    ),
    ValueRule(
        Attr.ACCESS_FLAGS,
        _r(
            "qp_access_flags.driver",
            "qp_access_flags bits beyond the four QP access bits (MW_BIND and the other "
            "ib_uverbs_access_flags, or undefined bits) are left to the driver: it may refuse "
            "them (EINVAL) or ignore them",
            Source(
                KERNEL_UVERBS_CMD_C,
                "modify_qp() copies qp_access_flags unchecked, _ib_modify_qp() (verbs.c) too; "
                "rxe_qp_chk_attr() (rxe_qp.c, 6.4+) refuses bits outside "
                "RXE_ACCESS_SUPPORTED_QP; mlx5 set_qpc_atomic_flags() (qp.c) uses only "
                "REMOTE_READ/WRITE/ATOMIC",
            ),
            MAY,
            DRIVER,
        ),
        lambda v, c: v["qp_access_flags"] & ~_QP_ACCESS == 0,
        _linux_abi,
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
        _every_device,
    ),
    ValueRule(
        Attr.ALT_PATH,
        _r(
            "alt_ah_port_num.match",
            "the alternate address vector's port must be a port of the device and equal "
            "alt_port_num",
            _uverbs(
                "modify_qp(): IB_QP_ALT_PATH, !rdma_is_port_valid(alt_dest.port_num) || "
                "alt_port_num != alt_dest.port_num -> -EINVAL"
            ),
            MUST,
            UVERBS,
        ),
        lambda v, c: 1 <= v["alt_ah_port_num"] <= c.phys_port_cnt
        and v["alt_ah_port_num"] == v["alt_port_num"],
        _linux_abi,
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
        _linux_ib_ports,
    ),
    ValueRule(
        Attr.ALT_PATH,
        _r(
            "alt_path.iwarp",
            "alternate paths (APM) are refused on iWARP ports: the core handles them for IB "
            "ports only",
            Source(
                KERNEL_VERBS_C,
                "_ib_modify_qp(): IB_QP_ALT_PATH unless rdma_protocol_ib() on both ports -> "
                "-EINVAL ('the core code can only handle alternate paths and APM for IB')",
            ),
            MUST,
            CORE,
        ),
        lambda v, c: False,
        _not_ib_ports,
    ),
    ValueRule(
        Attr.PATH_MIG_STATE,
        _r(
            "path_mig_state.armed",
            "path_mig_state other than MIGRATED or REARM (ARMED, or no ib_mig_state value) is "
            "left to the driver: rdmavt (hfi1, qib) refuses it, mlx5 stores ARMED",
            Source(
                "linux drivers/infiniband/sw/rdmavt/qp.c",
                "rvt_modify_qp(): IB_QP_PATH_MIG_STATE neither IB_MIG_REARM nor IB_MIG_MIGRATED "
                "-> goto inval; mlx5 __mlx5_ib_modify_qp() (qp.c): case IB_MIG_ARMED -> "
                f"MLX5_QP_PM_ARMED; {_UNCHECKED}",
            ),
            MAY,
            DRIVER,
        ),
        lambda v, c: v["path_mig_state"] in (MIG_MIGRATED, MIG_REARM),
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
