"""Finished pairs (and lone QPs) kept under observation: the end of a case or example that
does not block.

A pair's observation truly ends only when its QPs and CQs go: whatever a step made
late (a duplicate completion, a completion of a WR that must never run, a forbidden
event) and arrives after that is never seen. A short blocking window before the
close is "unsure" on a loaded host, where an error-path completion can take most of
a second; a window of the must-wait bound before every close would cost that much
per case. So a finished pair is parked instead: its CQs and event channel are
polled at every poll of the other QPs the process checks (Watch.collect), and it is
destroyed at the first poll after its hold (`park_hold`) has passed since its last step or
delivery. That observation, from the last step to the last poll, is the window the
run notes as having ended an observation (DeliveryLog.note_closed), so the verdict's
timing check (timing.unsure) judges the real length, never a guess.

Anything a parked pair delivers is judged as at any poll: against the ledger entry,
and so the step, that made it due or forbade it. An unknown divergence found there
is recorded (divergences file, run record) when it is judged, like any other; it
cannot be shrunk (its example ended), so the pair is destroyed at once and the
divergence is kept in `found` for the caller to fail a test with (the next pair
test's setup or teardown, or the end of the session: fixtures/device_fixtures.py).
`release` destroys every parked pair without judging (a failure, Ctrl-C, session end
after `drain`); the device's close destroys whatever is left in any case.

A lone-QP Checker whose case or example ended parks the same way, with the QPs it retired
(qpconform/engine/lone.py `Checker.park`); its hold is its own (twice its quiet window).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from .judge import DivergenceError

#: Why a divergence found in a parked pair was not shrunk (in its record and message).
AFTER_END = (
    "seen after its case or example ended, while its QPs were kept under observation: not shrunk"
)


class Parkable(Protocol):
    """What the park needs of a finished pair (PairHarness) or lone Checker."""

    def park_poll(self) -> None:
        """Poll the pair once and judge what came; raises DivergenceError if unknown."""

    def park_close(self, observed: float) -> None:
        """Destroy the pair; `observed` (s, 0: not judged) is how long it was watched after
        its last step, noted as the window that ended its observation."""

    def last_active(self) -> float:
        """time.monotonic() of the pair's last step or delivery."""

    def park_hold(self) -> float:
        """How long it stays observed after its last step (asked at every poll: a slower
        delivery seen meanwhile lengthens it)."""


@dataclass
class Parked:
    pair: Parkable

    @property
    def until(self) -> float:
        """When its hold ends (time.monotonic()): its hold after its last step or delivery (a
        late delivery moves it on: a duplicate of it may follow; a slower delivery anywhere
        in the run lengthens the hold)."""
        return self.pair.last_active() + self.pair.park_hold()


@dataclass
class Park:
    """The parked pairs of one process, and the unknown divergences found in them."""

    pairs: list[Parked] = field(default_factory=list)
    #: unknown divergences found in parked pairs, not yet raised by `raise_found`
    found: list[DivergenceError] = field(default_factory=list)
    _polling: bool = False

    def add(self, pair: Parkable) -> None:
        """Keep observing `pair` until its hold has passed since its last step, then
        destroy it."""
        self.pairs.append(Parked(pair))

    def poll(self) -> None:
        """Poll every parked pair once; destroy those whose hold has passed (the poll just
        made began after it) and those an unknown divergence broke."""
        if self._polling or not self.pairs:
            return  # a parked pair's own poll reaches here again
        self._polling = True
        try:
            for parked in list(self.pairs):
                began = time.monotonic()
                try:
                    parked.pair.park_poll()
                except DivergenceError as exc:
                    self.found.append(exc)
                    self._drop(parked, 0.0)
                    continue
                except BaseException:
                    self._drop(parked, 0.0)
                    raise
                if began >= parked.until:
                    self._drop(parked, began - parked.pair.last_active())
        finally:
            self._polling = False

    def drain(self, limit: float | None = None) -> None:
        """Observe until every parked pair's hold has passed (at most `limit` s), then
        destroy them all: the end of the session. What is still parked past `limit`
        is released without its window noted."""
        deadline = None if limit is None else time.monotonic() + limit
        try:
            while self.pairs:
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    break
                nearest = min(p.until for p in self.pairs)
                time.sleep(min(0.01, max(0.0, nearest - now)))
                self.poll()
        finally:
            self.release()

    def release(self) -> None:
        """Destroy every parked pair without judging more (failure, Ctrl-C, session end)."""
        while self.pairs:
            self._drop(self.pairs[-1], 0.0)

    def raise_found(self) -> None:
        """Raise the first unknown divergence found in a parked pair (all of them named)."""
        if not self.found:
            return
        first, rest = self.found[0], self.found[1:]
        self.found = []
        more = first.more + [e.record for e in rest] + [m for e in rest for m in e.more]
        raise DivergenceError(first.record, more)

    def _drop(self, parked: Parked, observed: float) -> None:
        if parked in self.pairs:
            self.pairs.remove(parked)
        parked.pair.park_close(observed)
