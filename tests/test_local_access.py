"""The requester's own SGE checks (models/local_access.py): the model's verdicts, and
planted faults on the fake pair each caught by its rule, with the correct fake (and each
faulted one off its trigger) clean, by deterministic scenarios and by the traffic machine."""

from __future__ import annotations

import pytest
from hypothesis import seed, settings

from models import access, local_access
from models.enums import QPState, QPType, WCStatus
from models.operations import Op
from models.wire import Fault
from qpconform.engine.pair import PairHarness
from qpconform.machines.pair import machine_for
from tests.example_counts import PLANTED_RUN, examples
from tests.fake_pair import (
    FakePair,
    connected_fake,
    connected_model,
    machine_divergence,
    scenario_divergence,
)
from tests.rule_log import RuleLog

S = QPState
LOCAL = [Fault.LOCAL_PAST_END, Fault.LOCAL_OTHER_PD]
TYPES = [QPType.RC, QPType.UC, QPType.UD]
_RULE = {Fault.LOCAL_PAST_END: local_access.LOCAL_BOUNDS,
         Fault.LOCAL_OTHER_PD: local_access.LOCAL_OTHER_PD}
_AFTER = {QPType.RC: S.ERR, QPType.UC: S.SQE, QPType.UD: S.SQE}


# ----------------------------------------------------------------------------- the model
@pytest.mark.parametrize("fault", LOCAL, ids=str)
@pytest.mark.parametrize("qp_type", TYPES, ids=lambda t: t.name)
def test_a_local_fault_fails_at_the_requester_and_nothing_leaves(qp_type, fault) -> None:
    m = connected_model(qp_type)
    m.apply("b", m.post_recv("b", 9), True)
    m.apply("a", m.post_send("a", 1, Op.SEND, fault), True)
    (step,) = m.progress()
    assert step.rule is _RULE[fault] and step.rule.kind == "must"
    assert [s for s, _ in step.effects] == ["a"]  # nothing at the peer
    (req,) = [e for _, e in step.effects]
    assert req.completions[0].status == WCStatus.LOC_PROT_ERR
    assert m.qp("a").state == _AFTER[qp_type] and m.qp("b").state == S.RTS
    assert m.qp("b").queues.recvs == [9]
    assert step.placed == () and m.memory.used  # the guard bands are read


def test_a_write_with_a_local_fault_places_nothing_in_the_peers_window() -> None:
    m = connected_model(QPType.RC)
    m.apply("a", m.post_send("a", 1, Op.RDMA_WRITE, Fault.LOCAL_PAST_END), True)
    (step,) = m.progress()
    assert step.placed == () and not m.memory.granted
    assert access.GUARD in step.effects[-1][1].checked


def test_local_windows_cross_the_end_and_lie_in_the_second_pd() -> None:
    across = local_access.window_of(Op.SEND, "local_past_end")
    assert across.target == "full"
    assert across.offset < access.TARGET_LEN < across.offset + across.length
    other = local_access.window_of(Op.RDMA_WRITE, "local_other_pd")
    assert access.TARGETS[other.target][1]  # the target of the second PD
    assert other.offset + other.length <= access.TARGET_LEN


@pytest.mark.parametrize("op", [Op.RDMA_READ, Op.COMP_SWAP], ids=str)
def test_a_local_fault_is_planted_on_data_going_out_only(op: Op) -> None:
    m = connected_model(QPType.RC)
    with pytest.raises(ValueError, match="local SGE"):
        m.post_send("a", 1, op, Fault.LOCAL_PAST_END)
    with pytest.raises(ValueError, match="local SGE"):
        m.post_send("a", 1, Op.SEND, Fault.LOCAL_OTHER_PD, inline=True)
    with pytest.raises(ValueError, match="local SGE"):
        m.post_send("a", 1, Op.SEND, Fault.SINK_READ_ONLY)


@pytest.mark.parametrize("op", [Op.RDMA_READ, Op.COMP_SWAP, Op.FETCH_ADD], ids=str)
def test_a_sink_without_local_write_fails_the_requester_only(op: Op) -> None:
    m = connected_model(QPType.RC)
    m.apply("a", m.post_send("a", 1, op, Fault.SINK_READ_ONLY), True)
    (step,) = m.progress()
    assert step.rule is local_access.SINK_RIGHTS and step.rule.kind == "must"
    (req,) = [e for s, e in step.effects if s == "a"]
    assert req.completions[0].status == WCStatus.LOC_PROT_ERR
    assert access.GUARD in req.checked and m.memory.used
    assert m.qp("a").state == S.ERR and m.qp("b").state == S.RTS
    window = local_access.window_of(op, "sink_read_only")
    assert window.target == access.READ_ONLY and window.length == (8 if op.atomic else 16)


