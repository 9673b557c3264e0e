"""Self-tests of several QPs on one CQ (models/shared_cq.py) on the fake pair.

The "a" end of the fake shares its send and receive CQs with a bystander QP (tests/
fake_pair.FakeBystander). A clean fake passes every scenario, and so does the near miss
that cleans the end's *own* entries at its RESET (mlx5 and hns do: unjudged); each planted
fault of SHARED_CQ_FAULTS breaks one promise and is caught, with its rule, by a
deterministic scenario and by the traffic machine (which draws pairs with and without a
bystander).
"""

from __future__ import annotations

import pytest

from models.enums import QPState, QPType, WCStatus
from models.operations import Op
from qpconform.engine.device import Completion
from qpconform.engine.judge import DivergenceError
from qpconform.engine.pair import PairHarness
from qpconform.machines.pair import iwarp_machine_for, machine_for
from tests.fake_pair import FakePair, connected_fake, machine_divergence, scenario_divergence

S = QPState
ALL = [QPType.RC, QPType.UC, QPType.UD]
BY_A = frozenset({"a"})


def _with_receives(h: PairHarness) -> None:
    """The bystander to INIT with two receives waiting on the end's receive CQ."""
    h.shared.modify("a", S.INIT)
    h.shared.post_recv("a")
    h.shared.post_recv("a")


def _traffic(h: PairHarness) -> None:
    """Traffic both ways on the end, then the bystander flushed (receives, and a SEND
    posted in ERR): every completion on the shared CQs names its own QP."""
    _with_receives(h)
    h.post.recv("a")
    h.post.send("b", Op.SEND)
    h.post.recv("b")
    h.post.send("a", Op.SEND)
    h.shared.modify("a", S.ERR)
    h.shared.post_send("a")


def _end_flush(h: PairHarness) -> None:
    """The end to ERR while the bystander holds receives: only the end's flush; then the
    bystander's own."""
    _with_receives(h)
    h.post.recv("a")
    h.modify("a", S.ERR)
    h.quiet(0.01)
    h.shared.modify("a", S.ERR)


def _reset_over(h: PairHarness) -> None:
    """The bystander's flushes left on the CQs while the end is reset; then the end back
    to RTS and a SEND to it."""
    _with_receives(h)
    with h.shared.unpolled():
        h.shared.modify("a", S.ERR)
        h.shared.pause()
        h.modify("a", S.RESET)
    h.lifecycle.bring_up("a")
    h.post.recv("a")
    h.post.send("b", Op.SEND)


def _reset_over_own(h: PairHarness) -> None:
    """As _reset_over, with a completion of the end's own also unpolled at its RESET (it
    may vanish with it, or be polled after: either conforms)."""
    _with_receives(h)
    h.post.recv("a")
    with h.shared.unpolled():
        h.post.send("b", Op.SEND)
        h.shared.modify("a", S.ERR)
        h.shared.pause()
        h.modify("a", S.RESET)


SCENARIOS = [_traffic, _end_flush, _reset_over, _reset_over_own]


@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__.strip("_"))
@pytest.mark.parametrize("fault", [None, "reset_cleans_own"], ids=["clean", "reset_cleans_own"])
def test_clean_fake_with_a_bystander_has_no_divergence(qp_type, scenario, fault) -> None:
    h = connected_fake(qp_type, fault, shared_cq_sides=BY_A)
    scenario(h)
    h.quiet(0.01)
    h.finish()
    assert h.known == []


@pytest.mark.parametrize("scenario", [_traffic, _end_flush], ids=["traffic", "end_flush"])
def test_clean_iwarp_fake_with_a_bystander_has_no_divergence(scenario) -> None:
    h = connected_fake(QPType.RC, shared_cq_sides=BY_A, iwarp=True)
    scenario(h)
    h.quiet(0.01)
    h.finish()
    assert h.known == []


