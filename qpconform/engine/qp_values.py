"""The modifies a lone QP can be sent: a valid value for every field (the device's, plus
fallbacks), the fields a transition requires, the fields outside a mask filled alike
(what a driver must not read), and the shortest walk of transitions to a state."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from models.enums import Attr, QPState, QPType
from models.qp import QPModel

from . import unmasked
from .device import Device, QPHandle
from .text import masked_attrs

#: Values for fields a device's valid_attrs() may leave out.
FALLBACK_ATTRS: dict[str, int] = {
    "en_sqd_async_notify": 1,
    "path_mig_state": 0,
    "rate_limit": 0,
    "alt_timeout": 14,
}
#: Ways to fill every field outside a modify's mask alike (QPValues.with_unmasked).
UNMASKED_STYLES = ("valid", "zero", "other", "wild")


class QPValues:
    """Valid attribute values and transitions for one QP, from the state its model is in."""

    def __init__(self, device: Device, handle: QPHandle, model: QPModel, qp_type: QPType) -> None:
        self.device = device
        self.handle = handle
        self.model = model
        self.qp_type = qp_type
        self._valid: dict[str, int] | None = None  # asked of the device once

    def valid_attrs(self) -> dict[str, int]:
        """A valid value for every field (the device's, plus fallbacks), cached per QP."""
        if self._valid is None:
            found = dict(FALLBACK_ATTRS)
            found["alt_port_num"] = self.device.port
            found.update(self.device.valid_attrs(self.handle))
            self._valid = found
        return dict(self._valid)

    def attrs_for(self, mask: Attr, nxt: QPState | None = None) -> dict[str, int]:
        """Valid values for the fields of mask; qp_state=nxt, cur_qp_state=the model's state."""
        valid = self.valid_attrs()
        valid["qp_state"] = int(self.model.state if nxt is None else nxt)
        valid["cur_qp_state"] = int(self.model.state)
        return masked_attrs(valid, mask)

    def with_unmasked(self, attrs: Mapping[str, int], mask: Attr, style: str) -> dict[str, int]:
        """`attrs` plus the fields outside `mask` a driver could wrongly read, every one
        filled by `style`: "valid" (the QP's valid values), "zero", "other" (another valid
        value) or "wild" (out of range, within the C field). Fields `attrs` sets keep
        their values."""
        if style not in UNMASKED_STYLES:
            raise ValueError(f"unmasked style {style!r}: use one of {UNMASKED_STYLES}")
        choice = unmasked.PLAIN if style == "valid" else style
        return unmasked.filled(attrs, mask, self.plain(), unmasked.uniform(choice))

    def plain(self) -> dict[str, int]:
        """What each field outside a mask holds when nothing is wrong: the QP's valid
        values, its current state for qp_state and cur_qp_state."""
        valid = self.valid_attrs()
        valid["qp_state"] = valid["cur_qp_state"] = int(self.model.state)
        return valid

    def transition_attrs(self, nxt: QPState) -> tuple[dict[str, int], Attr]:
        """Valid attrs and the exactly-required mask (|STATE) for current -> nxt."""
        entry = self.model.table.lookup(self.qp_type, self.model.state, nxt)
        if entry is None:
            raise ValueError(f"{self.qp_type.name} {self.model.state.name}->{nxt.name} is invalid")
        mask = Attr(entry.required | Attr.STATE)
        return self.attrs_for(mask, nxt), mask

    def path_to(
        self, state: QPState, avoid: set[tuple[QPState, QPState]] | None = None
    ) -> list[QPState]:
        """Shortest list of modify targets from the model's state to state (skipping avoid)."""
        start = self.model.state
        came: dict[QPState, QPState | None] = {start: None}
        todo = deque([start])
        while todo:
            cur = todo.popleft()
            if cur == state:
                path = []
                while came[cur] is not None:
                    path.append(cur)
                    cur = came[cur]  # type: ignore[assignment]
                return path[::-1]
            for nxt in self.model.table.moves_to(self.qp_type, cur):
                if nxt not in came and (cur, nxt) not in (avoid or ()):
                    came[nxt] = cur
                    todo.append(nxt)
        raise ValueError(f"{state.name} cannot be reached by modify_qp from {start.name}")
