"""Which states a QP type reaches by modify alone, from RESET, in a variant's table."""

from __future__ import annotations

from functools import lru_cache

from models.enums import STATES, QPState, QPType
from models.table import TransitionTable


def reachable_states(table: TransitionTable, qp_type: QPType) -> list[QPState]:
    """States a modify walk from RESET can reach, in ABI order (iwarp: not RTS and what
    follows it, which only a connection reaches)."""
    return list(_reachable(table, qp_type))


@lru_cache(maxsize=256)  # a table never changes; the machines ask before every rule
def _reachable(table: TransitionTable, qp_type: QPType) -> tuple[QPState, ...]:
    seen, todo = {QPState.RESET}, [QPState.RESET]
    while todo:
        for nxt in table.moves_to(qp_type, todo.pop()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return tuple(s for s in STATES if s in seen)
