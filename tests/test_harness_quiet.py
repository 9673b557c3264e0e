"""The quiet window runs only where a step owes one, and nothing late escapes (fake device
delivering asynchronously)."""

from __future__ import annotations

import time

import pytest

from models.enums import Attr, QPState, QPType
from qpconform.engine.judge import DivergenceError
from qpconform.engine.lone import CheckedQP, Checker
from qpconform.engine.park import Park
from qpconform.engine.records import DivergenceList
from tests.fake_device import LATE, FakeDevice
from tests.sequences import drain

S = QPState
WINDOW = 0.2  # completions
EVENTS = 0.1


def _checker(device: FakeDevice, must_wait: float = 1.0) -> Checker:
    return Checker(device, settle_window=WINDOW, event_window=EVENTS, must_wait=must_wait,
                   sink=DivergenceList())


def _timed_settle(checker: Checker) -> float:
    start = time.monotonic()
    checker.settle()
    return time.monotonic() - start


def _timed_serve(checker: Checker) -> float:
    start = time.monotonic()
    checker.serve()
    return time.monotonic() - start


def test_a_step_that_owes_nothing_costs_one_poll() -> None:
    checker = _checker(FakeDevice())
    qp = checker.open_qp(QPType.UD)
    qp.bring_to(S.RTS)  # RESET -> INIT -> RTR -> RTS: nothing asynchronous can follow
    assert _timed_settle(checker) < WINDOW / 4
    qp.query()
    assert _timed_settle(checker) < WINDOW / 4
    assert _timed_serve(checker) < WINDOW / 4  # destroy and the end of a run: no wait either


@pytest.mark.parametrize("target", [S.ERR, S.SQD])
def test_a_move_that_can_raise_an_event_late_opens_the_event_window(target: QPState) -> None:
    checker = _checker(FakeDevice())
    qp = checker.open_qp(QPType.UD)
    qp.bring_to(S.RTS)
    qp.bring_to(target)
    assert _timed_settle(checker) < EVENTS / 4  # later steps poll through the window ...
    assert EVENTS * 0.8 <= _timed_serve(checker) < WINDOW  # ... destroy waits out its rest
    assert _timed_serve(checker) < EVENTS / 4  # once


def test_reset_opens_a_window_only_when_it_discards_wrs() -> None:
    checker = _checker(FakeDevice())
    qp = checker.open_qp(QPType.UD)
    qp.bring_to(S.INIT)
    qp.bring_to(S.RESET)  # nothing outstanding: nothing can come
    assert _timed_serve(checker) < EVENTS / 4
    qp.bring_to(S.INIT)
    qp.post_recv()
    qp.bring_to(S.RESET)  # the receive is discarded: it must never complete
    assert _timed_serve(checker) >= WINDOW * 0.8


def test_steps_that_outlast_the_window_pay_nothing_for_it() -> None:
    checker = _checker(FakeDevice())
    qp = checker.open_qp(QPType.UD)
    qp.bring_to(S.ERR)
    deadline = time.monotonic() + WINDOW
    while time.monotonic() < deadline:
        qp.query()
        checker.settle()
    assert _timed_serve(checker) < WINDOW / 4


def test_a_refused_post_opens_a_window() -> None:
    checker = _checker(FakeDevice())
    qp = checker.open_qp(QPType.UD)
    qp.bring_to(S.INIT)
    qp.post_send()  # refused in INIT: it must never run, so the engine watches for it
    assert _timed_serve(checker) >= WINDOW * 0.8


def test_due_completions_are_waited_for_not_windowed() -> None:
    """A flush that is due ends the wait as soon as it comes (the device is slow here)."""
    checker = _checker(FakeDevice(delay=0.05))
    qp = checker.open_qp(QPType.UD)
    qp.bring_to(S.ERR)
    checker.settle()
    qp.post_recv()  # accepted in ERR: its flush is due
    took = _timed_settle(checker)
    assert 0.05 <= took < WINDOW


