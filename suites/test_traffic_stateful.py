"""The traffic state machines (qpconform/machines/pair.py) on a connected pair of the device.

Bounded for CI: at most QPCONFORM_TRAFFIC_EXAMPLES examples (default 6, never more
than the Hypothesis profile's max_examples) of QPCONFORM_TRAFFIC_STEPS steps
(default 15) per QP type; with the `ci` profile the run is derandomized. On a
device there is no shrink phase: a failing example is reported as found (its
steps are in the divergence record), since shrinking replays whole pair
lifecycles on the device. QPCONFORM_TRAFFIC_FAULTS: comma list of
bad_lkey,bad_rkey,peer,access,local,... (qpconform/machines/pair.py FAULTS; default all).
"""

import os

import pytest
from hypothesis import HealthCheck, Phase, seed, settings

from models.enums import QPType
from qpconform.engine.pair import PairHarness
from qpconform.machines.pair import FAULTS, iwarp_machine_for, machine_for


def chosen_faults() -> frozenset[str]:
    """QPCONFORM_TRAFFIC_FAULTS, checked: an unknown name is an error listing the allowed."""
    names = os.environ.get("QPCONFORM_TRAFFIC_FAULTS")
    chosen = frozenset(n.strip() for n in names.split(",") if n.strip()) if names else FAULTS
    if chosen - FAULTS:
        raise pytest.UsageError(
            f"QPCONFORM_TRAFFIC_FAULTS: unknown fault(s) {', '.join(sorted(chosen - FAULTS))}; "
            f"allowed: {', '.join(sorted(FAULTS))} (comma-separated)"
        )
    return chosen


EXAMPLES = int(os.environ.get("QPCONFORM_TRAFFIC_EXAMPLES", "6"))
STEPS = int(os.environ.get("QPCONFORM_TRAFFIC_STEPS", "15"))


def device_settings(seeded: bool = False) -> settings:
    """The profile's settings (derandomize, database...) bounded for a real device.

    A run with a seed (`seeded`) uses no example database: Hypothesis would first replay
    the examples earlier runs saved in .hypothesis/ (Phase.reuse), so the same seed would
    run other sequences on another machine or another day. The seed alone decides them
    (fixtures/seeds.py), which is what makes its replay line exact.
    """
    base = settings.default
    return settings(
        base,
        max_examples=min(EXAMPLES, base.max_examples),
        stateful_step_count=STEPS,
        phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrink on a device
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None if seeded else base.database,
    )


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("qp_type", [QPType.RC, QPType.UC, QPType.UD], ids=lambda t: t.name)
def test_traffic_state_machine(
    make_pair, qp_type, stateful_budget, batch_seeds, run_seed, variant
):
    """With a budget, batches of the machine run until this QP type's share is spent (or
    exactly as many as --stateful-batches says: fixtures/budget.py); each batch from its
    own seed, derived from the run's (fixtures/seeds.py). Each example's pair takes the
    receives of one end from an SRQ, or not, and shares the other end's CQs with a
    bystander QP, or not (both drawn). Under the iwarp variant, the iWARP
    machine (RC only: other types are reported skips), drawing the bystander on "a"."""

    made: list[PairHarness] = []  # each example's pair: its step log counts the checked steps

    def make(
        srq_sides: tuple[str, ...] = (), shared_cq_sides: tuple[str, ...] = ()
    ) -> PairHarness:
        made.append(make_pair(qp_type, connect=False, srq_sides=srq_sides,
                              shared_cq_sides=shared_cq_sides))
        return made[-1]

    if variant.connection_managed:
        if qp_type != QPType.RC:
            pytest.skip(f"iWARP QPs are RC only: no {qp_type.name} pair (iwarp.qp_type.rc_only)")
        machine = iwarp_machine_for(make, chosen_faults(), shared_cq=True)
    else:
        machine = machine_for(qp_type, make, chosen_faults(), srq=True, shared_cq=True)
    machine.TestCase.settings = device_settings(seeded=run_seed is not None)

    def run_batch() -> int:
        example_seed = next(batch_seeds)
        if example_seed is not None:
            seed(example_seed)(machine)
        machine.TestCase().runTest()
        return machine.TestCase.settings.max_examples

    part = f"traffic-{qp_type.name}"
    batches, examples, took = stateful_budget.run(part, run_batch)
    steps = sum(len(h.steps) for h in made)
    stateful_budget.spent[part] = (
        f"{batches} batches, {examples} examples, {steps} steps, {took:.0f} s")
