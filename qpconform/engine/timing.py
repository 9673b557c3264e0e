"""How late a device delivers what the model made due: the measurement quiet windows rest on.

Every completion and required event that arrives is timed from the moment the
engine booked it (right after the verb that made it due) to the poll that saw
it, so the figures are upper bounds that include the engine's own polling.

Windows follow the tail measured in the run (`DeliveryLog.follow`): a delivery slower
than its window widens that window for the rest of the run (WIDEN_MARGIN times the
slowest delivery, at most must-wait), and the log says so. A window that ended an
observation (before a destroy, at the end of an example) shorter than the slowest
delivery of its kind in the whole run is "unsure": something forbidden could have
come after it and gone unseen. The verdict says so (reports/qualification.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

KINDS = ("completion", "event")
#: The kind of a completion a transport timer decides (RC retries or RNR retries exhausted):
#: sampled apart, it widens no quiet window; the wait for the next one follows it.
TIMER = "timer"


def base_kind(kind: str) -> str:
    """'completion' of 'lone QP completion': a scoped kind (Engine.delivery_scope) shares
    its base kind's window."""
    return kind.rsplit(" ", 1)[-1]
#: A window a delivery outran becomes this many times the slowest delivery of its kind.
WIDEN_MARGIN = 1.5


@dataclass
class DeliveryLog:
    """Delivery delays per kind (seconds), with a readable summary; with `follow`, the
    windows the run judges with, widened by the tail it measures."""

    samples: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    #: the windows the run started with, per kind (empty: windows are fixed)
    bases: dict[str, float] = field(default_factory=dict)
    cap: float = 0.0  # no window grows beyond this (the must-wait bound)
    #: "completion window 100 -> 327 ms after a 218 ms completion", in order
    widened: list[str] = field(default_factory=list)
    #: lengths (s) of the windows that ended an observation, per kind
    closed: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    #: per kind, the slowest delivery and what it was ("rule ... on RC"): the report names it
    slowest_of: dict[str, tuple[float, str]] = field(default_factory=dict)

    def follow(self, windows: Windows) -> None:
        """Judge with `windows`, widened by what this run measures."""
        self.bases = {"completion": windows.quiet, "event": windows.event_window}
        self.cap = windows.must_wait

    def window(self, kind: str, base: float) -> float:
        """The window of `kind` to open now: `base`, or wider if this run's deliveries of
        that kind came later (fixed at `base` when the log does not follow)."""
        if not self.bases or base <= 0.0 or base_kind(kind) not in self.bases:
            return base
        return max(base, min(self.cap, WIDEN_MARGIN * self.slowest(kind)))

    def add(self, kind: str, seconds: float, what: str = "") -> None:
        """One delivery, `seconds` after it was booked (a widening when it outran the
        window in force); `what` names it (its rule) for the report."""
        seconds = max(0.0, seconds)
        if seconds > self.slowest_of.get(kind, (-1.0, ""))[0]:
            self.slowest_of[kind] = (seconds, what)
        base = self.bases.get(base_kind(kind))
        before = self.window(kind, base) if base else 0.0
        self.samples.setdefault(kind, []).append(seconds)
        if base and seconds > before:
            after = self.window(kind, base)
            self.widened.append(
                f"{kind} window {before * 1000:.0f} -> {after * 1000:.0f} ms after a "
                f"{seconds * 1000:.0f} ms {kind}" + (f" ({what})" if what else "")
                + (" (capped at must-wait)" if after >= self.cap else "")
            )

    def note_closed(self, kind: str, seconds: float) -> None:
        """A window of `kind` that was `seconds` long ended an observation."""
        if seconds > 0.0:
            self.closed.setdefault(kind, []).append(seconds)

    def summary(self) -> dict[str, dict[str, float]]:
        """Per kind: count, median, 99th percentile and maximum, in milliseconds."""
        out: dict[str, dict[str, float]] = {}
        for kind, values in self.samples.items():
            if not values:
                continue
            ordered = sorted(values)
            out[kind] = {
                "count": float(len(ordered)),
                "p50_ms": round(_quantile(ordered, 0.5) * 1000, 2),
                "p99_ms": round(_quantile(ordered, 0.99) * 1000, 2),
                "max_ms": round(ordered[-1] * 1000, 2),
            }
        return out

    def slowest(self, kind: str) -> float:
        """The slowest delivery of a kind seen, in seconds (0 when none was delivered)."""
        return max(self.samples.get(kind) or [0.0])

    def text(self) -> str:
        """'completions: 812, p50 0.4 ms, p99 3.1 ms, max 9.8 ms; events: ...' (or '')."""
        return "; ".join(
            f"{kind}s: {int(s['count'])}, p50 {s['p50_ms']} ms, p99 {s['p99_ms']} ms, "
            f"max {s['max_ms']} ms"
            for kind, s in self.summary().items()
        )


