"""The lone checker's QPs, open and retired, and the watch that keeps retired ones observed.

A case or example done with a QP retires it (lone.py `CheckedQP.retire`): a QP whose quiet
window is still open stays observed, polled with every other QP, until RETIRE_HOLD times
its window has passed since its last step or delivery; then it is destroyed and the real
time watched is noted as the window that ended its observation."""

from __future__ import annotations

import time
from typing import Generic, Protocol, TypeVar

from .delivery_windows import DeliveryWindows
from .judge import DivergenceError
from .matching import Matcher
from .rule_set import RuleSet
from .steplog import StepLog
from .track import Track
from .watch import Watch

#: A retired QP stays observed this many times its quiet window (widened by the run's lone
#: deliveries) after its last step or delivery, then is destroyed: the wait costs nothing,
#: the margin covers a delivery slower than any the run had seen when the window opened
#: (siw 6.1: a 164 ms lone flush after 100 ms windows had closed, December 2026).
RETIRE_HOLD = 2.0


class RosterQP(Protocol):
    """What the roster needs of a checked QP (lone.py CheckedQP)."""

    track: Track

    @property
    def broken(self) -> bool: ...

    def destroy_now(self) -> None: ...


QP = TypeVar("QP", bound=RosterQP)


class Roster(Generic[QP]):
    """The QPs a checker observes: those still open, and those retired until their hold."""

    def __init__(self, engine: RuleSet, windows: DeliveryWindows) -> None:
        self.engine = engine
        self.windows = windows
        self.live: list[QP] = []
        #: QPs their case or example is done with, observed until their hold has passed
        self.retired: list[QP] = []

    def tracks(self) -> list[Track]:
        """The tracks of every QP observed (open, then retired)."""
        return [q.track for q in (*self.live, *self.retired)]

    def forget(self, qp: QP) -> None:
        """A QP was destroyed: stop observing it."""
        for where in (self.live, self.retired):
            if qp in where:
                where.remove(qp)

    def retire(self, qp: QP) -> None:
        """`qp` is done with but still owes a quiet window (CheckedQP.retire): observe it
        until its hold has passed, then destroy it."""
        self.forget(qp)
        self.retired.append(qp)

    def hold(self) -> float:
        """How long a retired QP stays observed after its last step or delivery: RETIRE_HOLD
        times the longer of its windows, as widened by the run's lone deliveries (asked at
        every poll: it follows the tail)."""
        return RETIRE_HOLD * max(self.windows.window("completion"), self.windows.window("event"))

    def last_active(self) -> float:
        """time.monotonic() of the last step or delivery of the retired QPs."""
        return max((q.track.active_at for q in self.retired), default=0.0)

    def reap(self, qps: list[QP], now: float) -> None:
        """Destroy `qps`, noting the time each was watched after its last step or delivery
        as the window that ended its observation."""
        delivery = self.engine.delivery
        for qp in qps:
            observed = now - qp.track.active_at
            if qp.track.quiet_len > 0.0:
                delivery.note_closed(self.windows.kind("completion"), observed)
            if qp.track.events_len > 0.0:
                delivery.note_closed(self.windows.kind("event"), observed)
            qp.destroy_now()


class RetiringWatch(Watch, Generic[QP]):
    """The lone checker's watch: every poll also ends the observation of the retired QPs
    whose hold has passed, and a retired QP that diverged is watched no more."""

    def __init__(self, engine: RuleSet, log: StepLog, windows: DeliveryWindows, match: Matcher,
                 roster: Roster[QP]) -> None:
        super().__init__(engine, log, windows, match)
        self.roster = roster

    def collect(self) -> None:
        """Poll every QP (Watch.collect), then destroy the retired ones whose hold had
        passed when the poll began; the time each was watched after its last step or
        delivery is noted as the window that ended its observation."""
        roster = self.roster
        began = time.monotonic()
        try:
            super().collect()
        except DivergenceError:  # a retired QP that diverged is watched no more
            for qp in [q for q in roster.retired if q.broken]:
                qp.destroy_now()
            raise
        if roster.retired:
            hold = roster.hold()
            roster.reap([q for q in roster.retired if began >= q.track.active_at + hold], began)