def test_the_iwarp_model_has_no_local_rule_yet() -> None:
    h = connected_fake(QPType.RC, iwarp=True)
    with pytest.raises(ValueError, match="iWARP"):
        h.model.post_send("a", 1, Op.SEND, Fault.LOCAL_PAST_END)


def test_a_send_into_a_receive_without_local_write_fails_both_ends() -> None:
    m = connected_model(QPType.RC)
    for wr in (10, 11):
        m.apply("b", m.post_recv("b", wr, read_only=wr == 10), True)
    m.apply("a", m.post_send("a", 1), True)
    (step,) = m.progress()
    assert step.rule is local_access.RECV_RIGHTS and m.memory.used
    got = {(side, c.wr_id): c.status for side, e in step.effects for c in e.completions}
    assert got == {("b", 10): WCStatus.LOC_PROT_ERR, ("b", 11): WCStatus.WR_FLUSH_ERR,
                   ("a", 1): WCStatus.REM_OP_ERR}
    assert (m.qp("a").state, m.qp("b").state) == (S.ERR, S.ERR)


@pytest.mark.parametrize("qp_type", [QPType.UC, QPType.UD], ids=lambda t: t.name)
def test_the_model_posts_a_read_only_receive_on_rc_only(qp_type) -> None:
    with pytest.raises(ValueError, match="RC QP only"):
        connected_model(qp_type).post_recv("b", 1, read_only=True)


# -------------------------------------------------------------------------- planted faults
def _send(fault: Fault):
    def scenario(h: PairHarness) -> None:
        h.post.recv("b")
        h.post.send("a", Op.SEND, fault)
    return scenario


def _write(fault: Fault):
    def scenario(h: PairHarness) -> None:
        h.post.send("a", Op.RDMA_WRITE, fault)
    return scenario


@pytest.mark.parametrize(("planted", "fault"), [
    ("local_bounds_unchecked", Fault.LOCAL_PAST_END),
    ("local_pd_unchecked", Fault.LOCAL_OTHER_PD),
    ("local_bounds_loc_len_err", Fault.LOCAL_PAST_END),
], ids=["bounds", "pd", "bounds-loc_len_err"])
@pytest.mark.parametrize("qp_type", TYPES, ids=lambda t: t.name)
def test_a_send_past_a_local_check_is_caught_by_name(qp_type, planted, fault) -> None:
    d = scenario_divergence(connected_fake(qp_type, planted), _send(fault))
    assert (d.kind, d.rule_id, d.rule_kind) == ("status", _RULE[fault].id, "must")


@pytest.mark.parametrize(("planted", "fault"), [
    ("local_bounds_unchecked", Fault.LOCAL_PAST_END),
    ("local_pd_unchecked", Fault.LOCAL_OTHER_PD),
], ids=["bounds", "pd"])
@pytest.mark.parametrize("qp_type", [QPType.RC, QPType.UC], ids=lambda t: t.name)
def test_a_write_past_a_local_check_is_caught_by_name(qp_type, planted, fault) -> None:
    d = scenario_divergence(connected_fake(qp_type, planted), _write(fault))
    assert (d.kind, d.rule_id) == ("status", _RULE[fault].id)


def _sink(op: Op):
    def scenario(h: PairHarness) -> None:
        h.post.send("a", op, Fault.SINK_READ_ONLY)
    return scenario


@pytest.mark.parametrize("op", [Op.RDMA_READ, Op.COMP_SWAP, Op.FETCH_ADD], ids=str)
def test_a_response_placed_in_a_sink_without_local_write_is_caught_by_name(op: Op) -> None:
    d = scenario_divergence(connected_fake(QPType.RC, "sink_write_unchecked"), _sink(op))
    assert (d.kind, d.rule_id, d.rule_kind) == ("status", local_access.SINK_RIGHTS.id, "must")


def _sink_plain_read(h: PairHarness) -> None:
    h.post.send("a", Op.RDMA_READ)


def _read_only_recv(h: PairHarness) -> None:
    h.post.recv("b", read_only=True)
    h.post.recv("b")
    h.post.send("a", Op.SEND)


