"""A finished connected pair as the park (qpconform/engine/park.py) keeps it observed.

`ParkedPair` is a part of `PairHarness` (qpconform/engine/pair.py), handed to the park
when the pair's case or example ends: the park polls it at every poll of the process's
other QPs until its hold has passed since its last step, then closes it.
"""

from __future__ import annotations

from typing import Any

from .judge import DivergenceError
from .timing import KINDS, WIDEN_MARGIN

#: A parked pair is held this many times the must-wait bound after its last step: holding
#: costs no wait, and under a saturated host an RC error-path completion took 1.19 s
#: against rxe's 1.0 s must-wait (bookworm soak, --busy 2, December 2026).
PARK_BASE = 2.0
#: ... and at most this many times, however slow the run's deliveries: a slower one makes
#: the verdict unsure instead.
PARK_LIMIT = 3.0


class ParkedPair:
    """The park's view of a pair harness (engine/park.py's Parkable): it polls and closes
    the harness and reads its deliveries."""

    def __init__(self, harness: Any) -> None:
        self.h = harness

    def park_hold(self) -> float:
        """How long a finished pair stays observed after its last step: PARK_BASE times the
        must-wait bound (the pair's settle bound when the run follows none), or
        WIDEN_MARGIN times the run's slowest pair delivery when longer (at most PARK_LIMIT
        times the bound). Asked at every poll of the park: it follows the tail."""
        h = self.h
        bound = h.delivery.cap or h.bound
        tail = max(h.delivery.slowest(h.windows.kind(k)) for k in KINDS)
        return max(PARK_BASE * bound, min(PARK_LIMIT * bound, WIDEN_MARGIN * tail))

    def park_poll(self) -> None:
        """One poll of a parked pair; an event divergence it defers is raised here (its
        test has ended: nothing calls finish() again)."""
        judge = self.h.judge
        deferred = len(judge.deferred)
        self.h.watch.collect()
        if len(judge.deferred) > deferred:
            new = judge.deferred[deferred:]
            raise DivergenceError(new[0], new[1:])

    def park_close(self, observed: float) -> None:
        """Destroy a parked pair; `observed` s since its last step, when judged, is the
        window that ended its observation (both kinds: its CQs and its events)."""
        if observed > 0.0:
            for kind in KINDS:
                self.h.delivery.note_closed(self.h.windows.kind(kind), observed)
        self.h.close()

    def last_active(self) -> float:
        """time.monotonic() of the pair's last verb or delivery."""
        return float(self.h.active_at)
