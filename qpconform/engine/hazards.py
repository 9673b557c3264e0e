"""Hazards: verbs a known driver bug turns into a crash of the machine under test.

Some bugs do not diverge, they corrupt kernel memory: rxe on Linux 6.1 writes past an
array when a modify grows max_dest_rd_atomic, and the guest's kernel oopses then or
later. A run that sends such a verb ends with a lost device and says nothing about the
rest. A quirk entry with `hazard = NAME` (qpconform/engine/quirk_schema.py) names the condition
here under which the engine does not send the verb: it records a known divergence of
kind "hazard" (the verb is not checked on this device: the report lists it under the
entry) and raises `HazardAvoided`, so the caller skips the step (a machine's rule does
nothing; a suite's case is a skip saying why). The entry's version range scopes it: on a
kernel outside it the verb is sent and checked as any other.

A condition sees the QP's `held` values (what the device took from accepted modifies
since the QP was created: a move to RESET does not clear what a driver keeps allocated)
and the modify about to be sent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from models.enums import Attr, QPState, QPType
from models.variant import LINUX

from .quirks import Quirk, Quirks
from .records import Divergence

#: (held values, the model's state, attrs, mask, QP type) -> does the hazard hold?
Test = Callable[[Mapping[str, int], QPState, Mapping[str, int], Attr, QPType], bool]


@dataclass(frozen=True)
class Condition:
    """A hazard's test, and the held values it compares (the record names them)."""

    holds: Test
    fields: tuple[str, ...]


class HazardAvoided(Exception):
    """A verb was not sent: a known hazard of this device would have crashed it."""

    def __init__(self, quirk: Quirk, record: Divergence) -> None:
        super().__init__(
            f"not sent: {record.verb} {record.state} with {record.attrs}: known hazard "
            f"{quirk.id} ({quirk.reason.splitlines()[0].rstrip('.,;:')} ...)"
        )
        self.quirk = quirk
        self.record = record


def reaches_driver(state: QPState, attrs: Mapping[str, int], mask: Attr, qp_type: QPType) -> bool:
    """Does a modify get past the core's checks to the driver's own code? Only one
    ib_modify_qp_is_ok() admits (the model's Linux table: LINUX.table.admits); any other is
    refused before the driver stores a value."""
    cur = attrs["cur_qp_state"] if Attr.CUR_STATE in mask else int(state)
    nxt = attrs["qp_state"] if Attr.STATE in mask else cur
    if not QPState.RESET <= min(cur, nxt) <= max(cur, nxt) <= QPState.ERR:
        return False  # no such state: the core refuses it
    return LINUX.table.admits(QPState(cur), QPState(nxt), qp_type, mask)


def grows_max_dest_rd_atomic(
    held: Mapping[str, int], state: QPState, attrs: Mapping[str, int], mask: Attr, qp_type: QPType
) -> bool:
    """A modify the driver stores that sets max_dest_rd_atomic above the value the QP
    holds (a QP that never took one holds no array yet: its first value is safe)."""
    if Attr.MAX_DEST_RD_ATOMIC not in mask or "max_dest_rd_atomic" not in held:
        return False
    if attrs["max_dest_rd_atomic"] <= held["max_dest_rd_atomic"]:
        return False
    return reaches_driver(state, attrs, mask, qp_type)


#: Every name of quirk_schema.HAZARDS and its condition (a test checks they agree).
CONDITIONS: dict[str, Condition] = {
    "grows_max_dest_rd_atomic": Condition(grows_max_dest_rd_atomic, ("max_dest_rd_atomic",)),
}


def hazards_holding(
    quirks: Quirks,
    held: Mapping[str, int],
    state: QPState,
    attrs: Mapping[str, int],
    mask: Attr,
    qp_type: QPType,
) -> list[Quirk]:
    """The run's hazard entries whose condition holds for this modify."""
    return [
        q for q in quirks
        if q.hazard is not None and CONDITIONS[q.hazard].holds(held, state, attrs, mask, qp_type)
    ]
