"""The end of a pair's observation: quiet windows mid-case end none, a finished pair is parked.

A pair's quiet() mid-case is followed by more polls (its next steps), so what comes
late after it is still judged against the step that forbade it; only the pair's end
ends its observation. At the end of a case or example the pair is parked
(qpconform/engine/park.py): polled while other QPs are checked, destroyed once the
must-wait bound has passed since its last step, and the real length of that last
observation is noted as the window that ended it. A late forbidden completion seen in a
parked pair is a divergence (recorded, kept for the fixtures to fail a test with, never
raised into the QPs being checked); everything parked is freed by drain and release.
"""

from __future__ import annotations

import time

import pytest

from models.enums import QPType, WCStatus
from qpconform.engine.device import Completion
from qpconform.engine.judge import DivergenceError
from qpconform.engine.pair import PairHarness
from qpconform.engine.pair_parked import PARK_BASE, PARK_LIMIT
from qpconform.engine.park import AFTER_END, Park
from qpconform.engine.records import DivergenceList
from qpconform.engine.timing import DeliveryLog, Windows, unsure
from tests.fake_pair import FakePair

#: The must-wait bound of these tests (s); a parked pair is held PARK_BASE times that.
MUST_WAIT = 0.05
HOLD = PARK_BASE * MUST_WAIT


