"""The run's seed: chosen once, shown, and replaying the same sequences when given back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fixtures import seeds
from models.enums import QPType
from suites.test_stateful import MachineConfig, machine_settings, run_machine
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

    def divergence(self, d: Any) -> None:
        pass


def _random_settings() -> Any:
    # not derandomized: without a seed, every run draws new examples
    return machine_settings(max_examples=8, stateful_step_count=8, derandomize=False,
                            database=None, print_blob=False)


def _run(example_seed: int | None, tmp_path: Path) -> list[tuple[Any, ...]]:
    steps = _Steps()
    run_machine(FakeDevice(), TYPES, config=FAST, recorder=steps, out_dir=tmp_path,
                hypothesis_settings=_random_settings(), example_seed=example_seed)
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
    assert seeds.describe(99, "default") == "99 (replay: --hypothesis-seed=99)"
    assert "derandomized" in seeds.describe(None, "ci")
