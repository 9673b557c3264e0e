"""How the connected-pair rule set compares the ends' states and follows a device.

`PairFollowing` is a part of `PairHarness` (qpconform/engine/pair.py): after every settle
both ends' states are read back and compared with the model (`check_states`; after an
automatic move, `sync_state`); a known state divergence is followed, an SQD drain the
device ends early or late is followed, and sends a known quirk says the device never
started (`instead = "sends_wait_for_doorbell"`) are followed back to before the wire ran
them (`Rewind`), held until the end's next post_send rings the doorbell.
`EndState` is what the rule set knows of one end beyond its ledger.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

from models.enums import EventType, QPState, WCStatus
from models.pair import PairModel
from models.pair_checks import SQ_DRAINING, STATE_RULE
from models.wire import SIDES

from .device import QueryResult
from .ledger import Because
from .quirks import reads_wrong

S = QPState
#: Seconds a drain with nothing in flight gets to end before sq_draining=1 is a divergence.
#: The drain must end, so it gets a must-wait bound like a lone QP's due completions; the
#: wire's error bound (0.5 s at the default settings) measures retries, not a drain the
#: device's scheduler runs late.
DRAIN_BOUND = 2.0


@dataclass
class EndState:
    """What the pair rule set knows of one end beyond its ledger."""

    state_because: Because = field(default_factory=lambda: Because(STATE_RULE, -1))
    resumed: set[int] = field(default_factory=set)  # sends started by SQD->RTS
    early_drain: bool = False  # the device ended a drain before the model (followed)


@dataclass
class Rewind:
    """The pair just before the wire ran the sends SQD->RTS resumed on `side`: where the
    harness goes back to when a known quirk says the device never started them."""

    side: str
    model: PairModel
    history: dict[str, int]  # length of each end's state history then
    because: dict[str, Because]
    booked: set[tuple[str, int]] = field(default_factory=set)  # what the wire booked for them


class PairFollowing:
    """PairHarness's comparison of the ends' states and its following of the device: it
    reads (and, going back, replaces) the harness's model, ends and step log, and judges
    through its engine."""

    def __init__(self, harness: Any) -> None:
        self.h = harness
        self.rewind: Rewind | None = None  # set between a resuming modify and its settle
        self.not_started: set[tuple[str, int]] = set()  # missing: never started (known)
        self.doorbell: set[str] = set()  # ends whose held sends the next post_send starts

    def check_states(self) -> None:
        for track in self.h.end_tracks():
            side = track.side
            assert side is not None
            got = self.h.dev.end(side).query()
            deadline = time.monotonic() + max(self.h.bound, DRAIN_BOUND * self.h.time_scale)
            while (
                got.state == S.SQD == track.model.state
                and got.sq_draining
                and not track.model.draining
                and time.monotonic() < deadline
            ) or (
                self.h.variant.connection_managed
                and got.state == S.RTS
                and track.model.state == S.ERR
                and time.monotonic() < deadline
            ):  # a drain with nothing in flight ends promptly, not necessarily at once; an
                # iWARP peer enters ERR when it sees the connection end (TCP), a moment later
                time.sleep(0.01)
                got = self.h.dev.end(side).query()
            self.compare_state(side, got)

    def sync_state(self, side: str | None) -> None:
        """After an automatic transition: wait (bounded) for the device to leave the old
        state, then compare, so a known different state is followed before its flushes."""
        assert side is not None
        before = self.h.model.qp(side).state
        got = self.h.dev.end(side).query()
        deadline = time.monotonic() + self.h.bound
        while got.state in (S.RTS, S.SQD) and got.state != before and time.monotonic() < deadline:
            time.sleep(0.005)
            got = self.h.dev.end(side).query()
        self.compare_state(side, got)

    def compare_state(self, side: str, got: QueryResult) -> None:
        track, mine = self.h.ends[side], self.h.end_state[side]
        qp = track.model
        if got.state not in qp.reported():  # iwarp: IDLE may read back as INIT
            why = mine.state_because
            d = self.h.divergence(
                track, "state", why.rule, why.origin, f"state {qp.state.name}",
                f"state {got.state.name}", [f"state={got.state.name}"],
            )
            quirk = self.h.diverge(track, d)
            if quirk is not None and not reads_wrong(quirk):
                self.h.verdict.follow_state(track, got.state, track.last())
                mine.state_because = Because(STATE_RULE, track.last())
        elif qp.state == S.SQD and got.sq_draining is not None and got.sq_draining != qp.draining:
            d = self.h.divergence(
                track, "state", SQ_DRAINING, track.last(), f"sq_draining={int(qp.draining)}",
                f"sq_draining={int(got.sq_draining)}", [f"sq_draining={int(got.sq_draining)}"],
            )
            if self.h.diverge(track, d) is None:
                return
            if got.sq_draining:
                self.follow_draining(side)
            else:
                self.follow_drained(side)
                mine.early_drain = True  # its SQ_DRAINED may still come

    def mark_rewind_point(self, side: str) -> None:
        """Remember the pair as it is before the wire runs the sends SQD->RTS resumed."""
        self.rewind = Rewind(
            side,
            copy.deepcopy(self.h.model),
            {s: len(self.h.ends[s].history) for s in SIDES},
            {s: self.h.end_state[s].state_because for s in SIDES},
        )

    def rewind_not_started(self) -> None:
        """Known missing completions of sends the device never started (SQD->RTS did not
        resume them): go back to before the wire ran them; they wait for the doorbell.

        Followed only when everything the wire booked for them went missing (the device
        did nothing with them); otherwise the pair is desynced, as for any known loss."""
        lost, self.not_started = self.not_started, set()
        point = self.rewind
        if not lost:
            return
        if point is None or not point.booked or lost != point.booked:
            self.h.desynced = True
            return
        self.h.model = point.model
        for s in SIDES:
            track = self.h.ends[s]
            track.model = self.h.model.qp(s)
            del track.history[point.history[s]:]
            self.h.end_state[s].state_because = point.because[s]
            track.ledger.excused -= {w for side, w in lost if side == s}
        silent = self.h.ends[point.side].ledger.silent  # unsignaled: the wire ran them silently
        held = sorted(w for w in self.h.model.qp(point.side).queues.outstanding_sends
                      if (point.side, w) in lost or w in silent)
        for w in held:
            silent.pop(w, None)
        self.h.model.qp(point.side).queues.hold(held)  # waits for the doorbell
        self.h.end_state[point.side].resumed -= set(held)
        self.doorbell.add(point.side)
        self.log(point.side, f"SQD->RTS starts {held}",
                         "not started: they wait for the next post_send (known quirk)")

    def ring_doorbell(self, side: str) -> None:
        """An accepted post_send in RTS on an end whose held sends wait: its doorbell
        starts them (below RTS the post rings nothing, and they wait on)."""
        if side not in self.doorbell or self.h.model.qp(side).state != S.RTS:
            return
        self.doorbell.discard(side)
        started = self.h.model.doorbell(side)
        if started:
            self.log(side, "-", f"the post's doorbell starts the held sends {started}")

    def follow_draining(self, side: str) -> None:
        """The device still drains where the model's drain is over (known): the model
        drains on with it, so no SQ_DRAINED is owed and a drain-dependent refusal (SQD
        exit while draining) is judged in the state the device is in."""
        track = self.h.ends[side]
        track.model.draining = True
        track.ledger.unrequire(EventType.SQ_DRAINED)
        self.log(side, "drain over", "still draining (known quirk): the model drains on")

    def follow_drained(self, side: str) -> None:
        """The device ended the drain early (known): its started sends are held, not done.

        Sends the model already let finish on the wire (their completions, and the peer's
        receive completions, are due) are excused: the device runs them later, if ever.
        """
        held = self.h.model.follow_drained(side)
        mine = self.h.ends[side].ledger
        peer = self.h.ends[self.h.model.peer_of(side)].ledger
        late = [d for d in mine.due["send"] if d.completion.status == WCStatus.SUCCESS]
        for d in late:
            mine.due["send"].remove(d)
            mine.excused.add(d.completion.wr_id)
            mark = f"send_wr={d.completion.wr_id}"
            for p in [p for p in peer.due["recv"] if mark in p.tags]:
                peer.due["recv"].remove(p)
                peer.excused.add(p.completion.wr_id)
        self.h.desynced = self.h.desynced or bool(late)
        self.log(side, "drain over",
                         f"held {held}, late {[d.completion.wr_id for d in late]}")

    def log(self, side: str, expected: str, observed: str) -> None:
        """A step in the log saying how the model followed the device."""
        self.h.steps.append(
            {"verb": "follow", "side": side, "expected": expected, "observed": observed}
        )
