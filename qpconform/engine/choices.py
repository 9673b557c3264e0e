"""A "may" rule lets a device choose; in the same situation it must choose the same way.

Either outcome of a "may" rule conforms (a wide timeout refused or stored masked),
but a device that refuses a modify once and accepts the very same modify later is
not implementation-defined, it is unpredictable: the issue that asked for the
"may" kind says the device "must be consistent". The situation is everything the
verb was given: QP type, verb, state before, target, mask and the masked values
(unmasked fields must be ignored, so they are left out). A value-dependent choice
(refuse 4096, accept 2048) is two situations, both recorded as characteristics.

Only the "may" value rules (models/attributes.py: a field beyond its width, access
bits beyond the QP's, a path MTU above the active one, ARMED) are held to this: the
driver decides them from the verb's own values. The other "may" rules (a post to an
IDLE or closing iWARP QP, a CUR_STATE the driver does not read, a move an iWARP
driver ignores) depend on the driver's own state record, which on iWARP follows the
connection asynchronously (siw: CLOSING, then ERROR), so the same verb in the same
model state can meet two driver states: their choices are recorded, not judged.

The "may" byte_len rules of a successful receive (a UD receive counting the GRH's 40
bytes or not, a WRITE with immediate's write length or 0: models/operations.py) are held
to it too, in the situation "QP type, completion opcode": the driver decides them from
the message alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from models.access import RC_QP_RIGHTS
from models.attributes import VALUE_RULES
from models.operations import UD_WC_BYTE_LEN, WC_BYTE_LEN_WRITE_IMM
from models.sources import MAY

#: The "may" rules a device must choose the same way in the same situation.
CONSISTENT_RULES = frozenset(vr.rule.id for vr in VALUE_RULES if vr.rule.kind == MAY) | {
    UD_WC_BYTE_LEN.id, WC_BYTE_LEN_WRITE_IMM.id, RC_QP_RIGHTS.id}


def situation(qp_type: str, step: Mapping[str, Any]) -> str:
    """The key of one verb's situation, from its step-log entry."""
    expect = step.get("expect", {})
    where = expect.get("state_before", "?")
    if step.get("verb") == "modify":
        where += f"->{expect.get('state_if_accepted', '?')}"
    parts = [qp_type, str(step.get("verb", "?")), where]
    if step.get("mask"):
        parts.append("mask=" + "|".join(step["mask"]))
    attrs = step.get("attrs") or {}
    parts += [f"{k}={attrs[k]}" for k in sorted(attrs)]
    return " ".join(parts)


class ChoiceBook:
    """The first choice a device made in each situation, per "may" rule."""

    def __init__(self) -> None:
        #: rule id -> situation -> {chosen: where it was first seen}
        self.seen: dict[str, dict[str, dict[str, str]]] = {}

    def note(self, rule_id: str, key: str, chosen: str, where: str) -> tuple[str, str] | None:
        """Record a choice in situation `key`; return (earlier choice, where) when the
        situation saw another."""
        chosen_at = self.seen.setdefault(rule_id, {}).setdefault(key, {})
        earlier = next(((c, w) for c, w in chosen_at.items() if c != chosen), None)
        chosen_at.setdefault(chosen, where)
        return earlier

    def as_dict(self) -> dict[str, dict[str, dict[str, str]]]:
        return {r: {s: dict(c) for s, c in sorted(v.items())} for r, v in sorted(self.seen.items())}

    def merge(self, other: Mapping[str, Mapping[str, Mapping[str, str]]]) -> None:
        """Fold another process's book in (the first place a choice was seen wins)."""
        for rule_id, situations in other.items():
            for key, chosen_at in situations.items():
                into = self.seen.setdefault(rule_id, {}).setdefault(key, {})
                for chosen, where in chosen_at.items():
                    into.setdefault(chosen, where)

    def inconsistent(self) -> list[dict[str, Any]]:
        """Every situation in which the device chose more than one way."""
        return inconsistent(self.seen)


def inconsistent(
    seen: Mapping[str, Mapping[str, Mapping[str, str]]],
) -> list[dict[str, Any]]:
    """The situations of a book (ChoiceBook.seen, or its dict in a merged run record) in
    which the device chose more than one way."""
    return [
        {"rule": rule_id, "situation": key, "choices": dict(chosen_at)}
        for rule_id, situations in sorted(seen.items())
        for key, chosen_at in sorted(situations.items())
        if len(chosen_at) > 1
    ]
