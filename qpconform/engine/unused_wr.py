"""What a send WR carries in the fields its opcode does not use: values a device must ignore.

A WR fill is one choice for the whole WR: "plain" (nothing set: pyverbs' SendWR starts
zeroed, what the adapters always posted), "other" (small valid-looking values: an rkey, an
address, operands, an immediate) or "wild" (every bit set). `values` gives the fields the
fill sets for an operation on a QP type (models/unused_fields.py says which are unused);
the pair machines draw the choice per post (qpconform/machines/fills.py, shrinking to
plain). Whatever the fill, the model judges the WR as the opcode defines it, so a device
whose completions or state follow the fill diverges; a divergence on a WR that carried a
fill is filed under `ibta.post_send.unused_fields_ignored` (`blamed`).
"""

from __future__ import annotations

from models import unused_fields
from models.enums import QPType
from models.operations import Op

PLAIN, OTHER, WILD = "plain", "other", "wild"
#: The ways to fill a WR, plain first (what a drawn fill shrinks to).
CHOICES: tuple[str, ...] = (PLAIN, OTHER, WILD)
#: Each field's C width in bits (imm_data and rkey are 32-bit, the rest 64-bit).
_BITS = {"imm_data": 32, "remote_addr": 64, "rkey": 32, "compare_add": 64, "swap": 64}
#: "other": values a device could mistake for input (a page-aligned address, a key with
#: index bits set, operands 1, an immediate none of models.operations.imm_for gives).
_OTHER = {"imm_data": 0x0BADC0DE, "remote_addr": 0x1000, "rkey": 0x1234,
          "compare_add": 1, "swap": 1}


def values(op: Op, qp_type: QPType, choice: str) -> dict[str, int]:
    """The unused fields of a WR of `op` on `qp_type` valued by `choice` ({}: plain)."""
    if choice not in CHOICES:
        raise ValueError(f"WR fill {choice!r}: use one of {CHOICES}")
    if choice == PLAIN:
        return {}
    names = unused_fields.unused(op, qp_type)
    if choice == OTHER:
        return {n: _OTHER[n] for n in names}
    return {n: (1 << _BITS[n]) - 1 for n in names}
