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

from models.enums import QPState, QPType
from models.operations import Op
from models.variant import LINUX
from models.wire import WireSettings
from qpconform.adapters.remote_pair import RemotePair
from qpconform.engine import unused_wr
from qpconform.engine.connect import FAST
from qpconform.engine.device import UnsupportedQPType
from qpconform.engine.judge import DivergenceError
from qpconform.engine.pair import PairHarness
from qpconform.engine.records import Divergence
from tests import test_access_planted as access_planted
from tests import test_iwarp_pair as iwarp
from tests import test_pair_suites_fake as suites_fake
from tests import test_traffic_planted as planted
from tests.fake_device import SIW_CAPS, FakeDevice
from tests.remote_fake import fake_pairs, remote
from tests.rule_log import RuleLog

ALL = [QPType.RC, QPType.UC, QPType.UD]


@contextlib.contextmanager
def _served(fault: str | None = None, variant: str = "linux") -> Iterator[Any]:
    """A fake device and its pairs behind an executor thread, planting `fault` (iwarp: RC
    pairs connected by establish(), as an iWARP executor's)."""
    iwarp = variant == "iwarp"
    device = (FakeDevice(variant="iwarp", caps=SIW_CAPS, qp_types=[QPType.RC]) if iwarp
              else FakeDevice())
    with remote(device, fake_pairs(fault, iwarp=iwarp)) as served:
        yield served


def _connected(device: Any, qp_type: QPType, variant: str = "linux") -> PairHarness:
    """A harness over a pair the executor builds, connected."""
    h = PairHarness(RemotePair(device, qp_type, FAST), sink=None, time_scale=0.01,
                    variant=variant)
    h.lifecycle.connect()
    return h


def _planted_record(fault: str, scenario: Any, qp_type: QPType,
                    variant: str = "linux") -> Divergence:
    """The divergence `scenario` meets through the executor on a pair planting `fault`."""
    with _served(fault, variant) as device:
        h = _connected(device, qp_type, variant)
        with pytest.raises(DivergenceError) as caught:
            scenario(h)
            h.quiet(0.01)
        h.dev.close()
    return caught.value.record


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
    record = _planted_record(fault, scenario, qp_type)
    assert (record.kind, record.rule_id) == (kind, rule)


@pytest.mark.parametrize("qp_type", [QPType.RC, QPType.UC], ids=lambda t: t.name)
def test_a_stray_byte_is_caught_through_the_executor(qp_type) -> None:
    """The guard bands read the target MRs through the executor ("targets")."""
    record = _planted_record("write_one_past", access_planted._granted_write, qp_type)
    assert (record.kind, record.rule_id) == ("memory", "pair.access.guard")


def _filled_send(h: PairHarness) -> None:
    h.post.recv("b")
    h.post.send("a", Op.SEND, unused=unused_wr.WILD)


def test_a_wr_fill_travels_to_the_executor_and_its_fault_is_caught() -> None:
    """The unused fields' values go over the wire with the post (a clean fake ignores
    them; imm_from_unused hands the imm_data to the receive: named after the rule)."""
    with _served() as device:
        h = _connected(device, QPType.RC)
        for op in h.ops:
            h.post.recv("b")
            h.post.send("a", op, unused=unused_wr.OTHER)
        h.quiet(0.01)
        assert h.known == []
        h.dev.close()
    record = _planted_record("imm_from_unused", _filled_send, QPType.UC)
    assert (record.kind, record.rule_id) == ("fields", "ibta.post_send.unused_fields_ignored")


@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_the_tour_of_every_rule_is_clean_through_the_executor(qp_type) -> None:
    """Traffic, faults, ERR, RESET, SQD, destroy and recreate of an end, on a clean fake."""
    with _served() as device:
        h = _connected(device, qp_type)
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
            h = PairHarness(pair, settings, recorder=log, sink=log, time_scale=0.01)
            made.append(h)
            if connect:
                h.lifecycle.connect()
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


# ------------------------------------------------------------------------------ iWARP
@pytest.mark.parametrize("scenario", iwarp.CLEAN, ids=lambda f: f.__name__)
def test_an_iwarp_pair_is_connected_and_checked_through_the_executor(scenario) -> None:
    """The executor connects the two idle ends (pair_establish, rdma_cm on siw); traffic,
    ERR, Terminate, a destroyed peer, a reconnect: clean, as in this process."""
    with _served(variant="iwarp") as device:
        h = _connected(device, QPType.RC, "iwarp")
        assert [h.model.qp(s).state for s in "ab"] == [QPState.RTS, QPState.RTS]
        scenario(h)
        h.quiet(0.01)
        h.finish()
        assert h.known == []
        h.dev.close()
        assert device.channel.by_verb["pair_establish"] >= 1


@pytest.mark.parametrize(("fault", "scenario", "kind", "rule"), iwarp.PLANTED)
def test_a_planted_iwarp_fault_is_caught_through_the_executor(fault, scenario, kind, rule):
    record = _planted_record(fault, scenario, QPType.RC, "iwarp")
    assert (record.kind, record.rule_id) == (kind, rule)


def test_an_iwarp_executor_without_its_peer_device_says_how_to_start_it() -> None:
    """A real iWARP device's executor started without --peer-device refuses pairs with the
    fix (a reported skip), instead of a loopback pair rdma_cm cannot connect."""
    from qpconform.adapters.executor import _pairs_on

    class Rnic:
        name = "siw0"

        def identity(self) -> dict[str, str]:
            return {"node_type": "RNIC"}

    with pytest.raises(UnsupportedQPType, match=r"--peer-device.*--driver siw --host-engine"):
        _pairs_on(Rnic())(QPType.RC, FAST, frozenset(), frozenset())
