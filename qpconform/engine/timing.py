"""How late a device delivers what the model made due: the measurement quiet windows rest on.

Every completion and required event that arrives is timed from the moment the
engine booked it (right after the verb that made it due) to the poll that saw
it, so the figures are upper bounds that include the engine's own polling.
"""

from __future__ import annotations

from dataclasses import dataclass, field

KINDS = ("completion", "event")


@dataclass
class DeliveryLog:
    """Delivery delays per kind (seconds), with a readable summary."""

    samples: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})

    def add(self, kind: str, seconds: float) -> None:
        """One delivery, `seconds` after it was booked."""
        self.samples[kind].append(max(0.0, seconds))

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

    def text(self) -> str:
        """'completions: 812, p50 0.4 ms, p99 3.1 ms, max 9.8 ms; events: ...' (or '')."""
        return "; ".join(
            f"{kind}s: {int(s['count'])}, p50 {s['p50_ms']} ms, p99 {s['p99_ms']} ms, "
            f"max {s['max_ms']} ms"
            for kind, s in self.summary().items()
        )


def _quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
