"""Which states a QP type reaches by modify alone, from RESET, in a variant's table."""

from __future__ import annotations

from models.enums import STATES, QPState, QPType
from models.table import TransitionTable


def reachable_states(table: TransitionTable, qp_type: QPType) -> list[QPState]:
    """States a modify walk from RESET can reach, in ABI order (iwarp: not RTS and what
    follows it, which only a connection reaches)."""
    seen, todo = {QPState.RESET}, [QPState.RESET]
    while todo:
        for nxt in table.moves_to(qp_type, todo.pop()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return [s for s in STATES if s in seen]
