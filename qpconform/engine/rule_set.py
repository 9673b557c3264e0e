"""What the engine's parts (steplog.py, delivery_windows.py, matching.py, watch.py,
verdict.py, retiring.py) ask of the engine they serve: its shared state and the hooks a
rule set overrides.

A Protocol, so the parts need not import core.py, which composes them.
"""

from __future__ import annotations

from typing import Any, Protocol

from models.enums import EventType
from models.sources import Rule

from .device import Completion
from .judge import Judge
from .park import Park
from .quirks import Quirk
from .records import Divergence
from .timing import DeliveryLog
from .track import Track


class RuleSet(Protocol):
    """The engine as its parts see it (core.Engine is the one implementation)."""

    judge: Judge
    device_identity: dict[str, str]
    delivery: DeliveryLog
    delivery_scope: str
    completion_window: float
    event_window: float
    timer_rules: frozenset[str]
    polls_held_until: float
    poll_interval: float
    active_at: float
    parking: Park | None
    stray_completion_rule: Rule | None

    def tracks(self) -> list[Track]: ...

    def explain_completion(self, track: Track, wc: Completion) -> bool: ...

    def unbooked_event_rule(self, track: Track, event: EventType) -> Rule | None: ...

    def stray_rule(self, track: Track, wc: Completion) -> Rule: ...

    def route(self, track: Track, wc: Completion) -> Track | None: ...

    def after_completion(self, track: Track, wc: Completion, expected: Any) -> None: ...

    def on_known_missing(self, track: Track, wr_ids: list[int], quirk: Quirk) -> None: ...

    def on_event(self, track: Track, event: EventType) -> None: ...

    def divergence(self, track: Track, kind: str, rule: Rule, origin: int, expected: str,
                   observed: str, tags: list[str], **override: Any) -> Divergence: ...

    def diverge(self, track: Track, d: Divergence) -> Quirk | None: ...
