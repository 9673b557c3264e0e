"""Naming a divergence after the fields a verb's caller did not mean as input.

The device's outcome (or the state it read back) is compared with the model's as always;
only when it differs, no quirk covers it and a driver reading `qp_state` or
`cur_qp_state` outside the mask would have done just that (models/outside_mask.py
`explains`) is the record filed under `linux.modify.outside_mask_ignored`, so the report
says which contract broke instead of blaming the transition table.

A pair's send WR may carry values in the fields its opcode does not use
(qpconform/engine/unused_wr.py). A divergence about such a WR (its completions at either
end, tagged send_wr=N) that no quirk covers is filed under
`ibta.post_send.unused_fields_ignored`, the rule that judged it kept in its context
(`judged_by`), when what the device did shows the fill (`unused_explains`): a completion
carrying the fill's imm_data, or a SEND reported as an RDMA or atomic operation (the
union's filled bytes taken as its rdma or atomic member). Any other divergence on a filled
WR keeps its rule: the machines' fill shrinks to plain where the divergence does not need
it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from models import outside_mask, unused_fields
from models.enums import Attr, QPState
from models.operations import Op
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


#: Completion opcodes a SEND never has: a device reporting one took the union as a member.
_MEMBER_OPCODES = ("RDMA_WRITE", "RDMA_READ", "COMP_SWAP", "FETCH_ADD")


def unused_explains(op: Op, values: Mapping[str, int], d: Divergence) -> bool:
    """Does what `d` observed show the values a WR of `op` carried in its unused fields?"""
    seen = " ".join((d.observed, *d.tags))
    if "imm_data" in values and f"imm 0x{values['imm_data']:08x}" in seen:
        return True
    sends = op in (Op.SEND, Op.SEND_WITH_IMM)
    return sends and "rkey" in values and any(f"opcode {n}" in seen for n in _MEMBER_OPCODES)


def unused_named(d: Divergence, explained: bool, quirks: Quirks) -> Divergence:
    """`d` filed under the unused-fields rule when a fill `explained` it and no quirk knows
    it as it is (checked without counting a hit: the judge counts)."""
    if not explained or any(q.matches(d) for q in quirks.quirks):
        return d
    return as_rule(d, unused_fields.UNUSED_FIELDS).with_(
        context={**d.context, "judged_by": d.rule_id}
    )