class CountingPair(FakePair):
    """A fake pair that counts its closes (the park must free every pair it holds)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.closes = 0

    def close(self) -> None:
        self.closes += 1


def _log() -> DeliveryLog:
    log = DeliveryLog()
    log.follow(Windows(0.01, MUST_WAIT, "test"))
    return log


def _pair(park: Park | None, log: DeliveryLog, sink: DivergenceList | None = None
          ) -> PairHarness:
    h = PairHarness(CountingPair(QPType.RC), sink=sink, time_scale=0.01, delivery=log,
                    park=park)
    h.lifecycle.connect()
    return h


def _send(h: PairHarness) -> int:
    """One SEND a -> b that completes on both ends; returns its wr_id."""
    h.post.recv("b")
    return h.post.send("a")


def _late_duplicate(h: PairHarness, wr_id: int, after: float) -> None:
    """Plant a second completion of `wr_id` on end a, delivered `after` s from now."""
    end = h.dev.end("a")
    dup = Completion(wr_id, "send", WCStatus.SUCCESS, end.qp_num)
    end.delayed.append((time.monotonic() + after, dup))


def test_a_mid_case_quiet_window_ends_no_observation() -> None:
    """The suites call quiet() several times in a case: none of them is the end of the
    pair's observation, so none is noted as closed (the run's verdict would read
    "timing unsure" for a window that ended nothing)."""
    log = _log()
    h = _pair(None, log)
    _send(h)
    h.quiet()
    h.quiet()
    assert log.closed == {"completion": [], "event": []}
    h.close()


def test_a_late_completion_after_a_mid_case_quiet_window_is_judged_at_the_next_step() -> None:
    """Why a mid-case window ends nothing: a duplicate completion arriving after it is
    polled at the pair's next step and judged against the step that made the first one
    due (the SEND's wire step), not lost and not blamed on the step that saw it."""
    h = _pair(None, _log())
    wr = _send(h)
    h.quiet()
    _late_duplicate(h, wr, 0.0)
    origins: list[int] = []
    placed = h.divergence

    def spy(track, kind, rule, origin, *args, **kwargs):  # type: ignore[no-untyped-def]
        origins.append(origin)
        return placed(track, kind, rule, origin, *args, **kwargs)

    h.divergence = spy  # type: ignore[method-assign]
    with pytest.raises(DivergenceError) as caught:
        h.post.recv("b")
    d = caught.value.record
    assert d.kind == "completion" and "again" in d.observed and f"wr {wr}" in d.expected
    step = h.ends["a"].steps[origins[0]]
    assert step["verb"] == "wire" and step["wr_id"] == wr  # the SEND's wire step


def test_a_parked_pair_is_observed_then_destroyed_and_its_last_window_noted() -> None:
    """park() keeps the pair open; the park's polls (any collect of another pair) close it
    at the first poll once the must-wait bound has passed since its last step, and note
    that observation as the window that ended it: no shorter than the bound, so no
    delivery up to the bound makes the verdict unsure."""
    park, log = Park(), _log()
    h = _pair(park, log)
    _send(h)
    h.quiet()
    h.park()
    assert h.parked and not h.ended and h.dev.closes == 0
    assert log.closed == {"completion": [], "event": []}
    park.poll()
    assert park.pairs and h.dev.closes == 0  # the bound has not passed yet
    log.add("completion", MUST_WAIT * 0.9, "ibta.err.send_error on RC")  # a slow one
    time.sleep(HOLD * 1.2)
    other = _pair(park, log)  # its steps' polls poll the park too
    other.query("a")
    other.watch.collect()
    assert not park.pairs and h.ended and h.dev.closes == 1
    for kind in ("completion", "event"):
        assert log.closed[kind] and min(log.closed[kind]) >= HOLD
    assert unsure(log.samples, log.closed) == []
    other.close()


def test_a_late_forbidden_completion_in_a_parked_pair_is_a_recorded_divergence() -> None:
    """A duplicate completion arriving after the example ended, while its pair is parked:
    judged against the SEND's step, recorded (the sink), marked as found after the end
    (it was not shrunk), kept by the park (the pair being checked is not failed by it),
    and raised by raise_found; the broken pair is destroyed at once."""
    park, log, sink = Park(), _log(), DivergenceList()
    h = _pair(park, log, sink)
    wr = _send(h)
    h.quiet()
    _late_duplicate(h, wr, MUST_WAIT / 3)
    h.park()
    other = _pair(park, log)
    deadline = time.monotonic() + 1.0
    while not park.found and time.monotonic() < deadline:
        other.query("a")  # each of its steps polls the parked pair too
        other.watch.collect()
    assert len(park.found) == 1 and not park.pairs and h.dev.closes == 1
    assert len(sink.items) == 1
    d = sink.items[0]
    assert d.kind == "completion" and "again" in d.observed
    assert d.context["after_end"] == AFTER_END
    assert log.closed == {"completion": [], "event": []}  # a broken pair's window: none
    with pytest.raises(DivergenceError) as caught:
        park.raise_found()
    assert AFTER_END in str(caught.value)
    park.raise_found()  # raised once
    other.close()


def test_drain_waits_out_every_hold_and_frees_every_pair() -> None:
    """The end of the session: drain observes until each parked pair's hold has passed,
    notes each window, and destroys them all."""
    park, log = Park(), _log()
    pairs = [_pair(park, log) for _ in range(3)]
    for h in pairs:
        _send(h)
        h.park()
    start = time.monotonic()
    park.drain()
    assert time.monotonic() - start >= HOLD * 0.5
    assert not park.pairs and all(h.dev.closes == 1 for h in pairs)
    assert len(log.closed["completion"]) == 3 and min(log.closed["completion"]) >= HOLD


def test_release_frees_every_pair_without_judging() -> None:
    """A failure or Ctrl-C: release destroys every parked pair at once, noting no window
    (nothing was watched to its end) and judging nothing more."""
    park, log = Park(), _log()
    pairs = [_pair(park, log) for _ in range(2)]
    for h in pairs:
        h.park()
    park.release()
    assert not park.pairs and all(h.dev.closes == 1 for h in pairs)
    assert log.closed == {"completion": [], "event": []}


def test_an_interrupted_drain_still_frees_every_pair() -> None:
    """Ctrl-C while the session's end waits out the holds: the pairs are destroyed anyway."""
    park, log = Park(), _log()
    h = _pair(park, log)
    h.park()

    def interrupted() -> None:
        raise KeyboardInterrupt

    h.parkable.park_poll = interrupted  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        park.drain()
    assert not park.pairs and h.dev.closes == 1


def test_a_pair_with_no_park_or_an_unknown_divergence_is_closed_at_once() -> None:
    """No park (the self-tests, a caller that wants the old behaviour), or an unknown
    divergence raised (what comes now would be its consequence): closed at once."""
    log = _log()
    h = _pair(None, log)
    h.park()
    assert h.ended and h.dev.closes == 1
    park = Park()
    broken = _pair(park, log)
    broken.judge.raised = True
    broken.park()
    assert not park.pairs and broken.dev.closes == 1


def test_park_hold_follows_the_run_tail_up_to_a_limit() -> None:
    """The hold is PARK_BASE times the must-wait bound, or 1.5 times the run's slowest pair
    delivery when longer, never more than PARK_LIMIT times the bound; a pair already
    parked follows a slower delivery seen after it was parked."""
    park, log = Park(), _log()
    h = _pair(park, log)
    assert h.parkable.park_hold() == pytest.approx(HOLD)
    h.park()
    assert park.pairs[0].until == pytest.approx(h.parkable.last_active() + HOLD)
    log.add("completion", 1.6 * MUST_WAIT, "ibta.err.recv_error on RC")
    assert h.parkable.park_hold() == pytest.approx(1.5 * 1.6 * MUST_WAIT)
    assert park.pairs[0].until == pytest.approx(h.parkable.last_active() + 1.5 * 1.6 * MUST_WAIT)
    log.add("event", 100 * MUST_WAIT, "QP_FATAL on RC")
    assert h.parkable.park_hold() == pytest.approx(PARK_LIMIT * MUST_WAIT)
    park.release()


def test_the_session_end_waits_out_the_last_pairs_and_fails_on_what_they_show() -> None:
    """The pair_park fixture's teardown (the end of a worker's session): the last parked
    pairs are observed until their hold has passed, then destroyed; a late forbidden
    completion one of them shows fails the session there, never silently."""
    from fixtures.device_fixtures import pair_park

    session = pair_park.__wrapped__()  # the generator pytest drives
    park = next(session)
    log = _log()
    clean, broken = _pair(park, log), _pair(park, log)
    _send(clean)
    wr = _send(broken)
    _late_duplicate(broken, wr, MUST_WAIT / 3)
    clean.park()
    broken.park()
    with pytest.raises(DivergenceError) as caught:
        next(session)  # teardown
    assert AFTER_END in str(caught.value)
    assert not park.pairs and clean.dev.closes == 1 and broken.dev.closes == 1
    assert log.closed["completion"] and min(log.closed["completion"]) >= HOLD


def test_destroying_an_end_mid_case_observes_its_window_first() -> None:
    """An end destroyed in the middle of a case takes its CQs with it: it is first observed
    for the completion window since the pair's last step, so a forbidden item due inside
    that window is seen (before: one poll, and the duplicate below went unseen)."""
    h = _pair(None, _log())
    wr = _send(h)
    _late_duplicate(h, wr, h.quiet_window / 2)  # due to arrive inside the window
    began = time.monotonic()
    with pytest.raises(DivergenceError) as caught:
        h.lifecycle.destroy("a")
    assert "again" in caught.value.record.observed  # seen before the CQs went
    assert time.monotonic() - began < 1.0  # bounded: a window, not a must-wait
    h.close()
