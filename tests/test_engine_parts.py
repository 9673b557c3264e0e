"""The engine's parts (qpconform/engine/core.py): one engine behind them all, the lone
checker's watch the one that retires QPs, and delivery samples kept honest by the
delivery windows part (a delay the engine caused, or a transport timer's, widens no
delivery window)."""

from __future__ import annotations

import time

from models.enums import QPType
from qpconform.engine.lone import Checker
from qpconform.engine.records import DivergenceList
from qpconform.engine.retiring import RetiringWatch
from qpconform.engine.timing import TIMER
from tests.fake_device import FakeDevice


def _checker() -> Checker:
    return Checker(FakeDevice(), settle_window=0.01, must_wait=0.1, sink=DivergenceList())


def test_the_parts_serve_one_engine() -> None:
    chk = _checker()
    for part in (chk.log, chk.windows, chk.match, chk.watch, chk.verdict, chk.roster):
        assert part.engine is chk
    assert chk.match.log is chk.log and chk.verdict.windows is chk.windows
    assert isinstance(chk.watch, RetiringWatch) and chk.watch.roster is chk.roster
    qp = chk.open_qp(QPType.RC)
    assert chk.roster.live == [qp] and chk.tracks() == [qp.track]
    chk.close()
    assert chk.roster.live == [] and chk.tracks() == []


def test_delivery_samples_skip_the_engines_own_delays_and_name_timers() -> None:
    chk = _checker()
    chk.timer_rules = frozenset({"a.timer.rule"})
    now = time.monotonic()
    chk.polls_held_until = now
    chk.windows.delivered("completion", now - 1.0, "held back", "some.rule")
    assert chk.delivery.slowest("lone QP completion") == 0.0  # waited for the engine
    chk.windows.delivered("completion", now, "on time", "some.rule")
    chk.windows.delivered("completion", now, "a timer", "a.timer.rule")
    chk.windows.delivered("event", now, "an event")
    assert len(chk.delivery.samples["lone QP completion"]) == 1
    assert len(chk.delivery.samples[TIMER]) == 1
    assert len(chk.delivery.samples["lone QP event"]) == 1