#: (planted fault, scenario, divergence kind, rule)
PLANTED = [
    ("flush_touches_bystander", _end_flush, "completion", "cq.shared.flush_own_only"),
    ("bystander_wrong_qp_num", _traffic, "completion", "cq.completion.qp_num"),
    ("end_as_bystander_qp_num", _traffic, "completion", "cq.completion.qp_num"),
    ("reset_cleans_bystander", _reset_over, "missing_completion", "cq.shared.reset_keeps_others"),
]


@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
@pytest.mark.parametrize(("fault", "scenario", "kind", "rule"), PLANTED,
                         ids=[p[0] for p in PLANTED])
def test_planted_shared_cq_fault_is_caught(fault, scenario, kind, rule, qp_type) -> None:
    record = scenario_divergence(connected_fake(qp_type, fault, shared_cq_sides=BY_A), scenario)
    assert (record.kind, record.rule_id) == (kind, rule)


@pytest.mark.parametrize("fault", ["flush_touches_bystander", "bystander_wrong_qp_num"])
def test_planted_shared_cq_fault_is_caught_on_iwarp(fault) -> None:
    h = connected_fake(QPType.RC, fault, shared_cq_sides=BY_A, iwarp=True)
    scenario = _end_flush if fault == "flush_touches_bystander" else _traffic
    with pytest.raises(DivergenceError) as caught:
        scenario(h)
        h.quiet(0.01)
        h.finish()
    assert caught.value.record.rule_id == dict((p[0], p[3]) for p in PLANTED)[fault]


@pytest.mark.parametrize(("fault", "rule"), [(f, r) for f, _, _, r in PLANTED],
                         ids=[p[0] for p in PLANTED])
def test_the_traffic_machine_catches_each_planted_shared_cq_fault(fault, rule) -> None:
    """The machine draws pairs with and without a bystander, posts its receives, flushes
    and resets it, resets the end over its flushes, and finds each fault (fixed seed)."""

    def make(srq_sides: tuple[str, ...] = (), shared_cq_sides: tuple[str, ...] = ()):
        # every example's "a" has a bystander (the draw only says whether a device pair
        # gets one): the fault is met whatever the exploration draws
        fake = FakePair(QPType.RC, fault, shared_cq_sides=BY_A)
        return PairHarness(fake, sink=None, time_scale=0.01)

    machine = machine_for(QPType.RC, make, faults=(), srq=True, shared_cq=True)
    record = machine_divergence(machine)
    assert record.rule_id == rule


#: The planted faults an iWARP pair can meet (no RESET: reset_cleans_bystander is not one).
IWARP_PLANTED = [p for p in PLANTED if p[0] != "reset_cleans_bystander"]


def _iwarp_make(fault: str | None, always: bool):
    """The iWARP machine's `make` over fake iWARP pairs (planting `fault`): `always` gives
    every example's "a" a bystander whatever the draw says, so a planted fault is met
    however the exploration goes."""

    def make(shared_cq_sides: tuple[str, ...] = ()) -> PairHarness:
        sides = BY_A if always else frozenset(shared_cq_sides)
        fake = FakePair(QPType.RC, fault, iwarp=True, shared_cq_sides=sides)
        return PairHarness(fake, sink=None, time_scale=0.01, variant="iwarp")

    return make


@pytest.mark.parametrize(("fault", "rule"), [(f, r) for f, _, _, r in IWARP_PLANTED],
                         ids=[p[0] for p in IWARP_PLANTED])
def test_the_iwarp_machine_catches_each_planted_shared_cq_fault(fault, rule) -> None:
    """The iWARP machine posts receives on the idle bystander, flushes it, and flushes or
    closes the connected end beside it: each planted fault is found (fixed seed)."""
    machine = iwarp_machine_for(_iwarp_make(fault, always=True), faults=(), shared_cq=True)
    record = machine_divergence(machine)
    assert record.rule_id == rule


