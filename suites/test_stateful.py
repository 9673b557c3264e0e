"""Random verb sequences on real QPs, every step compared with the model (Hypothesis stateful).

The machine is qpconform/machines/lone.py (QPMachine); this file runs it on the
selected device under the run's budget, seeds and quirks, and keeps what it finds
(the run's store divergences.json, a reproducer for the minimal unknown sequence; the
steps in the run record).
Steps per example and examples come from the loaded Hypothesis profile
(fixtures/plugin.py registers them; --hypothesis-profile NAME picks one).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from fixtures.budget import Budget
from fixtures.environment import current_test
from models.variant import Variant
from qpconform import bench
from qpconform.engine.device import Device, UnsupportedQPType
from qpconform.engine.judge import StepRecorder
from qpconform.engine.quirks import Quirks
from qpconform.engine.timing import DeliveryLog, Windows
from qpconform.machines.lone import MachineConfig, device_settings, run_machine
from reports.divergence import OUT_DIR
from reports.reproducer import DivergenceKeeper


class _CountingRecorder:
    """Counts the verbs the machine ran, for the steps/s figure."""

    def __init__(self, inner: StepRecorder) -> None:
        self.inner = inner
        self.steps = 0

    def step(self, *args: Any, **kwargs: Any) -> None:
        self.steps += 1
        self.inner.step(*args, **kwargs)

    def choice(self, *args: Any) -> Any:
        return self.inner.choice(*args)


def _record_throughput(device: Device, steps: int, elapsed: float, recorder: Any) -> None:
    """Steps/s of the checked machine next to a plain pyverbs modify loop, in the same run."""
    checked = steps / elapsed if elapsed > 0 else 0.0
    plain = bench.plain_rate(device, 2.0)
    ratio = f"{plain / checked:.0f}" if checked else "n/a"
    recorder.settings["throughput"] = (
        f"stateful machine {checked:.1f} checked steps/s ({steps} steps in {elapsed:.1f} s, "
        f"quiet windows only where a step owes one); plain pyverbs modify loop {plain:.0f} calls/s "
        f"on the same device; ratio {ratio}"
    )


def test_qp_state_machine(
    device: Device,
    qp_types: Sequence[Any],
    variant: Variant,
    quirks: Quirks | None,
    run_recorder: StepRecorder,
    delivery_log: DeliveryLog,
    windows: Windows,
    stateful_budget: Budget,
    batch_seeds: Iterator[int | None],
    run_seed: int | None,
) -> None:
    """Random verb sequences on the selected QP types match the model step by step.

    With a budget, batches of lone.BATCH examples run until the lone machine's share is spent
    (or exactly as many as --stateful-batches says: fixtures/budget.py).
    """
    counter = _CountingRecorder(run_recorder)
    config = MachineConfig(
        settle_window=windows.quiet, event_window=windows.event_window,
        must_wait=windows.must_wait, delivery=delivery_log, test=current_test(),
    )
    keep = DivergenceKeeper(OUT_DIR)
    budgeted = stateful_budget.share("lone") is not None
    batch = device_settings(budgeted, seeded=run_seed is not None)

    def run_batch() -> int:
        run_machine(device, qp_types, variant, quirks, config=config, recorder=counter,
                    keep=keep, hypothesis_settings=batch, example_seed=next(batch_seeds))
        return batch.max_examples

    try:
        batches, examples, took = stateful_budget.run("lone", run_batch)
    except UnsupportedQPType as exc:
        stateful_budget.batches.pop("lone", None)  # nothing ran: nothing to replay
        pytest.skip(str(exc))
    stateful_budget.spent["lone"] = (
        f"{batches} batches, {examples} examples, {counter.steps} steps, {took:.0f} s"
    )
    _record_throughput(device, counter.steps, took, run_recorder)
