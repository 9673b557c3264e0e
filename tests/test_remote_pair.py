"""Connected pairs behind the executor (qpconform/adapters/remote_pair.py): the pair engine
on this side, the fake pair (tests/fake_pair.py) in an executor thread over the wire, as
the host engine runs the pair suites against the guest's device.

Through the executor every planted fault is caught with the same kind and rule as
directly, and every deterministic case of the pair suites passes on a clean fake and
exercises the same rules."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from models.enums import QPType
from models.pair import WireSettings
from models.variant import LINUX
from qpconform.adapters.remote_pair import RemotePair
from qpconform.engine.connect import FAST
from qpconform.engine.judge import DivergenceError
from qpconform.engine.pair import PairHarness
from tests import test_pair_suites_fake as suites_fake
from tests import test_traffic_planted as planted
from tests.fake_device import FakeDevice
from tests.remote_fake import fake_pairs, remote
from tests.rule_log import RuleLog

ALL = [QPType.RC, QPType.UC, QPType.UD]


@contextlib.contextmanager
def _served(fault: str | None = None) -> Iterator[Any]:
    with remote(FakeDevice(), fake_pairs(fault)) as device:
        yield device


@pytest.mark.parametrize(
    ("fault", "scenario", "kind", "rule"),
    [
        ("lost_flush", planted._flush, "missing_completion", "ibta.err.flush"),
        ("flush_out_of_order", planted._flush, "order", "ibta.err.flush"),
        ("duplicate_completion", planted._duplicate, "completion", "pair.completion.unexpected"),
        ("event_missing", planted._drain_notify, "missing_event", "ibta.sqd.drained_event"),
        ("event_unasked", planted._drain_silent, "event", "ibta.sqd.drained_event.unasked"),
        ("run_after_reset", planted._reset_then_up, "completion", "ibta.reset.discard"),
        ("event_on_completion_error", planted._send_error, "event",
         "pair.completion_error.no_event"),
        ("cq_overrun", planted._flush, "event", "ibta.cq.no_overrun"),
    ],
)
@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_a_planted_fault_is_caught_through_the_executor(qp_type, fault, scenario, kind, rule):
    with _served(fault) as device:
        h = PairHarness(RemotePair(device, qp_type, FAST), sink=None, time_scale=0.01)
        h.connect()
        with pytest.raises(DivergenceError) as caught:
            scenario(h)
            h.quiet(0.01)
        h.dev.close()
    assert (caught.value.record.kind, caught.value.record.rule_id) == (kind, rule)


@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_the_tour_of_every_rule_is_clean_through_the_executor(qp_type) -> None:
    """Traffic, faults, ERR, RESET, SQD, destroy and recreate of an end, on a clean fake."""
    with _served() as device:
        h = PairHarness(RemotePair(device, qp_type, FAST), sink=None, time_scale=0.01)
        h.connect()
        planted._everything(h)
        h.quiet(0.01)
        h.finish()
        assert h.known == []
        assert device.channel.carried["destroy"] >= 1  # the end destroyed before recreate


def test_the_pair_suites_pass_and_exercise_the_same_rules_through_the_executor() -> None:
    """Every deterministic case of the pair suites, its pairs behind one executor session:
    each passes on a clean fake, and together they exercise the rules they exercise with
    the fake in this process (their counts may differ: waits end on what arrives)."""
    log = RuleLog(strict=True)
    with _served() as device:

        def make_pair(qp_type: QPType, settings: WireSettings = FAST, connect: bool = True,
                      srq_sides: tuple[str, ...] = (),
                      shared_cq_sides: tuple[str, ...] = ()) -> PairHarness:
            pair = RemotePair(device, qp_type, settings, frozenset(srq_sides),
                              frozenset(shared_cq_sides))
            h = PairHarness(pair, settings, recorder=log, sink=None, time_scale=0.01)
            made.append(h)
            if connect:
                h.connect()
            return h

        ran = 0
        for param in suites_fake.CASES:
            case, kwargs = param.values
            if "variant" in suites_fake.inspect.signature(case).parameters:
                kwargs = {**kwargs, "variant": LINUX}
            made: list[PairHarness] = []
            with contextlib.suppress(pytest.skip.Exception):
                case(make_pair, **kwargs)
                ran += 1
            for h in made:
                h.dev.close()
        assert device.channel.by_verb["pair"] >= ran
        assert not device._qps, "every end the cases made was destroyed"
    assert set(log.rules) == set(suites_fake.pair_case_rules())
