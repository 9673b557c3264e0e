"""The run's seed: chosen once, shown, and replaying the same sequences when given back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fixtures import seeds
from models.enums import QPType
from qpconform.machines.lone import MachineConfig, machine_settings, run_machine
from reports.reproducer import DivergenceKeeper
from tests.fake_device import FakeDevice

TYPES = [QPType.RC, QPType.UC, QPType.UD]
FAST = MachineConfig(settle_window=0.0, must_wait=0.0)


class _Steps:
    """Every verb the machine ran, in order."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []

    def step(self, qp_type: str, verb: str, state_before: str, target: str | None,
             rules: list[str], result: str) -> None:
        self.seen.append((qp_type, verb, state_before, target, result))

    def choice(self, *args: Any) -> None:
        return None  # no characteristics kept here


def _random_settings() -> Any:
    # not derandomized: without a seed, every run draws new examples
    return machine_settings(max_examples=8, stateful_step_count=8, derandomize=False,
                            database=None, print_blob=False)


def _run(example_seed: int | None, tmp_path: Path) -> list[tuple[Any, ...]]:
    steps = _Steps()
    run_machine(FakeDevice(), TYPES, config=FAST, recorder=steps,
                keep=DivergenceKeeper(tmp_path), hypothesis_settings=_random_settings(),
                example_seed=example_seed)
    return steps.seen


def test_the_same_seed_replays_the_same_sequence(tmp_path: Path) -> None:
    first = _run(1234, tmp_path)
    assert len(first) > 20  # it really ran
    assert _run(1234, tmp_path) == first
    assert _run(1235, tmp_path) != first


def test_without_a_seed_each_run_draws_new_examples(tmp_path: Path) -> None:
    assert _run(None, tmp_path) != _run(None, tmp_path)


def test_a_worker_takes_its_controllers_seed_and_a_given_seed_wins() -> None:
    assert seeds.choose(None, False, {seeds.WORKER_KEY: 42}) == 42
    assert seeds.choose("17", False) == 17
    assert seeds.choose("17", True) == 17  # a seed given on a derandomized profile is used
    assert seeds.choose("abc", False) == seeds.choose("abc", False)  # text hashes stably
    assert seeds.choose(None, True) is None
    assert seeds.choose(None, False) != seeds.choose(None, False)  # 1 in 2**32 to collide


def test_batches_get_distinct_stable_seeds() -> None:
    one = [seeds.derive(5, "suites/test_stateful.py::t", b) for b in range(3)]
    assert len(set(one)) == 3
    assert one == [seeds.derive(5, "suites/test_stateful.py::t", b) for b in range(3)]
    assert seeds.derive(6, "suites/test_stateful.py::t", 0) != one[0]


def test_the_report_says_how_to_replay() -> None:
    assert seeds.describe(99, "default") == (
        "99 (replay: --hypothesis-seed=99 --hypothesis-profile=default plus the "
        "--stateful-batches printed at the end of the run)"
    )
    line = seeds.replay_args(99, "default", "lone=4")
    assert seeds.describe(99, "default", line) == f"99 (replay: {line})"
    assert "derandomized" in seeds.describe(None, "ci")


def test_the_replay_line_names_the_batches() -> None:
    assert seeds.replay_args(31, "quick", "lone=4,traffic-RC=3") == (
        "--hypothesis-seed=31 --hypothesis-profile=quick --stateful-batches lone=4,traffic-RC=3"
    )
    # a run without a budget ran one batch of the profile's count: its replay must too
    assert seeds.replay_args(31, "default", "lone=1", budget_off=True) == (
        "--hypothesis-seed=31 --hypothesis-profile=default --stateful-budget=0 "
        "--stateful-batches lone=1"
    )
    assert seeds.replay_args(None, "ci") == "--hypothesis-profile=ci"
    # the merged record swaps one worker's batches for every worker's
    one = seeds.replay_args(31, "quick", "lone=4")
    assert seeds.with_batches(one, "lone=4,traffic-UD=2") == seeds.replay_args(
        31, "quick", "lone=4,traffic-UD=2")
    assert seeds.with_batches(one, "") == "--hypothesis-seed=31 --hypothesis-profile=quick"


@pytest.fixture
def profile_with_a_database() -> Iterator[Any]:
    """A loaded profile with an example database, as the random device profiles have."""
    from hypothesis import settings
    from hypothesis.database import InMemoryExampleDatabase

    before = settings.get_current_profile_name()
    settings.register_profile("seeds-with-db", database=InMemoryExampleDatabase())
    settings.load_profile("seeds-with-db")
    try:
        yield settings.default.database
    finally:
        settings.load_profile(before)


def test_a_seeded_run_uses_no_example_database(profile_with_a_database: Any) -> None:
    """Phase.reuse would replay examples an earlier run saved: the seed alone must decide."""
    from qpconform.machines import lone
    from suites import test_traffic_stateful

    db = profile_with_a_database
    assert lone.device_settings(budgeted=True, seeded=True).database is None
    assert lone.device_settings(budgeted=False, seeded=True).database is None
    assert lone.device_settings(budgeted=True, seeded=False).database is db
    assert lone.device_settings(budgeted=True, seeded=True).max_examples == lone.BATCH
    assert test_traffic_stateful.device_settings(seeded=True).database is None
    assert test_traffic_stateful.device_settings().database is db
