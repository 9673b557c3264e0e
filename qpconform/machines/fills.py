"""The drawn fill of the fields outside every modify's mask (issue 53).

`FILLS` draws one fill per modify: every field alike (plain, zero, another valid value,
out of range) or each field its own way; it shrinks to the plain fill, so a shrunk
example keeps a non-plain value only where the divergence needs one. `draw_fills` makes an
engine draw the fill of each modify it sends from the example's data, whichever step
sends it (a bring-up walk, a reset, a bystander's move): the draws show in the falsifying
example, and the step log (so the divergence record and its reproducer) holds the values.
"""

from __future__ import annotations

from hypothesis import strategies as st

from qpconform.engine import unmasked
from qpconform.engine.core import Engine

_MIXED = "mixed"
_EACH: st.SearchStrategy[unmasked.Fill] = st.fixed_dictionaries(
    {name: st.sampled_from(unmasked.CHOICES) for name in unmasked.FIELDS}
)
FILLS: st.SearchStrategy[unmasked.Fill] = st.sampled_from((*unmasked.CHOICES, _MIXED)).flatmap(
    lambda how: _EACH if how == _MIXED else st.just(unmasked.uniform(how))
)


def draw_fills(engine: Engine, data: st.DataObject) -> None:
    """From now on `engine` draws each modify's fill from `data` (one example's)."""
    engine.fills = lambda *_: data.draw(FILLS, label="unmasked")
