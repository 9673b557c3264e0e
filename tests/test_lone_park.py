"""The end of a lone QP's observation does not block: a retired QP stays observed.

A case or example done with a QP retires it (CheckedQP.retire): what is due is
settled, and the QP is destroyed once RETIRE_HOLD times its quiet window has passed
since its last step or delivery, at a poll of later work, instead of after a blocking
wait. A finished example's Checker is parked with its retired QPs
(qpconform/engine/park.py). A forbidden item a retired QP delivers is still judged;
the lone machine then replays the same examples waiting out every window, so the
divergence is found inside its example and shrunk.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.errors import FlakyFailure

from models.enums import QPState, QPType
from qpconform.engine.judge import DivergenceError
from qpconform.engine.lone import CheckedQP, Checker
from qpconform.engine.park import AFTER_END, Park
from qpconform.engine.records import DivergenceList
from qpconform.engine.retiring import RETIRE_HOLD
from qpconform.engine.timing import DeliveryLog, Windows
from qpconform.machines import lone as lone_machine
from qpconform.machines.lone import NOT_REPEATED, MachineConfig, machine_settings, run_machine
from reports.reproducer import DivergenceKeeper
from tests import fake_device
from tests.fake_device import FakeDevice

#: The quiet window of these tests (s): a retired QP is held RETIRE_HOLD times that.
WINDOW = 0.1


def _checker(device: FakeDevice, park: Park | None) -> Checker:
    log = DeliveryLog()
    log.follow(Windows(WINDOW, 0.5, "test"))
    chk = Checker(device, settle_window=WINDOW, must_wait=0.5, sink=DivergenceList(),
                  delivery=log)
    chk.parking = park
    return chk


def _flushed(chk: Checker) -> None:
    """A QP in ERR whose receive was flushed: its quiet window (a duplicate) is open."""
    qp = chk.open_qp(QPType.RC)
    qp.bring_to(QPState.ERR)
    qp.post_recv()
    qp.settle()
    assert qp.track.quiet_left() > 0.0


def test_retire_does_not_wait_out_the_window() -> None:
    device = FakeDevice()
    chk = _checker(device, Park())
    _flushed(chk)
    qp = chk.qps[0]
    began = time.monotonic()
    qp.retire()
    assert time.monotonic() - began < WINDOW / 2
    assert qp.retired and not qp.destroyed and len(device.live) == 1
    assert chk.qps == [] and qp.track in chk.tracks()  # still observed
    chk.close()
    assert device.live == []


def test_a_retired_qp_goes_after_its_hold_and_its_watch_is_noted() -> None:
    device = FakeDevice()
    chk = _checker(device, Park())
    _flushed(chk)
    qp = chk.qps[0]
    qp.retire()
    chk.watch.collect()
    assert not qp.destroyed  # its hold has not passed
    time.sleep(RETIRE_HOLD * WINDOW + 0.02)
    chk.watch.collect()
    assert qp.destroyed and device.live == []
    assert qp.steps[-1]["verb"] == "destroy"
    closed = chk.delivery.closed["lone QP completion"]
    assert len(closed) == 1 and closed[0] >= RETIRE_HOLD * WINDOW


def test_without_a_park_retire_is_destroy() -> None:
    device = FakeDevice()
    chk = _checker(device, None)
    _flushed(chk)
    qp = chk.qps[0]
    began = time.monotonic()
    qp.retire()
    assert qp.destroyed and device.live == []
    assert time.monotonic() - began >= WINDOW / 2  # it waited out its window


def test_a_late_duplicate_on_a_retired_qp_is_judged_after_its_end(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fake_device, "LATE", WINDOW / 2)
    device = FakeDevice(["late_duplicate_completion"])
    chk = _checker(device, Park())
    _flushed(chk)
    chk.qps[0].retire()
    time.sleep(WINDOW / 2 + 0.01)
    with pytest.raises(DivergenceError) as caught:
        chk.watch.collect()
    assert caught.value.record.context["after_end"] == AFTER_END
    assert device.live == []  # a retired QP that diverged is watched no more


@pytest.mark.parametrize("parked", [False, True], ids=["example-runs", "example-ended"])
def test_a_late_duplicate_on_a_qp_a_step_retired_is_found_inside_its_example(
        monkeypatch: pytest.MonkeyPatch, parked: bool) -> None:
    # the lone machine's destroy rule retires (case_over=False): while its example runs,
    # what the QP shows late belongs to that example (shrunk as usual); once the example
    # ended (parked), it is marked like any other retired QP's
    monkeypatch.setattr(fake_device, "LATE", WINDOW / 2)
    device = FakeDevice(["late_duplicate_completion"])
    park = Park()
    chk = _checker(device, park)
    _flushed(chk)
    qp = chk.qps[0]
    qp.retire(case_over=False)
    assert qp.retired and not qp.destroyed
    time.sleep(WINDOW / 2 + 0.01)
    if parked:  # the next example's poll reaches it; the park keeps what it found
        chk.park()
        _checker(device, park).watch.collect()
        assert len(park.found) == 1
        with pytest.raises(DivergenceError) as caught:
            park.raise_found()
    else:
        with pytest.raises(DivergenceError) as caught:
            chk.watch.collect()
    assert (caught.value.record.context.get("after_end") == AFTER_END) is parked
    assert device.live == []


def test_a_parked_checker_is_polled_by_the_next_and_freed() -> None:
    park = Park()
    device = FakeDevice()
    first = _checker(device, park)
    _flushed(first)
    first.park()
    assert first.parked and park.pairs and len(device.live) == 1
    second = _checker(device, park)
    second.watch.collect()
    assert len(device.live) == 1  # held
    time.sleep(RETIRE_HOLD * WINDOW + 0.02)
    second.watch.collect()  # its poll reaches the parked checker, whose hold has passed
    assert device.live == [] and not park.pairs
    park.drain()


def test_a_late_divergence_in_a_parked_checker_is_kept_for_the_caller(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fake_device, "LATE", WINDOW / 2)
    park = Park()
    device = FakeDevice(["late_duplicate_completion"])
    first = _checker(device, park)
    _flushed(first)
    first.park()
    time.sleep(WINDOW / 2 + 0.01)
    _checker(device, park).watch.collect()  # not raised into the next checker's work
    assert len(park.found) == 1 and device.live == []
    with pytest.raises(DivergenceError, match="not shrunk"):
        park.raise_found()


# ------------------------------------------------------------------------- the machine
def _slow_late(monkeypatch: pytest.MonkeyPatch, late: float, window: float) -> MachineConfig:
    """A duplicate `late` s late, quiet windows of `window` s (a retired QP is held twice
    that), short event windows: the fake's examples take milliseconds."""
    monkeypatch.setattr(fake_device, "LATE", late)
    return MachineConfig(settle_window=window, event_window=0.002, must_wait=0.3)