def test_a_send_placed_in_a_receive_without_local_write_is_caught_by_name() -> None:
    d = scenario_divergence(connected_fake(QPType.RC, "recv_write_unchecked"), _read_only_recv)
    assert (d.rule_id, d.rule_kind) == (local_access.RECV_RIGHTS.id, "must")


_NEAR_MISSES = {
    "clean-bounds-send": (None, _send(Fault.LOCAL_PAST_END)),
    "clean-pd-send": (None, _send(Fault.LOCAL_OTHER_PD)),
    "clean-bounds-write": (None, _write(Fault.LOCAL_PAST_END)),
    "clean-pd-write": (None, _write(Fault.LOCAL_OTHER_PD)),
    "bounds-unchecked-pd": ("local_bounds_unchecked", _send(Fault.LOCAL_OTHER_PD)),
    "pd-unchecked-bounds": ("local_pd_unchecked", _send(Fault.LOCAL_PAST_END)),
    "loc-len-pd": ("local_bounds_loc_len_err", _send(Fault.LOCAL_OTHER_PD)),
    "unchecked-plain-send": ("local_bounds_unchecked", _send(Fault.NONE)),
    "clean-sink-read": (None, _sink(Op.RDMA_READ)),
    "clean-sink-atomic": (None, _sink(Op.FETCH_ADD)),
    "sink-unchecked-bounds": ("sink_write_unchecked", _send(Fault.LOCAL_PAST_END)),
    "sink-unchecked-plain-read": ("sink_write_unchecked", _sink_plain_read),
    "clean-sink-recv": (None, _read_only_recv),
    "recv-unchecked-sink-read": ("recv_write_unchecked", _sink(Op.RDMA_READ)),
}


@pytest.mark.parametrize(("qp_type", "planted", "scenario", "name"), [
    pytest.param(t, planted, scenario, name, id=f"{t.name}-{name}")
    for name, (planted, scenario) in _NEAR_MISSES.items()
    for t in TYPES
    if not (t is QPType.UD and "write" in name)  # UD carries no WRITE
    and not (t is not QPType.RC and ("sink" in name))  # nor UC READs or atomics
])
def test_near_misses_stay_clean(qp_type, planted, scenario, name) -> None:
    h = connected_fake(qp_type, planted)
    scenario(h)
    h.quiet(0.01)
    h.finish()
    assert not h.known
    assert h.model.memory.used == ("plain" not in name)  # the guard bands were compared


# ----------------------------------------------------------------------- traffic machines
def _machine(qp_type: QPType, planted: str | None):
    def make() -> PairHarness:
        return PairHarness(FakePair(qp_type, planted), sink=None, time_scale=0.01)
    return machine_for(qp_type, make, faults={"local"})


@pytest.mark.parametrize(("qp_type", "planted", "rule"), [
    (QPType.UD, "local_pd_unchecked", local_access.LOCAL_OTHER_PD),
    (QPType.UC, "local_bounds_loc_len_err", local_access.LOCAL_BOUNDS),
    (QPType.RC, "sink_write_unchecked", local_access.SINK_RIGHTS),
    (QPType.RC, "recv_write_unchecked", local_access.RECV_RIGHTS),
], ids=["UD-pd", "UC-bounds", "RC-sink", "RC-recv"])
def test_the_traffic_machine_draws_the_local_faults(qp_type, planted, rule) -> None:
    d = machine_divergence(_machine(qp_type, planted))
    assert d.rule_id == rule.id


@pytest.mark.parametrize("qp_type", TYPES, ids=lambda t: t.name)
def test_the_traffic_machine_on_a_clean_fake_finds_nothing(qp_type) -> None:
    log = RuleLog(strict=True)

    def make() -> PairHarness:
        return PairHarness(FakePair(qp_type), recorder=log, sink=log, time_scale=0.01)

    machine = seed(0)(machine_for(qp_type, make, faults={"local"}))
    machine.TestCase.settings = settings(
        max_examples=examples(80, floor=40), stateful_step_count=20, deadline=None, database=None,
        derandomize=False, **PLANTED_RUN,
    )
    machine.TestCase().runTest()  # a divergence fails it (strict)
    # a local fault was judged (RC leaves RTS at the first: which of the two is the draw's)
    assert sum(log.rules[r.id] for r in local_access.RULES)
    assert log.rules[access.GUARD.id]  # the guard bands were compared