def test_a_late_wr_discarded_by_reset_is_caught_before_destroy() -> None:
    checker = _checker(FakeDevice(["wr_run_after_reset"], delay=0.05))
    qp = checker.open_qp(QPType.UD)
    qp.bring_to(S.INIT)
    qp.post_recv()
    checker.settle()
    qp.bring_to(S.RESET)
    reset_step = len(qp.steps) - 1
    checker.settle()  # too early: nothing has come yet
    with pytest.raises(DivergenceError) as err:
        qp.destroy()  # waits out the window first
    assert err.value.record.rule_id == "ibta.reset.discard"
    assert err.value.record.steps[reset_step]["verb"] == "modify"
    assert err.value.record.state == "INIT"  # placed at the ->RESET step, not at the settle


def test_a_late_stray_completion_is_caught_at_a_later_poll_with_its_step() -> None:
    """No window after a post in ERR; a duplicate that comes later is still judged, against
    the step that made the first completion due."""
    checker = _checker(FakeDevice(["late_duplicate_completion"]))
    qp = checker.open_qp(QPType.UD)
    qp.bring_to(S.ERR)
    checker.settle()
    qp.post_recv()
    post_step = len(qp.steps) - 1
    checker.settle()  # the flush: due, seen, no window
    time.sleep(LATE)
    with pytest.raises(DivergenceError) as err:
        qp.query()
        checker.settle()
    record = err.value.record
    assert record.observed.startswith("again:")
    assert record.verb == "post_recv"
    assert len(record.steps) > post_step and record.steps[post_step]["verb"] == "post_recv"


def test_a_forced_window_always_waits() -> None:
    checker = _checker(FakeDevice())
    qp = checker.open_qp(QPType.UD)
    qp.bring_to(S.INIT)
    start = time.monotonic()
    checker.settle(0.1)
    assert time.monotonic() - start >= 0.1


def test_a_late_event_is_judged_against_the_move_that_raised_it() -> None:
    """SQD->SQD raises SQ_DRAINED again, delivered late, after the next modify (SQD->RTS,
    which forbids what SQD->SQD forbids, so it overlaps the event window): the record names
    SQD->SQD, not SQD->RTS."""
    checker = _checker(FakeDevice(["sq_drained_on_sqd_to_sqd"], delay=EVENTS / 4))
    qp = checker.open_qp(QPType.RC)
    drain(qp, True)
    qp.settle()
    qp.modify(*qp.values.transition_attrs(S.SQD))
    with pytest.raises(DivergenceError) as err:
        qp.bring_to(S.RTS)
        checker.settle(EVENTS)
    assert err.value.record.context["transition"] == "SQD->SQD"
    assert err.value.record.rule_id.startswith("ibta.sqd.drained_event")


def _parking(device: FakeDevice) -> Checker:
    """A checker that parks (as the suites' and the lone machine's do): it overlaps event
    windows where a modify judges events alike; one that does not waits them all out."""
    checker = _checker(device)
    checker.parking = Park()
    return checker


def _timed_modify(qp: CheckedQP, nxt: QPState) -> float:
    start = time.monotonic()
    qp.modify(*qp.values.transition_attrs(nxt))
    return time.monotonic() - start


def test_a_modify_that_judges_events_alike_overlaps_the_event_window() -> None:
    checker = _parking(FakeDevice())
    qp = checker.open_qp(QPType.UD)
    qp.bring_to(S.ERR)  # the event window opens: SQ_DRAINED and the QP errors forbidden
    assert qp.track.events_left() > EVENTS / 2
    assert _timed_modify(qp, S.RESET) < EVENTS / 4  # RESET forbids them by the same rules
    qp.bring_to(S.RTS)
    qp.bring_to(S.ERR)
    assert qp.track.events_left() > EVENTS / 2
    start = time.monotonic()
    qp.modify(qp.values.attrs_for(Attr.STATE, S.RTS), Attr.STATE)  # ERR->RTS: refused
    assert time.monotonic() - start < EVENTS / 4 and qp.model.state == S.ERR


