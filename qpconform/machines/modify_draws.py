"""What a lone QP's modify draws beyond its target: the mask's shape, bits the kernel
does not define, and a field's edge values, valid and just out of range."""

from __future__ import annotations

from collections.abc import Iterable

from models.attributes import DeviceCaps
from models.enums import Attr
from qpconform.engine.text import C_FIELD_BITS, mask_fields

#: Every defined mask bit, plus two the kernel does not define (must be EOPNOTSUPP).
ALL_BITS: tuple[int, ...] = (*(int(b) for b in Attr), 1 << 21, 1 << 26)
SHAPES = ("exact", "optional", "missing", "extra", "cur_right", "cur_wrong", "no_state")


def boundary_values(field: str, caps: DeviceCaps) -> list[int]:
    """Edge values of a field, valid and just out of range (models.attributes rules)."""
    ports = [caps.phys_port_cnt, 0, caps.phys_port_cnt + 1]
    psn = [0xFFFFFF, 0x1000000, 0xFFFFFFFF]
    values = {
        "port_num": ports,
        "ah_port_num": ports,
        "alt_port_num": ports,
        "pkey_index": [caps.pkey_tbl_len - 1, caps.pkey_tbl_len],
        # in-range GID entries may be empty: only the first index past the table is tried
        "ah_sgid_index": [caps.gid_tbl_len],
        "path_mtu": [1, int(caps.max_mtu), int(caps.active_mtu), 0, int(caps.max_mtu) + 1],
        "timeout": [0, 31, 32, 255],
        "alt_timeout": [0, 31, 32],
        "retry_cnt": [0, 7, 8],
        "rnr_retry": [0, 7, 8],
        "min_rnr_timer": [0, 31, 32],
        "sq_psn": psn,
        "rq_psn": psn,
        "dest_qp_num": [0xFFFFFF, 0x1000000],
        "max_rd_atomic": [0, caps.max_qp_init_rd_atom, caps.max_qp_init_rd_atom + 1],
        "max_dest_rd_atomic": [0, caps.max_qp_rd_atom, caps.max_qp_rd_atom + 1],
        "qp_access_flags": [0, 15, 16],
        "qkey": [0, 0x80000000, 0xFFFFFFFF],
        "en_sqd_async_notify": [0, 1],
        "path_mig_state": [0, 1, 2],
    }.get(field, [])
    return [v for v in values if 0 <= v < 1 << C_FIELD_BITS.get(field, 32)]


def mask_of(bits: Iterable[int]) -> Attr:
    """The mask with each of `bits` set."""
    return Attr(sum(int(b) for b in bits))


def in_mask(field: str, mask: Attr) -> bool:
    """Does `mask` carry `field`?"""
    return field in mask_fields(int(mask))
