"""The drawn fill of the fields outside every modify's mask.

`FILLS` draws one fill per modify: every field alike (plain, zero, another valid value,
out of range) or each field its own way; it shrinks to the plain fill, so a shrunk
example keeps a non-plain value only where the divergence needs one. `draw_fills` makes a
lone checker draw the fill of each modify it sends from the example's data (a lone QP's
bring-up walk takes the keyed fill, `Engine.walk_fills`). The pair machines draw one fill
per modify rule (`modify`), passed to `PairHarness.modify`; the modifies the harness sends
itself (a connect's bring-up, resets, a bystander's moves, flushes to ERR) take the keyed
fill (`unmasked.Keyed`, never plain): drawn on every one of them, the fills spent the
examples' data and the searches of the pair suites' planted faults missed some. The draws
show in the falsifying example, and the step log (so the divergence record and its
reproducer) holds the values.
"""

from __future__ import annotations

from hypothesis import strategies as st

from qpconform.engine import unmasked, unused_wr
from qpconform.engine.core import Engine

_MIXED = "mixed"
_N = len(unmasked.CHOICES)


def _each(code: int) -> unmasked.Fill:
    """Field i takes the choice of the i-th base-_N digit of `code` (0: all plain)."""
    out = {}
    for name in unmasked.ALL_FIELDS:
        code, digit = divmod(code, _N)
        out[name] = unmasked.CHOICES[digit]
    return out


#: One integer for all the fields (a dictionary of draws would spend an example's data on
#: every modify, and the search meets fewer sequences); it shrinks toward all plain.
_EACH: st.SearchStrategy[unmasked.Fill] = st.integers(
    0, _N ** len(unmasked.ALL_FIELDS) - 1
).map(_each)
FILLS: st.SearchStrategy[unmasked.Fill] = st.sampled_from((*unmasked.CHOICES, _MIXED)).flatmap(
    lambda how: _EACH if how == _MIXED else st.just(unmasked.uniform(how))
)


#: How a pair machine's post fills the send WR's fields its opcode does not use (one draw
#: per post: plain, other, wild; it shrinks to plain, qpconform/engine/unused_wr.py).
WR_FILLS: st.SearchStrategy[str] = st.sampled_from(unused_wr.CHOICES)


def draw_fills(engine: Engine, data: st.DataObject) -> None:
    """From now on `engine` draws each modify's fill from `data` (one example's)."""
    engine.fills = lambda *_: data.draw(FILLS, label="unmasked")
