"""The run record counts the "must not happen" rules where the engine watches for them, so
the report's coverage can say a negative rule was exercised (models/catalog.py)."""

from __future__ import annotations

from models.enums import Attr, QPState, QPType
from models.wire import Fault, WireSettings
from qpconform.engine.connect import FAST, HOLD
from qpconform.engine.pair import PairHarness
from tests.fake_pair import FakePair
from tests.rule_log import RuleLog

S = QPState


def _pair(
    qp_type: QPType = QPType.RC, settings: WireSettings = FAST
) -> tuple[PairHarness, RuleLog]:
    log = RuleLog(strict=True)
    h = PairHarness(FakePair(qp_type, settings=settings), settings, recorder=log, sink=log,
                    time_scale=0.01)
    h.lifecycle.connect()
    return h, log


def test_a_quiet_window_watches_cq_overrun_and_a_drained_event_outside_sqd() -> None:
    h, log = _pair()
    h.quiet(0.01)
    assert {"ibta.cq.no_overrun", "ibta.sqd.drained_event.outside_sqd"} <= set(log.rules)


def test_after_a_silent_drain_a_quiet_window_watches_an_unasked_drained_event() -> None:
    h, log = _pair()
    h.modify("a", S.SQD)
    h.quiet(0.01)
    assert "ibta.sqd.drained_event.unasked" in log.rules


def test_after_a_notified_drain_a_quiet_window_watches_a_second_drained_event() -> None:
    h, log = _pair()
    h.modify("a", S.SQD, {"en_sqd_async_notify": 1}, Attr.EN_SQD_ASYNC_NOTIFY)
    h.quiet(0.01)
    assert "ibta.sqd.drained_event.once" in log.rules


def test_a_modify_watches_for_error_events() -> None:
    h, log = _pair()
    h.modify("a", S.RTS)
    assert "ibta.modify.no_error_event" in log.rules


def test_an_error_completion_watches_for_an_event_on_top() -> None:
    h, log = _pair()
    h.post.send("a", fault=Fault.BAD_LKEY)
    assert "pair.completion_error.no_event" in log.rules


def test_a_send_waiting_for_a_receive_is_noted_once() -> None:
    h, log = _pair(QPType.RC, HOLD)
    h.post.send("a")
    h.post.recv("a")  # another step: the send still waits, and is not noted again
    assert log.rules["pair.rc.rnr_wait"] == 1
