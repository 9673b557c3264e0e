"""One QP under comparison (`Track`): what the engine keeps per QP between steps.

Its device handle, model, ledger and step log, the windows it still owes (quiet,
events), its state history and drains, and the context a quirk condition matches on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from models.enums import EventType, QPState, QPType
from models.outcomes import Expectation, Outcome
from models.qp import QPModel

from .device import Observed
from .ledger import Because, Ledger, event_rule


@dataclass
class Track:
    """One QP under comparison: its device handle, its model, its ledger and its step log.

    The two ends of a pair share one step log (`steps` is the same list) and say
    which end they are (`side`); a lone QP has a log of its own.
    """

    handle: Observed
    model: QPModel
    qp_type: QPType
    qp_num: int | None
    steps: list[dict[str, Any]]
    side: str | None = None
    ledger: Ledger = field(default_factory=Ledger)
    broken: bool = False  # an unknown divergence was raised: the model may be off
    settle_step: dict[str, Any] | None = None
    history: list[tuple[int, str, str]] = field(default_factory=list)  # (step, from, to)
    #: accepted modifies to the state the QP was already in, e.g. RESET->RESET: (step, state)
    self_moves: list[tuple[int, str]] = field(default_factory=list)
    #: what the device took from accepted modifies since the QP was created (a move to
    #: RESET clears nothing: a driver keeps what it allocated): hazards read it
    held: dict[str, int] = field(default_factory=dict)
    #: the step whose divergence a reading outside its mask explains (engine/blame.py)
    blamed: int | None = None
    drains: int = 0  # RTS->SQD transitions so far
    drained_events: int = 0  # SQ_DRAINED events seen since the last RTS->SQD
    last_wqes: int = 0  # QP_LAST_WQE_REACHED claimed since the QP last entered ERR
    quiet_from: int | None = None  # the first step whose quiet window is still open
    quiet_until: float = 0.0  # when the open quiet window closes (time.monotonic())
    events_until: float = 0.0  # when the open event window closes (within quiet_until)
    quiet_len: float = 0.0  # the longest quiet window opened since the last close (seconds)
    events_len: float = 0.0  # the longest event window opened since the last close
    #: time.monotonic() of the QP's last step or delivery: a retired QP's hold runs from it
    active_at: float = field(default_factory=time.monotonic)
    #: the forbidden events of the step whose event window a modify did not wait out
    #: (`overlap_events`), and when that window closes: what may have come inside it is
    #: judged against them, as if the modify had waited
    prior_forbidden: dict[EventType, Because] | None = None
    prior_until: float = 0.0
    #: when the QP's events were read before the read going on now, and that read's start
    #: (an event read now came after the earlier one began)
    read_since: float = 0.0
    read_at: float = 0.0

    def owe_quiet(self, step: int, seconds: float) -> None:
        """Something may still appear, or must not, because of `step`: a quiet window of
        `seconds` opens now (an open one is extended, never shortened). Later steps keep
        polling while it is open; only what would end the observation (destroy, the end
        of an example, a new drain) waits it out."""
        self._watch(step, seconds)
        self.quiet_len = max(self.quiet_len, seconds)

    def owe_events(self, step: int, seconds: float) -> None:
        """A move that can raise an event late: the event window opens (see owe_quiet); the
        QP's next modify waits out its rest, or overlaps it (`overlap_events`), so a late
        event is judged against this step. It opens no completion window (quiet_len):
        nothing is at stake on the CQs."""
        self._watch(step, seconds)
        self.events_until = max(self.events_until, time.monotonic() + seconds)
        self.events_len = max(self.events_len, seconds)

    def _watch(self, step: int, seconds: float) -> None:
        """Keep observing the QP for `seconds` more because of `step` (never shortened)."""
        if self.quiet_from is None:
            self.quiet_from = step
        self.quiet_until = max(self.quiet_until, time.monotonic() + seconds)

    def close_quiet(self) -> None:
        """The open windows were waited out: none is open now."""
        self.quiet_from = None
        self.quiet_len = self.events_len = 0.0

    def overlap_events(self, exp: Expectation, draining: bool = False) -> bool:
        """May the modify `exp` run inside the open event window instead of waiting out its
        rest? Only if it judges every event as the window's step does: refused (a failed
        verb changes nothing), or forbidding the same events by the same rules. Never a move
        into SQD (the SQ_DRAINED of a drain it starts must be told from the window's, and
        RTS->SQD restarts the count), nor out of SQD while the device reports its drain
        running (`draining`, read just before: rxe 6.12 refuses to leave SQD until the
        drain ends, and the wait gives it that time, as before), nor on an SRQ's QP (Last
        WQE Reached counts per entry into ERR). A move out of SQD may differ in SQ_DRAINED
        alone: outside SQD a drain event is judged against the QP's last entry into SQD.
        Then the window's forbidden events are kept (`forbidden_now`) until it closes, and
        an event that may have come inside it is judged against them, naming the same step
        a wait would have."""
        if self.events_left() <= 0.0:
            return True
        leaving_sqd = self.model.state == QPState.SQD
        if self.model.srq is not None or exp.state_if_accepted == QPState.SQD:
            return False
        if leaving_sqd and draining:
            return False
        if exp.outcome is not Outcome.REFUSE:
            after = {e: event_rule(exp, e).id for e in exp.forbidden_events}
            now = {e: b.rule.id for e, b in self.ledger.forbidden.items()}
            if leaving_sqd:
                after.pop(EventType.SQ_DRAINED, None)
                now.pop(EventType.SQ_DRAINED, None)
            if after != now:
                return False
        self.prior_forbidden = dict(self.ledger.forbidden)
        self.prior_until = self.events_until
        return True

    def reading_events(self) -> None:
        """The QP's events are read now (`forbidden_now` asks when the read before began)."""
        self.read_since, self.read_at = self.read_at, time.monotonic()

    def forbidden_now(self) -> dict[EventType, Because]:
        """The forbidden events an event read now is judged against: those of the step whose
        event window a modify overlapped while the event may have come inside it (the read
        before this one began before the window closed), else the ledger's."""
        if self.prior_forbidden is not None:
            if self.read_since <= self.prior_until:
                return self.prior_forbidden
            self.prior_forbidden = None
        return self.ledger.forbidden

    def events_left(self) -> float:
        """Seconds left of the open event window (0 when none is open)."""
        return max(0.0, self.events_until - time.monotonic())

    def quiet_left(self) -> float:
        """Seconds left of the open quiet window (0 when none is open)."""
        if self.quiet_from is None:
            return 0.0
        return max(0.0, self.quiet_until - time.monotonic())

    def last(self) -> int:
        """Index of the newest step (the origin of what is found now)."""
        return len(self.steps) - 1

    def moved(self, before: QPState, after: QPState, step: int) -> None:
        """The QP went from `before` to `after` at `step` (a verb, the wire, a followed
        device)."""
        if before != after:
            self.history.append((step, before.name, after.name))
        if before == QPState.RTS and after == QPState.SQD:
            self.drains += 1
            self.drained_events = 0
        if before == QPState.ERR and after != QPState.ERR:  # a new ERR owes its own Last WQE
            self.last_wqes = 0

    def last_into(self, state: QPState) -> int | None:
        """The newest step that moved the QP into `state`, from another state or from
        itself (SQD->SQD); None if none did."""
        steps = [at for at, _, nxt in self.history if nxt == state.name]
        steps += [at for at, st in self.self_moves if st == state.name]
        return max(steps, default=None)

    def context(self, origin: int) -> dict[str, Any]:
        """What the engine knows at a divergence: quirk conditions match on it.

        `after` names, per state, the QP's last entry into it from another state, and a
        modify into the state it was in (RESET->RESET) made after that entry, or when the
        QP never entered it otherwise (a new QP's RESET->RESET): a driver may act on it
        (irdma moves its hardware QP to ERROR on any ->RESET)."""
        step = self.steps[origin] if 0 <= origin < len(self.steps) else {}
        last_entry = {nxt: cur for _, cur, nxt in self.history}  # the newest entry wins
        entered_at = {nxt: at for at, _, nxt in self.history}
        after = {f"{cur}->{nxt}" for nxt, cur in last_entry.items()}
        after |= {f"{st}->{st}" for at, st in self.self_moves if at > entered_at.get(st, -1)}
        found: dict[str, Any] = {
            "state": self.model.state.name,
            "after": sorted(after),
            "since": sorted({nxt for at, _, nxt in self.history if at >= origin >= 0}),
        }
        expect = step.get("expect", {})
        if expect:
            found["state_before"] = expect["state_before"]
            if step.get("verb") == "modify":
                found["transition"] = f"{expect['state_before']}->{expect['state_if_accepted']}"
        if "device_sq_draining" in step:
            found["device_sq_draining"] = step["device_sq_draining"]
        return found
