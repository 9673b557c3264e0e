"""The sweeps carry a QP on after a refused case (suites/steps.run_group, reuse_refused):
far fewer QPs, chains bounded (fresh QPs keep being sampled), and the planted faults fail
the same groups as without reuse."""

from __future__ import annotations

import pytest

from models.enums import QPType
from qpconform.engine.lone import Checker
from qpconform.engine.records import DivergenceList
from suites import steps
from suites.cases import transition_groups
from tests.fake_device import FakeDevice


def _sweep(device: FakeDevice, reuse: bool, chain: int = steps.REUSE_CHAIN) -> list[str]:
    """The RC transition sweep on `device`; the failure messages of its groups."""
    checker = Checker(device, settle_window=0.0, must_wait=0.0, sink=DivergenceList())
    failures = []
    old, steps.REUSE_CHAIN = steps.REUSE_CHAIN, chain
    try:
        for group in transition_groups("linux", [QPType.RC]):
            if group.skip is not None:
                continue
            try:
                steps.run_group(checker, group,
                                lambda qp, case: steps.run_modify_case(qp, device, case),
                                reuse_refused=reuse)
            except pytest.fail.Exception as exc:
                failures.append(str(exc))
    finally:
        steps.REUSE_CHAIN = old
    assert not device.live, "a QP of the sweep was left open"
    return failures


def test_reuse_makes_far_fewer_qps_and_finds_nothing_on_a_clean_device() -> None:
    fresh, reused = FakeDevice(), FakeDevice()
    assert _sweep(fresh, reuse=False) == []
    assert _sweep(reused, reuse=True) == []
    assert len(reused.qps) < len(fresh.qps) / 2, (len(reused.qps), len(fresh.qps))


def test_a_chain_is_bounded_so_fresh_qps_keep_being_sampled() -> None:
    one, three = FakeDevice(), FakeDevice()
    _sweep(one, reuse=True, chain=1)
    _sweep(three, reuse=True, chain=3)
    fresh = FakeDevice()
    _sweep(fresh, reuse=False)
    assert len(one.qps) == len(fresh.qps)  # a chain of one is no reuse
    assert len(fresh.qps) > len(three.qps) > len(fresh.qps) / 3 - 1


@pytest.mark.parametrize(
    ("fault", "rule"),
    [
        ("accept_illegal_transition", "linux.transition."),
        ("skip_required_bit_check", "linux.transition."),
        ("store_in_wrong_field", "attr.readback"),
        ("read_unmasked_field", "attr.readback.unmasked"),
    ],
)
def test_planted_faults_are_caught_with_reuse_as_without(fault: str, rule: str) -> None:
    without = _sweep(FakeDevice([fault]), reuse=False)
    with_reuse = _sweep(FakeDevice([fault]), reuse=True)
    assert without and with_reuse, "the sweep missed the planted fault"
    assert all(rule in f for f in with_reuse), with_reuse[0]
    assert len(with_reuse) == len(without)  # the same groups fail