def unsure(
    samples: dict[str, list[float]],
    closed: dict[str, list[float]],
    named: dict[str, list[Any]] | None = None,
) -> list[str]:
    """Per kind, the windows that ended an observation shorter than the slowest delivery
    of that kind in the run (all workers' samples): what a forbidden item could have
    slipped past. Empty: every such window outlasted every delivery. `named`: per kind,
    [seconds, what] of the slowest, so the text says which delivery it was."""
    out = []
    for kind in sorted(closed):
        slowest = max(samples.get(kind) or [0.0])
        short = [w for w in closed.get(kind, []) if w < slowest]
        if short:
            what = (named or {}).get(kind, [0.0, ""])[1]
            out.append(
                f"{len(short)} of {len(closed[kind])} {kind} windows that ended an observation "
                f"were shorter ({min(short) * 1000:.0f}-{max(short) * 1000:.0f} ms) than the "
                f"slowest {kind} of the run ({slowest * 1000:.0f} ms"
                + (f": {what})" if what else ")")
            )
    return out


def _quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ----------------------------------------------------------------------- windows per family
@dataclass(frozen=True)
class Windows:
    """How long the engine watches, for one device family (fixtures/windows.toml).

    quiet: the window after a step from which a completion may still come or must not
    (a WR that must never run, a delivered completion's duplicate); event: the window
    after a move that can raise an event late (into SQD, ERR or SQE, out of SQD);
    must_wait: the bound on waiting for something due. All rest on the delivery delays
    measured on that family (`DeliveryLog`), with margin.
    """

    quiet: float
    must_wait: float
    source: str
    event: float | None = None  # None: the quiet window

    @property
    def event_window(self) -> float:
        return self.quiet if self.event is None else self.event

    def text(self) -> str:
        """'quiet window 100 ms (events 30 ms), must-wait 1.0 s (windows.toml [rxe]: ...)'."""
        return (
            f"quiet window {self.quiet * 1000:.0f} ms (events {self.event_window * 1000:.0f} "
            f"ms), must-wait {self.must_wait:.1f} s ({self.source})"
        )


def windows_from(family: str, data: Mapping[str, Any], origin: str) -> Windows:
    """The windows of a device family from a parsed timing table (its [family] table, else
    its [default] one). The caller reads the file (fixtures/windows.py): the engine reads
    no file; `origin` names it in errors and in Windows.source."""
    name = family if family in data else "default"
    table = data.get(name)
    if not isinstance(table, dict):
        raise ValueError(f"{origin}: no [{family}] and no [default] table")
    try:
        quiet, must = float(table["quiet_window"]), float(table["must_wait"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"{origin} [{name}]: quiet_window and must_wait must be numbers of seconds ({exc})"
        ) from exc
    try:
        event = float(table.get("event_window", quiet))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{origin} [{name}]: event_window must be seconds ({exc})") from exc
    if not 0 < quiet <= must or not 0 < event <= must:
        raise ValueError(f"{origin} [{name}]: need 0 < quiet_window, event_window <= must_wait")
    why = str(table.get("measured", "")).strip()
    return Windows(quiet, must, f"{origin} [{name}]" + (f": {why}" if why else ""), event)