@pytest.mark.parametrize("draining", [False, True], ids=["drained", "draining"])
def test_leaving_sqd_overlaps_the_event_window_only_once_drained(draining: bool) -> None:
    # rxe 6.12 refuses to leave SQD while its drain runs: the wait gives the drain time; a
    # move out of SQD differing in SQ_DRAINED alone overlaps once the device says it ended
    device = FakeDevice(["refuse_sqd_exit_draining"] if draining else [])
    checker = _parking(device)
    qp = checker.open_qp(QPType.UD)
    drain(qp, True)  # RTS->SQD asking for SQ_DRAINED: owed, not forbidden as SQD->RTS does
    assert qp.track.events_left() > EVENTS / 2
    start = time.monotonic()
    if draining:
        with pytest.raises(DivergenceError):  # the planted refusal itself, after the wait
            qp.modify(*qp.values.transition_attrs(S.RTS))
        assert time.monotonic() - start >= EVENTS / 2
    else:
        qp.modify(*qp.values.transition_attrs(S.RTS))
        assert time.monotonic() - start < EVENTS / 4


def test_a_new_drain_waits_out_the_event_window() -> None:
    # RTS->SQD restarts the SQ_DRAINED count: a late event of the move before must be
    # judged first
    checker = _parking(FakeDevice())
    qp = checker.open_qp(QPType.UD)
    qp.bring_to(S.RTS)
    qp.bring_to(S.SQD)
    qp.bring_to(S.RTS)  # out of SQD: the event window opens (a late SQ_DRAINED may come)
    assert qp.track.events_left() > EVENTS / 2
    assert _timed_modify(qp, S.SQD) >= EVENTS / 2


def test_an_event_raised_late_by_a_move_is_judged_against_it_after_an_overlapping_modify(
) -> None:
    # RTS->ERR raises a forbidden QP_FATAL, delivered after the next modify (ERR->RESET,
    # which forbids it by the same rule and so did not wait): the record names RTS->ERR, as
    # if the modify had waited
    checker = _parking(FakeDevice(["error_event_on_err"], delay=EVENTS / 2))
    qp = checker.open_qp(QPType.UD)
    qp.bring_to(S.RTS)
    qp.bring_to(S.ERR)
    assert _timed_modify(qp, S.RESET) < EVENTS / 4
    with pytest.raises(DivergenceError) as err:
        checker.settle(EVENTS)
    assert err.value.record.context["transition"] == "RTS->ERR"
    assert err.value.record.rule_id == "ibta.modify.no_error_event"


def test_a_move_into_sqd_waits_out_the_event_window() -> None:
    # the drain it may start raises SQ_DRAINED soon (rxe 6.4+ on SQD->SQD): that event is
    # judged in its own context, not the window's
    checker = _parking(FakeDevice())
    qp = checker.open_qp(QPType.UD)
    drain(qp, False)
    assert qp.track.events_left() > EVENTS / 2
    assert _timed_modify(qp, S.SQD) >= EVENTS / 2


def test_a_checker_that_does_not_park_waits_every_event_window_out() -> None:
    # the lone machine's blocking replay: its examples must repeat exactly
    checker = _checker(FakeDevice())
    qp = checker.open_qp(QPType.UD)
    qp.bring_to(S.ERR)
    assert _timed_modify(qp, S.RESET) >= EVENTS / 2


def test_an_srq_qp_waits_out_the_event_window(monkeypatch: pytest.MonkeyPatch) -> None:
    # Last WQE Reached is counted per entry into ERR: a modify must not overlap its window
    checker = _parking(FakeDevice())
    qp = checker.open_qp(QPType.UD)
    qp.bring_to(S.ERR)
    monkeypatch.setattr(qp.model, "srq", object())  # as an SRQ's QP (only `is None` is asked)
    assert not qp.track.overlap_events(qp.model.modify(*qp.values.transition_attrs(S.RESET)))
