"""Observing the tracked QPs: one poll of every CQ and event channel, and the bounded waits
around it (a deliberate quiet window, then a longer bounded wait only while something is
still due). What the polls deliver is matched by matching.py; what never came is judged
when a wait ends."""

from __future__ import annotations

import select
import time

from .delivery_windows import DeliveryWindows
from .ledger import QUEUES
from .matching import Matcher
from .rule_set import RuleSet
from .steplog import StepLog
from .track import Track


class Watch:
    """Polls and waits on the engine's tracks (and its parked pairs)."""

    def __init__(
        self, engine: RuleSet, log: StepLog, windows: DeliveryWindows, match: Matcher
    ) -> None:
        self.engine = engine
        self.log = log
        self.windows = windows
        self.match = match

    def collect(self) -> None:
        """Poll every tracked QP once: completions (send CQ first), then events; and every
        parked pair (their own divergences are kept by the park, never raised here)."""
        engine = self.engine
        if engine.parking is not None:
            engine.parking.poll()
        tracks = engine.tracks()
        for track in tracks:
            done = track.handle.poll()
            for wc in sorted(done, key=lambda c: QUEUES.index(c.queue)):
                target = engine.route(track, wc)
                if target is not None:
                    self.match.completion(target, wc)
        self.take_events(tracks, 0.0)

    def collect_events(self, track: Track) -> None:
        """Take the events that already arrived (no wait), so an event is judged in the state
        the verb that raised it left (completions wait for the settle that logs them)."""
        track.reading_events()
        for ev in track.handle.events(0.0):
            self.engine.on_event(track, ev.event_type)

    def take_events(self, tracks: list[Track], timeout: float) -> bool:
        """Wait up to `timeout` for an event on any of `tracks` and handle what arrived.

        Handles with an `event_fd` are watched together with one select(); the others are
        asked in turn (the first with the timeout). Returns whether anything arrived.
        """
        by_fd: dict[int, Track] = {}
        asked: list[Track] = []
        for track in tracks:
            track.reading_events()
            fd = getattr(track.handle, "event_fd", None)
            if fd is None:
                asked.append(track)
            else:
                by_fd[fd] = track
        got = False
        if by_fd:
            wait = 0.0 if asked else timeout
            ready = select.select(list(by_fd), [], [], wait)[0]
            for fd in ready:
                for ev in by_fd[fd].handle.events(0.0):
                    got = True
                    self.engine.on_event(by_fd[fd], ev.event_type)
        for i, track in enumerate(asked):
            for ev in track.handle.events(timeout if i == 0 and not got else 0.0):
                got = True
                self.engine.on_event(track, ev.event_type)
        return got

    def block(self, timeout: float) -> None:
        """Wait up to `timeout` for an event on any tracked QP, handling what arrives."""
        start = time.monotonic()
        got = self.take_events(self.engine.tracks(), timeout)
        left = timeout - (time.monotonic() - start)
        if not got and left > 0 and not self.wakes_on_arrival():  # else: a completion came
            time.sleep(left)

    def waiting(self) -> bool:
        """Is anything still due on a tracked QP?"""
        return any(t.ledger.waiting() for t in self.engine.tracks())

    def wait(self, window: float, bound: float) -> float:
        """Observe for `window` s (the deliberate quiet window), then up to `bound` s more
        while anything is due. Returns the seconds waited."""
        poll = self.engine.poll_interval if not self.wakes_on_arrival() else max(window, bound)
        start = time.monotonic()
        deadline = start + window
        while True:
            self.collect()
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.block(min(poll, left))
        deadline = time.monotonic() + bound
        while self.waiting() and time.monotonic() < deadline:
            self.block(min(poll, max(0.0, deadline - time.monotonic())))
            self.collect()
        return time.monotonic() - start

    def wakes_on_arrival(self) -> bool:
        """Do all tracked QPs' waits end as soon as anything arrives on any of them (a
        device behind an executor: qpconform/adapters/remote_device.py)? Then one wait
        covers the window instead of a poll every poll_interval: each poll costs a round
        trip there, and nothing is seen later for it."""
        tracks = self.engine.tracks()
        return bool(tracks) and all(
            getattr(t.handle, "wakes_on_arrival", False) for t in tracks)

    def observe(self, window: float, bound: float) -> None:
        """One bounded observation of every tracked QP (a quiet `window`, then up to `bound`
        s while something is due); then what is missing is judged."""
        self.log.open_settle(window)
        try:
            waited = self.wait(window, bound)
            self.match.missing(waited)
        finally:
            self.log.close_settle()

    def poll_and_settle(self, bound: float) -> None:
        """One poll of every tracked QP, the bounded wait only while something is due, and
        no sleeping otherwise: the cheap check after a step.

        A stray completion or event that comes later is judged at a later poll, against
        the ledger entry (and step) that forbade it; quiet windows that expired meanwhile
        are closed (they were observed by the polls of the steps that ran).
        """
        self.observe(0.0, bound)
        for track in self.engine.tracks():
            if track.quiet_left() == 0.0:
                track.close_quiet()

    def serve_events(self, track: Track, bound: float) -> bool:
        """Before a modify that could judge an event otherwise (Track.overlap_events): wait
        out the rest of the QP's event window, observing every QP, so an event the previous
        move raised late is judged against that move. Returns whether it waited (what it
        delivered may have changed the model)."""
        left = track.events_left()
        if left > 0:
            self.observe(left, bound)
        return left > 0

    def serve_quiet(self, bound: float, tracks: list[Track] | None = None) -> None:
        """Wait out what is left of the quiet windows of `tracks` (default: all), observing
        every tracked QP, then close them. Runs before what would end the observation."""
        chosen = self.engine.tracks() if tracks is None else tracks
        left = max((t.quiet_left() for t in chosen), default=0.0)
        self.observe(left, bound)
        delivery = self.engine.delivery
        for track in chosen:
            if track.quiet_from is not None:  # this window ends the QP's observation
                delivery.note_closed(self.windows.kind("completion"), track.quiet_len)
                delivery.note_closed(self.windows.kind("event"), track.events_len)
            track.close_quiet()