def _few(examples: int = 60, **kw: object) -> settings:
    return machine_settings(max_examples=examples, stateful_step_count=6, database=None,
                            print_blob=False, **kw)


def test_machine_replays_a_late_divergence_and_shrinks_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # after any example has ended, even on a busy host, inside a blocking window
    config = _slow_late(monkeypatch, 0.25, 0.4)
    blocking: list[bool] = []
    real = lone_machine.QPMachine.__init__

    def spy(self: object, *args: object, **kwargs: object) -> None:
        real(self, *args, **kwargs)  # type: ignore[arg-type]
        blocking.append(self.checker.parking is None)  # type: ignore[attr-defined]

    monkeypatch.setattr(lone_machine.QPMachine, "__init__", spy)
    device = FakeDevice(["late_duplicate_completion"])
    with pytest.raises(DivergenceError) as caught:
        run_machine(device, [QPType.RC], config=config, hypothesis_settings=_few(),
                    keep=DivergenceKeeper(tmp_path), example_seed=7)
    record = caught.value.record
    assert False in blocking and True in blocking  # parked first, replayed blocking
    assert "after_end" not in record.context  # found inside its example: shrunk
    assert record.kind == "completion" and record.verb_steps <= 4, record.format()
    assert device.live == []


def test_machine_without_a_replay_raises_the_late_record(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # a duplicate 1.0 s late (windows 0.6 s, a retired QP held 1.2 s) comes after the
    # fake's examples (milliseconds) have ended: only the parked example sees it
    config = _slow_late(monkeypatch, 1.0, 0.6)
    real = lone_machine._run_seeded  # examples fixed behind run_machine's back, so that
    monkeypatch.setattr(lone_machine, "_run_seeded",  # they surely meet the fault, while
                        lambda _seed, factory, **kw: real(7, factory, **kw))  # it sees none
    device = FakeDevice(["late_duplicate_completion"])
    with pytest.raises(DivergenceError, match="not shrunk") as caught:
        run_machine(device, [QPType.RC], config=config, hypothesis_settings=_few(),
                    keep=DivergenceKeeper(tmp_path))  # no seed, not derandomized
    assert caught.value.record.context["after_end"] == AFTER_END
    assert device.live == []


def test_machine_teardown_waits_no_window(monkeypatch: pytest.MonkeyPatch) -> None:
    ends: list[object] = []  # Checker.serve() of every QP: the blocking end of an example
    real = Checker.serve

    def spy(self: Checker, qps: object = None) -> None:
        if qps is None:
            ends.append(self)
        real(self, qps)  # type: ignore[arg-type]

    monkeypatch.setattr(Checker, "serve", spy)
    config = MachineConfig(settle_window=0.05, must_wait=0.5)
    device = FakeDevice()
    run_machine(device, [QPType.RC], config=config,
                hypothesis_settings=_few(20, derandomize=True))
    assert ends == [] and device.live == []
    run_machine(device, [QPType.RC], config=dataclasses.replace(config, park=False),
                hypothesis_settings=_few(20, derandomize=True))
    assert len(ends) >= 20 and device.live == []


def test_machine_destroy_rule_waits_no_window(monkeypatch: pytest.MonkeyPatch) -> None:
    # the destroy rule retires its QP (observed while the example goes on); only the
    # blocking replay (no park) waits out an open window before destroy_qp
    waits: list[bool] = []  # per Checker.serve(qps): was a quiet window of them open?
    real = Checker.serve

    def spy(self: Checker, qps: list[CheckedQP] | None = None) -> None:
        if qps is not None:
            waits.append(any(q.track.quiet_left() > 0.0 for q in qps))
        real(self, qps)

    monkeypatch.setattr(Checker, "serve", spy)
    config = MachineConfig(settle_window=0.05, event_window=0.002, must_wait=0.5)
    device = FakeDevice()
    run_machine(device, [QPType.RC], config=config,
                hypothesis_settings=_few(60, derandomize=True))
    assert waits and not any(waits) and device.live == []
    waits.clear()
    run_machine(device, [QPType.RC], config=dataclasses.replace(config, park=False),
                hypothesis_settings=_few(60, derandomize=True))
    assert any(waits) and device.live == []  # the blocking run waited some out


def test_machine_raises_an_unrepeated_divergence_unshrunk(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Hypothesis' replays met a late delivery elsewhere (FlakyFailure) and no blocking
    # replay is possible (no seed, not derandomized): the record is raised, marked so
    chk = _checker(FakeDevice(["event_in_rts"]), None)
    qp = chk.open_qp(QPType.RC)
    with pytest.raises(DivergenceError) as caught:
        qp.bring_to(QPState.RTS)
        qp.settle()
    chk.close()
    runs: list[bool] = []

    def flaky(_seed: object, _factory: object, **kw: Any) -> None:
        runs.append(kw["settings"].derandomize)
        raise FlakyFailure("replays differ", [caught.value])

    monkeypatch.setattr(lone_machine, "_run_seeded", flaky)
    with pytest.raises(DivergenceError, match="not shrunk") as again:
        run_machine(FakeDevice(), [QPType.RC], hypothesis_settings=_few(derandomize=False))
    assert again.value.record.context["after_end"] == NOT_REPEATED
    assert runs == [False]  # no replay


def test_machine_leaves_a_callers_park_to_the_caller() -> None:
    # runs back to back (the bench's batches): the last example's QPs stay observed into
    # the next run, which polls them, and only the caller's drain waits out their holds
    config = MachineConfig(settle_window=0.05, must_wait=0.5)
    device, park = FakeDevice(), Park()
    run_machine(device, [QPType.RC], config=config,
                hypothesis_settings=_few(5, derandomize=True), park=park)
    first = [p.pair for p in park.pairs]
    assert first and device.live  # not waited out, not destroyed
    time.sleep(RETIRE_HOLD * 0.05)  # their hold passes during the next run
    run_machine(device, [QPType.RC], config=config,
                hypothesis_settings=_few(5, derandomize=True), park=park)
    assert not any(p.pair in first for p in park.pairs)  # the next run's polls closed them
    park.drain()
    assert park.pairs == [] and device.live == []
