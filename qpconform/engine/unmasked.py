"""What every modify carries outside its mask: values a driver must ignore.

A fill says, per field a driver could wrongly read, how to value it: "plain" (what the
field holds when nothing is wrong: the QP's valid value, its current state for the two
state fields), "zero", "other" (another valid value: another legal state for the states)
or "wild" (out of range, but within the C field pyverbs writes). The state machines draw
fills (qpconform/machines/fills.py, shrinking to plain); the deterministic suites take
one chosen by the modify (`Keyed`). Whatever the fill, the model judges the masked fields only,
so a device whose outcome or read-back follows the fill diverges.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping

from models import readback
from models.enums import Attr, QPState, QPType

from .text import C_FIELD_BITS, mask_fields

PLAIN, ZERO, OTHER, WILD = "plain", "zero", "other", "wild"
#: The ways to value one field, plain first (what a drawn fill shrinks to).
CHOICES = (PLAIN, ZERO, OTHER, WILD)
#: The fields filled outside the mask: the two states and every read-back field.
FIELDS: tuple[str, ...] = ("qp_state", "cur_qp_state", *readback.COMPARED)
#: ibv_modify_srq's field outside IBV_SRQ_LIMIT (the only mask the suites send).
SRQ_FIELD = "max_wr"
#: Every field a fill values.
ALL_FIELDS: tuple[str, ...] = (*FIELDS, SRQ_FIELD)
#: One choice per field (a field left out is plain).
Fill = Mapping[str, str]
#: Where an engine takes the fill of each modify from: (QP type, state, mask) -> fill.
FillSource = Callable[[QPType, QPState, Attr], Fill]
_STATES = ("qp_state", "cur_qp_state")
#: The 32-bit fields C_FIELD_BITS leaves out: wild stays within a signed int, whatever
#: pyverbs declares the field as; the enum fields' wild value is past their last one.
_WIDE = 32
_WILD_WIDE = (1 << 31) - 1
_WILD_ENUM = {"qp_state": 7, "cur_qp_state": 7, "path_mtu": 7}  # IBV_QPS_UNKNOWN; no MTU


def uniform(choice: str) -> dict[str, str]:
    """Every field valued the same way."""
    if choice not in CHOICES:
        raise ValueError(f"fill choice {choice!r}: use one of {CHOICES}")
    return dict.fromkeys(ALL_FIELDS, choice)


def value(name: str, plain: int, choice: str) -> int:
    """The value `choice` gives field `name` whose plain value is `plain`."""
    if choice == PLAIN:
        return plain
    if choice == ZERO:
        return 0
    if choice == WILD:
        if name in _WILD_ENUM:
            return _WILD_ENUM[name]
        return (1 << C_FIELD_BITS[name]) - 1 if name in C_FIELD_BITS else _WILD_WIDE
    if name in _STATES:
        return (plain + 3) % (int(QPState.ERR) + 1)
    if name == "path_mtu":
        return plain % 5 + 1
    return (plain + 1) % (1 << C_FIELD_BITS.get(name, _WIDE))


def filled(
    attrs: Mapping[str, int], mask: Attr, plain: Mapping[str, int], fill: Fill
) -> dict[str, int]:
    """`attrs` plus every FIELDS field outside `mask` that `attrs` leaves out and `plain`
    values, valued by its choice in `fill`. A field the caller set is kept as set."""
    inside = set(mask_fields(int(mask)))
    out = dict(attrs)
    for name in FIELDS:
        if name in inside or name in out or name not in plain:
            continue
        out[name] = value(name, int(plain[name]), fill.get(name, PLAIN))
    return out


def srq_max_wr(fill: Fill) -> int | None:
    """The max_wr a modify_srq(IBV_SRQ_LIMIT) carries outside its mask: None when plain
    (the adapter's SrqAttr default), else 0, 1 (another valid size) or out of range."""
    choice = fill.get(SRQ_FIELD, PLAIN)
    return {PLAIN: None, ZERO: 0, OTHER: 1, WILD: _WILD_WIDE}[choice]


def pair_filled(
    attrs: Mapping[str, int], mask: Attr, extra: Mapping[str, int], cur: QPState, fill: Fill
) -> dict[str, int]:
    """A pair end's modify attrs (its values for every field, qp_state the target) with the
    fields outside `mask` valued by `fill`: plain is what the end gives them anyway, and
    cur_qp_state the current state. What the caller set in `extra` stays."""
    inside = set(mask_fields(int(mask)))
    kept = {k: v for k, v in attrs.items() if k in inside or k in extra or k not in FIELDS}
    return filled(kept, mask, {**attrs, "cur_qp_state": int(cur)}, fill)


def outside(given: Mapping[str, int], mask: Attr) -> dict[str, int]:
    """The fields of `given` outside `mask` (what a step records and a reproducer sets)."""
    inside = set(mask_fields(int(mask)))
    return {k: int(v) for k, v in given.items() if k not in inside}


class Keyed:
    """The deterministic suites' fills: never plain (nothing to learn there), one of zero,
    other, wild and a mix (those three alternating field by field), chosen by the modify
    itself (QP type, state, mask), so a case meets the same fill on a fresh QP or a
    reused one, in any order."""

    def __init__(self) -> None:
        wrong = (ZERO, OTHER, WILD)
        mixed = {name: wrong[i % len(wrong)] for i, name in enumerate(ALL_FIELDS)}
        self._fills: tuple[Fill, ...] = (*(uniform(c) for c in wrong), mixed)

    def __call__(self, qp_type: QPType, state: QPState, mask: Attr) -> Fill:
        key = f"{qp_type.name}:{state.name}:{int(mask)}".encode()
        return self._fills[zlib.crc32(key) % len(self._fills)]
