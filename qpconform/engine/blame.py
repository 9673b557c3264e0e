"""Naming a modify's divergence after the field outside its mask that explains it.

The device's outcome (or the state it read back) is compared with the model's as always;
only when it differs, no quirk covers it and a driver reading `qp_state` or
`cur_qp_state` outside the mask would have done just that (models/outside_mask.py
`explains`) is the record filed under `linux.modify.outside_mask_ignored`, so the report
says which contract broke instead of blaming the transition table.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from models import outside_mask
from models.enums import Attr, QPState
from models.outcomes import Expectation
from models.sources import Rule

from .device import VerbResult
from .quirks import Quirks
from .records import Divergence
from .track import Track


def explained(
    track: Track, exp: Expectation, res: VerbResult, step: dict[str, Any], seen: QPState | None
) -> bool:
    """Does a reading outside the mask explain what the device did with this modify, which
    the model did not expect? Call it before the model applies `exp`."""
    given, mask = step.get("attrs"), step.get("mask")
    if exp.verb != "modify" or given is None or mask is None or res.killed:
        return False
    wrong_state = (
        res.accepted and seen is not None
        and seen not in track.model.reported(exp.state_if_accepted)
    )
    if exp.allows(res.accepted, res.errno) and not wrong_state:
        return False
    return outside_mask.explains(
        track.model, given, Attr(int(mask)), res.accepted, res.errno, seen
    )


def named(d: Divergence, blamed: bool, quirks: Quirks) -> Divergence:
    """`d` filed under the outside-mask rule when `blamed` and no quirk knows it as it is."""
    if not blamed or quirks.match(d) is not None:
        return d
    return as_rule(d, outside_mask.OUTSIDE_MASK)


def as_rule(d: Divergence, rule: Rule) -> Divergence:
    """The same record under another rule."""
    return dataclasses.replace(
        d, rule_id=rule.id, rule_summary=rule.summary, source=str(rule.source),
        rule_kind=rule.kind or "", rule_layer=rule.layer or "",
    )