def test_the_iwarp_machine_finds_nothing_on_a_clean_fake_with_bystanders() -> None:
    """Its draws (a bystander or not), traffic, closes, destroyed peers and reconnects on a
    clean fake iWARP pair: no divergence, and the bystander rules were exercised."""
    from hypothesis import settings

    made: list[PairHarness] = []

    def make(shared_cq_sides: tuple[str, ...] = ()) -> PairHarness:
        made.append(_iwarp_make(None, always=False)(shared_cq_sides))
        return made[-1]

    machine = iwarp_machine_for(make, shared_cq=True)
    machine.TestCase.settings = settings(max_examples=60, stateful_step_count=30,
                                         deadline=None, derandomize=True, database=None)
    machine.TestCase().runTest()
    sides = {s.get("side") for h in made for s in h.steps}
    assert "a.bystander" in sides
    assert any(h.shared.sides == BY_A for h in made)
    assert any(not h.shared.sides for h in made)


def test_a_completion_naming_no_qp_of_the_cq_is_a_divergence() -> None:
    """Without a bystander too: a completion whose qp_num names no QP of the end's CQs."""
    h = connected_fake(QPType.RC)
    wr = h.post.recv("a")
    h.post.recv("a")
    end = h.dev.end("a")
    end.cq.append(Completion(wr, "recv", WCStatus.WR_FLUSH_ERR, end.qp_num + 1000))
    with pytest.raises(DivergenceError) as caught:
        h.modify("a", S.ERR)
    record = caught.value.record
    assert (record.kind, record.rule_id) == ("completion", "cq.completion.qp_num")
    assert "no QP of this CQ" in record.observed


def test_the_bystander_completions_are_its_own_track() -> None:
    """Routed by qp_num: the bystander's flushes are matched on its ledger, the end's
    completions on the end's; the records say which QP."""
    h = connected_fake(QPType.UD, shared_cq_sides=BY_A)
    _traffic(h)
    h.quiet(0.01)
    sides = {s.get("side") for s in h.steps}
    assert {"a", "b", "a.bystander"} <= sides
    assert h.shared.bystander("a").ledger.done  # its flushes matched on its own books
    assert h.shared.bystander("a").model.state == S.ERR



@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_the_traffic_machine_finds_nothing_on_a_clean_fake_with_bystanders(qp_type) -> None:
    """The machine's draws (SRQ or not, bystander or not) on clean fakes: no divergence."""
    from hypothesis import settings

    def make(srq_sides: tuple[str, ...] = (), shared_cq_sides: tuple[str, ...] = ()):
        fake = FakePair(qp_type, srq_sides=frozenset(srq_sides),
                        shared_cq_sides=frozenset(shared_cq_sides))
        return PairHarness(fake, sink=None, time_scale=0.01)

    machine = machine_for(qp_type, make, srq=True, shared_cq=True)
    machine.TestCase.settings = settings(max_examples=40, stateful_step_count=30,
                                         deadline=None, database=None)
    machine.TestCase().runTest()


def test_completions_held_back_by_an_unpolled_block_are_no_delivery_samples() -> None:
    """The engine's own hold (an unpolled block and its pause) is not the device's delay:
    the flushes polled after it are judged but not sampled, so they widen no window and
    make no verdict 'timing unsure'; deliveries after the block are sampled again."""
    h = connected_fake(QPType.RC, shared_cq_sides=BY_A)
    _with_receives(h)
    with h.shared.unpolled():
        h.shared.modify("a", S.ERR)
        h.shared.pause(30)  # 0.3 s at the fake's time scale: the length of a real run's pause
    h.post.recv("a")
    h.post.send("b", Op.SEND)
    h.quiet(0.01)
    h.finish()
    samples = h.delivery.samples["completion"]
    assert len(samples) >= 2  # the SEND's two completions
    assert max(samples) < 0.2, h.delivery.slowest_of
    assert h.delivery.widened == []
