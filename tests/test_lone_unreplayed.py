"""A divergence the lone machine met whose example Hypothesis then could not replay (the
device answered the replay differently: FlakyStrategyDefinition, as on trixie in stop 39)
is still the run's divergence, recorded as it was met and marked not shrunk, never lost
behind the Flaky error (which made the run INCOMPLETE with "0 divergences")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis.errors import FlakyStrategyDefinition

from qpconform.engine.judge import DivergenceError
from qpconform.machines import lone as lone_machine
from qpconform.machines.lone import run_machine
from tests.fake_device import FakeDevice
from tests.test_harness_planted import PARKED, TYPES, _planted_settings

REPLAY_ERROR = "Inconsistent data generation! Data generation behaved differently"


@pytest.fixture
def replay_goes_elsewhere(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Hypothesis' runs as they are, but whatever they end with, its replay of the failing
    example drew other steps (what a device that answers differently makes it raise)."""
    real = lone_machine._run_seeded
    ended: list[str] = []

    def run(*args: Any, **kwargs: Any) -> None:
        try:
            real(*args, **kwargs)
        except DivergenceError:
            ended.append("divergence")
        else:
            ended.append("clean")
        raise FlakyStrategyDefinition(REPLAY_ERROR)

    monkeypatch.setattr(lone_machine, "_run_seeded", run)
    return ended


def test_the_divergence_met_is_raised_and_kept_not_the_flaky_error(
    replay_goes_elsewhere: list[str], tmp_path: Path
) -> None:
    kept: list[tuple[str, bool]] = []
    with pytest.raises(DivergenceError) as caught:
        run_machine(FakeDevice(["accept_illegal_transition"]), TYPES, config=PARKED,
                    hypothesis_settings=_planted_settings(),
                    keep=lambda d, unknown: kept.append((d.rule_id, unknown)))
    assert replay_goes_elsewhere == ["divergence"]
    record = caught.value.record
    assert record.rule_id.startswith("linux.transition.invalid"), record.rule_id
    assert "FlakyStrategyDefinition" in record.context["not_shrunk"]
    assert "not shrunk" in record.format()  # the report says so
    assert (record.rule_id, True) in kept  # the run's records hold it as unknown
    assert isinstance(caught.value.__cause__, FlakyStrategyDefinition)


def test_a_flaky_run_that_met_no_divergence_stays_the_flaky_error(
    replay_goes_elsewhere: list[str]
) -> None:
    """The near miss: no divergence to keep, so nothing is made up; the Flaky error is the
    failure (the test errors, the verdict is incomplete)."""
    with pytest.raises(FlakyStrategyDefinition):
        run_machine(FakeDevice(), TYPES, config=PARKED,
                    hypothesis_settings=lone_machine.machine_settings(
                        max_examples=5, stateful_step_count=4, derandomize=True,
                        database=None))
    assert replay_goes_elsewhere == ["clean"]
