"""The quiet windows a rule set opens, and the delivery delays that widen them (timing.py).

The lengths (`completion_window`, `event_window`) and the scope their deliveries are
judged against (`delivery_scope`) are the rule set's; this part names the delivery kinds
and keeps the samples honest: a delay the engine caused by holding its polls back, or one
a transport timer decides, says nothing about delivery."""

from __future__ import annotations

import time

from .rule_set import RuleSet
from .timing import TIMER


class DeliveryWindows:
    """The engine's quiet windows, widened by the run's deliveries."""

    def __init__(self, engine: RuleSet) -> None:
        self.engine = engine

    def kind(self, kind: str) -> str:
        """The delivery kind (timing.py) of this rule set's completions or events."""
        return f"{self.engine.delivery_scope} {kind}".lstrip()

    def window(self, kind: str) -> float:
        """The quiet window of `kind` ("completion", "event") to open now: this rule set's,
        widened by the run's deliveries of that kind."""
        engine = self.engine
        base = engine.completion_window if kind == "completion" else engine.event_window
        return engine.delivery.window(self.kind(kind), base)

    def delivered(self, kind: str, booked: float, label: str, rule_id: str = "") -> None:
        """Sample the delay of a delivery of `kind` booked at `booked`, unless it was booked
        before the engine last held its polls back (it waited for the engine, not the
        device); a completion of one of the rule set's `timer_rules` is the timer's sample."""
        engine = self.engine
        if booked < engine.polls_held_until:
            return
        timer = rule_id in engine.timer_rules
        engine.delivery.add(TIMER if timer else self.kind(kind), time.monotonic() - booked, label)
