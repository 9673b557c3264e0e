"""Quiet windows per device family, and the report's warning when a delivery outran them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fixtures.record_writer import record_timing
from fixtures.windows import WINDOWS_FILE, family_windows
from qpconform import cli
from qpconform.engine.timing import DeliveryLog, Windows, unsure


def test_the_shipped_table_has_rxe_and_a_default() -> None:
    rxe = family_windows("rxe")
    assert rxe.source.startswith("windows.toml [rxe]")
    other = family_windows("mlx5")
    assert other.source.startswith("windows.toml [default]")
    assert 0 < rxe.quiet <= rxe.must_wait
    assert WINDOWS_FILE.is_file()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[default]\nquiet_window = 0.1\n", "must be numbers"),
        ("[default]\nquiet_window = 'soon'\nmust_wait = 1\n", "must be numbers"),
        ("[default]\nquiet_window = 2\nmust_wait = 1\n", "event_window <= must_wait"),
        ("[rxe]\nquiet_window = 0.1\nmust_wait = 1\n", "no [mlx5] and no [default]"),
        ("quiet_window = [", "cannot read"),
    ],
)
def test_a_bad_table_is_a_clear_error(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "windows.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        family_windows("mlx5", path)


class _Recorder:
    def __init__(self) -> None:
        self.settings: dict[str, Any] = {}


def test_a_delivery_slower_than_the_window_widens_it_for_the_rest_of_the_run() -> None:
    log = DeliveryLog()
    log.follow(Windows(0.1, 1.0, "test", 0.03))
    assert log.window("completion", 0.1) == 0.1
    log.add("completion", 0.002)
    assert log.widened == []
    log.add("completion", 0.218)
    assert log.window("completion", 0.1) == pytest.approx(1.5 * 0.218)
    assert log.widened == ["completion window 100 -> 327 ms after a 218 ms completion"]
    log.add("event", 5.0)  # bounded by must-wait
    assert log.window("event", 0.03) == 1.0
    assert "capped at must-wait" in log.widened[-1]
    rec = _Recorder()
    rec.windows_closed, rec.windows_widened, rec.delivery = {}, [], {}
    record_timing(rec, log, Windows(0.1, 1.0, "test"))
    assert "quiet window 100 ms" in rec.settings["windows"]
    assert rec.windows_widened == log.widened


def test_a_window_shorter_than_the_slowest_delivery_is_unsure() -> None:
    log = DeliveryLog()
    log.follow(Windows(0.1, 1.0, "test"))
    log.note_closed("completion", 0.1)  # closed before the slow one was seen
    log.add("completion", 0.218, "pair.send.delivered on UC")
    log.add("completion", 0.002, "ibta.err.flush on RC")
    log.note_closed("completion", log.window("completion", 0.1))  # widened: outlasts it
    found = unsure(log.samples, log.closed, log.slowest_of)
    assert len(found) == 1 and found[0].startswith("1 of 2 completion windows")
    assert found[0].endswith("(218 ms: pair.send.delivered on UC)")  # names the slowest
    assert "(pair.send.delivered on UC)" in log.widened[0]
    fixed = DeliveryLog()  # not following: windows stay as given
    assert fixed.window("completion", 0.1) == 0.1
    assert unsure({"completion": [0.01]}, {"completion": [0.1]}) == []


def test_the_verdict_is_never_conformant_while_a_window_was_unsure() -> None:
    from reports.qualification import UNSURE, verdict

    run = {"steps": [{"count": 5, "result": "match"}], "delivery": {"completion": [0.2]},
           "windows_closed": {"completion": [0.1]}}
    assert verdict(run)["code"] == UNSURE
    assert "shorter" in verdict(run)["timing_unsure"]
    run["windows_closed"] = {"completion": [0.3]}
    assert verdict(run)["code"] == "conformant"


def test_bench_refuses_a_bad_duration(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["bench", "--device", "rxe0", "--seconds", "-3"])
    assert "positive number of seconds" in capsys.readouterr().err


def test_bench_without_pyverbs_says_how_to_get_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    if importlib.util.find_spec("pyverbs") is not None:
        pytest.skip("pyverbs is installed here: the missing-pyverbs message cannot be shown")
    assert cli.main(["bench", "--device", "rxe0", "--seconds", "1"]) == 4
    assert "pyverbs" in capsys.readouterr().err


def test_windows_are_judged_against_deliveries_of_their_own_scope() -> None:
    """A lone QP's window is judged against lone QPs' flushes, not a pair's wire delays:
    a slow pair completion makes no lone window unsure, a slow lone flush does."""
    log = DeliveryLog()
    log.follow(Windows(0.1, 1.0, "test"))
    log.note_closed("lone QP completion", 0.1)
    log.add("completion", 0.25, "ibta.err.recv_error on RC")
    assert unsure(log.samples, log.closed) == []
    log.add("lone QP completion", 0.15, "ibta.err.flush on RC")
    found = unsure(log.samples, log.closed)
    assert len(found) == 1 and found[0].startswith("1 of 1 lone QP completion windows")
    assert log.window("lone QP completion", 0.1) == pytest.approx(0.225)  # its own tail


def test_an_event_window_alone_opens_no_completion_window() -> None:
    """A move that can only raise an event late (nothing posted, nothing delivered) puts
    nothing at stake on the CQ: it ends no completion window."""
    from models.enums import QPType
    from models.qp import QPModel
    from qpconform.engine.track import Track

    track = Track(handle=None, model=QPModel(QPType.RC), qp_type=QPType.RC,  # type: ignore[arg-type]
                  qp_num=1, steps=[])
    track.owe_events(3, 0.03)
    assert track.quiet_from == 3 and track.quiet_left() > 0.0
    assert track.quiet_len == 0.0 and track.events_len == 0.03
    track.owe_quiet(4, 0.1)
    assert track.quiet_len == 0.1


def test_a_pairs_quiet_window_follows_the_tail_and_ends_no_observation() -> None:
    """A pair's deliberate quiet window widens with the run's slowest pair delivery, but
    it ends no observation (the pair is polled again at its next step, or parked): it is
    not noted as closed, so a quiet window mid-case never makes the verdict unsure."""
    import time

    from models.enums import QPType
    from qpconform.engine.pair import PairHarness
    from tests.fake_pair import FakePair

    log = DeliveryLog()
    log.follow(Windows(0.1, 1.0, "test"))
    h = PairHarness(FakePair(QPType.RC), time_scale=0.01, delivery=log)
    h.lifecycle.connect()
    h.quiet()
    log.add("completion", 0.2, "pair.send.delivered on RC")
    start = time.monotonic()
    h.quiet()
    assert time.monotonic() - start >= 0.3
    assert log.closed["completion"] == [] and log.closed["event"] == []
    assert unsure(log.samples, log.closed) == []
    h.close()


def test_timer_decided_completions_widen_no_window_but_lengthen_the_timer_wait() -> None:
    """RC retries exhausted: the delay is the transport's timer. Sampled as 'timer', it
    widens no quiet window; the wait for the next timer-decided completion follows it."""
    from models.enums import QPType
    from qpconform.engine.pair import TIMER_BOUND, PairHarness
    from qpconform.engine.timing import TIMER
    from tests.fake_pair import FakePair

    log = DeliveryLog()
    log.follow(Windows(0.1, 1.0, "test"))
    h = PairHarness(FakePair(QPType.RC), delivery=log)
    assert h._timer_wait() == TIMER_BOUND
    log.add(TIMER, 4.0, "pair.rc.retry_exc on RC")
    assert log.widened == [] and log.window("completion", 0.1) < 0.2
    assert h._timer_wait() == pytest.approx(6.0)
    h.close()


def test_an_allowed_event_is_no_delivery_sample() -> None:
    """siw's QP_FATAL after a failed send (a "may" event) came seconds later, once the TCP
    connection ended, and widened every event window of the run to must-wait: an event
    nobody owed measures no window."""
    from models.enums import QPType
    from models.wire import Fault
    from qpconform.engine.pair import PairHarness
    from tests.fake_pair import FakePair

    log = DeliveryLog()
    log.follow(Windows(0.1, 1.0, "test"))
    h = PairHarness(FakePair(QPType.RC, iwarp=True), time_scale=0.01,
                    delivery=log, variant="iwarp")
    h.lifecycle.connect()
    from models.enums import EventType

    h.dev.ends["a"].async_events.append(EventType.QP_FATAL)  # read after the post: allowed
    h.post.send("a", fault=Fault.BAD_LKEY)
    h.quiet(0.01)
    assert "event QP_FATAL" in str(h.ends["a"].steps)  # it came, and was judged (allowed)
    assert not log.samples.get("event"), log.slowest_of
    h.close()
