"""Judging a divergence: known (a quirk covers it) or unknown (the run fails with its record).

One place decides for every rule set: a known divergence is recorded (handed to the
sink, the run's one record path: the run recorder counts steps, never records) and the run
goes on (the engine then follows the device); an unknown one is recorded, gets a
reproducer when the rule set can replay it, and is raised as DivergenceError, or
kept for the end of the test when it is an event divergence the rule set chose
to defer (events change no state, so the rest of the test still says something).
"""

from __future__ import annotations

from collections.abc import Callable
from os import PathLike
from typing import Any, Protocol

from .quirks import Quirk, Quirks
from .records import Divergence, DivergenceSink

#: Writes a divergence's reproducer and returns its path (reports.reproducer.write_reproducer).
ReproducerWriter = Callable[[Divergence], "str | PathLike[str]"]


class StepRecorder(Protocol):
    """What the engine tells a run record (reports.run_record.RunRecorder)."""

    def step(
        self,
        qp_type: str,
        verb: str,
        state_before: str,
        target: str | None,
        rules: list[str],
        result: str,
    ) -> None: ...

    def choice(
        self, rule_id: str, chosen: str, situation: str | None = None, where: str = ""
    ) -> tuple[str, str] | None:
        """The device's outcome under a "may" rule; with a situation, (earlier choice,
        where) when the device chose otherwise there before, else None."""
        ...


class DivergenceError(AssertionError):
    """An unknown divergence; the message is the record's readable report."""

    def __init__(self, record: Divergence, more: list[Divergence] | None = None) -> None:
        super().__init__(record.format())
        self.record = record
        self.more = list(more or [])

    def __str__(self) -> str:  # the stored record (with its reproducer) may replace it
        text = self.record.format()
        if self.more:
            rest = "\n\n".join(d.format() for d in self.more)
            text += f"\n\n(and {len(self.more)} more)\n{rest}"
        return text


class Judge:
    """Quirks, the divergence sink, the run recorder and the known and deferred lists.

    Where records go (`sink`), who writes reproducers (`reproducers`) and which test
    is running (`test`, named in every record) are the caller's: the engine writes no
    file and reads no environment.
    """

    def __init__(
        self,
        quirks: Quirks | None,
        sink: DivergenceSink | None,
        recorder: StepRecorder | None = None,
        *,
        reproducers: ReproducerWriter | None = None,
        defer_events: bool = False,
        test: str | None = None,
    ) -> None:
        self.quirks = quirks if quirks is not None else Quirks()
        self.sink = sink
        self.recorder = recorder
        self.reproducers = reproducers
        self.defer_events = defer_events
        self.test = test
        self.known: list[Divergence] = []
        self.deferred: list[Divergence] = []  # unknown event divergences, raised by finish()
        self.raised = False  # an unknown divergence was raised (the model may be off since)

    def verdict(self, d: Divergence, steps: list[dict[str, Any]]) -> Quirk | None:
        """Record `d`; return its quirk if known, None if deferred; raise if unknown."""
        d = d.with_(test=d.test or self.test)
        quirk = self.quirks.match(d)
        if quirk is not None:
            d = d.with_(known_quirk=quirk.id)
            self.known.append(d)
            if steps:  # lets a reproducer replay past this step
                steps[-1].setdefault("known", []).append(quirk.id)
        elif self.reproducers is not None:
            d = d.with_(reproducer=str(self.reproducers(d)))
        if self.sink is not None:
            self.sink.add(d)
        if quirk is not None:
            return quirk
        if self.defer_events and d.kind in ("event", "missing_event"):
            self.deferred.append(d)
            return None
        self.raised = True
        raise DivergenceError(d)

    def finish(self) -> None:
        """Raise the first deferred divergence (all of them are in the message)."""
        if self.deferred:
            raise DivergenceError(self.deferred[0], self.deferred[1:])
