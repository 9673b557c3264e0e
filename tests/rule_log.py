"""A run recorder for self-tests: counts the rule ids each step checked."""

from __future__ import annotations

from collections import Counter
from typing import Any


class RuleLog:
    """A StepRecorder that counts the rule ids of every step, and the divergence sink that
    keeps the records (`strict`: a divergence fails the test at once: a clean fake must not
    diverge). Pass it as both: `recorder=log, sink=log`."""

    def __init__(self, strict: bool = False) -> None:
        self.strict = strict
        self.rules: Counter[str] = Counter()
        self.chosen: Counter[str] = Counter()  # the "may" rules a device chose under
        self.divergences: list[Any] = []

    def step(self, qp_type: str, verb: str, before: str, target: str | None,
             rules: list[str], result: str) -> None:
        self.rules.update(rules)

    def add(self, d: Any) -> None:
        if self.strict:
            raise AssertionError(f"a clean fake diverged: {d}")
        self.divergences.append(d)

    def choice(self, rule_id: str, chosen: str, situation: str | None = None,
               where: str = "") -> None:
        """A choice under a "may" rule exercises it (reports/qualification.py coverage)."""
        self.chosen[rule_id] += 1
