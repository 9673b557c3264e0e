"""The responder QP's own access flags (models/access.py RC_QP_RIGHTS, UC_QP_RIGHTS): the
model's verdicts while the flags are narrowed and widened again by RTS->RTS (and set by
RTR->RTS), and planted faults on the fake pair each caught by its rule: a QP that ignores
its flags, a refusal with a status the rule does not allow, a "may" choice not held; with
near misses (the other allowed status, widened flags, a right the QP kept)."""

from __future__ import annotations

import pytest

from models import access
from models.enums import AccessFlag, Attr, QPState, QPType, WCStatus
from models.operations import Op
from models.pair import PairModel
from models.wire import Fault
from qpconform.engine.judge import DivergenceError
from qpconform.engine.pair import PairHarness
from qpconform.machines.pair import machine_for
from tests.fake_pair import FakePair, connected_fake, connected_model, machine_divergence
from tests.test_wc_fields_planted import _ChoiceLog

S = QPState
F = AccessFlag
ALL = int(F.LOCAL_WRITE | F.REMOTE_WRITE | F.REMOTE_READ | F.REMOTE_ATOMIC)


def _set(m: PairModel, side: str, flags: int, to: QPState = S.RTS) -> None:
    exp = m.modify(side, {"qp_state": int(to), "qp_access_flags": flags},
                   Attr.STATE | Attr.ACCESS_FLAGS)
    m.apply(side, exp, True)


def _without(right: AccessFlag) -> int:
    return ALL & ~int(right)


# ----------------------------------------------------------------------------- the model
@pytest.mark.parametrize("op", [Op.RDMA_WRITE, Op.RDMA_READ, Op.COMP_SWAP, Op.FETCH_ADD],
                         ids=str)
def test_rc_request_the_qp_does_not_enable_is_refused_either_status(op: Op) -> None:
    m = connected_model(QPType.RC)
    _set(m, "b", _without(access.right_of(op)))
    m.apply("a", m.post_send("a", 1, op, Fault.GRANTED), True)
    (step,) = m.progress()
    assert step.rule is access.RC_QP_RIGHTS and step.placed == ()
    (req,) = [e for s, e in step.effects if s == "a"]
    first = req.completions[0]
    assert first.status == WCStatus.REM_ACCESS_ERR
    assert first.statuses == (frozenset({WCStatus.REM_INV_REQ_ERR}), access.RC_QP_RIGHTS)
    assert first.allows_status(WCStatus.REM_INV_REQ_ERR)
    assert not first.allows_status(WCStatus.REM_OP_ERR)
    assert access.GUARD in req.checked
    (resp,) = [e for s, e in step.effects if s == "b"]
    assert access.RC_QP_RIGHTS in resp.checked and resp.events == ()
    assert m.qp("a").state == m.qp("b").state == S.ERR


@pytest.mark.parametrize("op", [Op.RDMA_WRITE, Op.RDMA_READ, Op.FETCH_ADD], ids=str)
def test_rc_a_right_the_qp_kept_lets_the_request_through(op: Op) -> None:
    """Near miss: every other right taken away, the one `op` needs kept."""
    m = connected_model(QPType.RC)
    _set(m, "b", int(F.LOCAL_WRITE | access.right_of(op)))
    m.apply("a", m.post_send("a", 1, op, Fault.GRANTED), True)
    (step,) = m.progress()
    assert step.rule is not access.RC_QP_RIGHTS
    assert m.qp("a").state == m.qp("b").state == S.RTS


def test_widened_again_the_request_goes_through() -> None:
    m = connected_model(QPType.RC)
    _set(m, "b", int(F.LOCAL_WRITE))
    _set(m, "b", ALL)
    m.apply("a", m.post_send("a", 1, Op.RDMA_WRITE, Fault.GRANTED), True)
    (step,) = m.progress()
    assert step.placed and m.qp("b").state == S.RTS


def test_flags_set_by_rtr_to_rts_and_forgotten_by_reset() -> None:
    m = PairModel(QPType.RC)
    for state in (S.INIT, S.RTR):
        for side in ("a", "b"):
            m.apply(side, m.modify(side, {"qp_state": int(state)}, Attr.STATE), True)
    _set(m, "b", int(F.LOCAL_WRITE | F.REMOTE_READ))  # RTR->RTS
    assert m.qp("b").judge.access_flags == int(F.LOCAL_WRITE | F.REMOTE_READ)
    assert m.lacks("b", Op.RDMA_WRITE) and not m.lacks("b", Op.RDMA_READ)
    assert not m.lacks("b", Op.SEND)
    refused = m.modify("b", {"qp_state": int(S.RTS), "qp_access_flags": ALL}, Attr.STATE)
    m.apply("b", refused, True)  # the mask leaves the flags out: they stay
    assert m.lacks("b", Op.RDMA_WRITE)
    m.apply("b", m.modify("b", {"qp_state": int(S.RESET)}, Attr.STATE), True)
    assert m.qp("b").judge.access_flags is None and not m.lacks("b", Op.RDMA_WRITE)


@pytest.mark.parametrize("op", [Op.RDMA_WRITE, Op.WRITE_WITH_IMM], ids=str)
def test_uc_write_the_qp_does_not_enable_is_dropped(op: Op) -> None:
    m = connected_model(QPType.UC)
    _set(m, "b", int(F.LOCAL_WRITE))
    m.apply("b", m.post_recv("b", 9), True)
    m.apply("a", m.post_send("a", 1, op), True)
    (step,) = m.progress()
    assert step.rule is access.UC_QP_RIGHTS
    assert [s for s, _ in step.effects] == ["a"]  # nothing at the responder
    assert m.qp("a").state == m.qp("b").state == S.RTS and m.qp("b").queues.recvs == [9]


def test_rc_write_with_immediate_to_a_qp_without_remote_write_is_not_judged() -> None:
    """Which comes first, the QP's rights or the receive queue (RNR), is the responder's
    order of checks: the model posts none, and the machine draws none (judgeable)."""
    m = connected_model(QPType.RC)
    _set(m, "b", _without(F.REMOTE_WRITE))
    assert not m.judgeable("a", Op.WRITE_WITH_IMM) and m.judgeable("a", Op.RDMA_WRITE)
    with pytest.raises(ValueError, match="WRITE with immediate"):
        m.post_send("a", 1, Op.WRITE_WITH_IMM)


# -------------------------------------------------------------------------- planted faults
def _narrow(h: PairHarness, flags: int) -> None:
    h.modify("b", S.RTS, {"qp_access_flags": flags}, Attr.ACCESS_FLAGS)


def _refused_write(h: PairHarness) -> None:
    """b's QP loses REMOTE_WRITE; a writes into b's fully granted target MR."""
    _narrow(h, _without(F.REMOTE_WRITE))
    h.post.recv("b")
    h.post.send("a", Op.RDMA_WRITE, Fault.GRANTED)
    h.post.send("a", Op.SEND)


def _refused_read(h: PairHarness) -> None:
    _narrow(h, _without(F.REMOTE_READ))
    h.post.send("a", Op.RDMA_READ, Fault.GRANTED)


def _widened_write(h: PairHarness) -> None:
    _narrow(h, int(F.LOCAL_WRITE))
    _narrow(h, h.dev.values("b")["qp_access_flags"])
    h.post.send("a", Op.RDMA_WRITE, Fault.GRANTED)


def _kept_write(h: PairHarness) -> None:
    """Only the READ and atomic rights go: the WRITE is let through."""
    _narrow(h, int(F.LOCAL_WRITE | F.REMOTE_WRITE))
    h.post.send("a", Op.RDMA_WRITE, Fault.GRANTED)


def _scenario_divergence(h: PairHarness, scenario) -> object:
    with pytest.raises(DivergenceError) as caught:
        scenario(h)
        h.quiet(0.01)
        h.finish()
    return caught.value.record


@pytest.mark.parametrize(("qp_type", "fault", "scenario", "kind", "rule"), [
    # the write lands: SUCCESS where the rule wants a refusal
    (QPType.RC, "qp_rights_ignored", _refused_write, "status", access.RC_QP_RIGHTS.id),
    (QPType.RC, "qp_rights_ignored", _refused_read, "status", access.RC_QP_RIGHTS.id),
    # UC: the requester cannot tell; the bytes give it away
    (QPType.UC, "qp_rights_ignored", _refused_write, "memory", access.GUARD.id),
    (QPType.RC, "qp_rights_wrong_status", _refused_write, "status", access.RC_QP_RIGHTS.id),
], ids=["RC-ignored-write", "RC-ignored-read", "UC-ignored", "RC-wrong-status"])
def test_planted_qp_rights_faults_are_caught(qp_type, fault, scenario, kind, rule) -> None:
    d = _scenario_divergence(connected_fake(qp_type, fault), scenario)
    assert (d.kind, d.rule_id) == (kind, rule)


_NEAR_MISSES = {
    "clean-refused": (QPType.RC, None, _refused_write),
    "clean-refused-read": (QPType.RC, None, _refused_read),
    "clean-uc-refused": (QPType.UC, None, _refused_write),
    "other-status": (QPType.RC, "qp_rights_as_invalid_request", _refused_write),
    "wrong-status-widened": (QPType.RC, "qp_rights_wrong_status", _widened_write),
    "ignored-widened": (QPType.RC, "qp_rights_ignored", _widened_write),
    "ignored-kept": (QPType.RC, "qp_rights_ignored", _kept_write),
    "uc-ignored-widened": (QPType.UC, "qp_rights_ignored", _widened_write),
}


@pytest.mark.parametrize(("qp_type", "fault", "scenario"), list(_NEAR_MISSES.values()),
                         ids=list(_NEAR_MISSES))
def test_near_misses_stay_clean(qp_type, fault, scenario) -> None:
    h = connected_fake(qp_type, fault)
    scenario(h)
    h.quiet(0.01)
    h.finish()
    assert not h.known and h.model.memory.used


def _recorded(fault: str | None) -> tuple[PairHarness, _ChoiceLog]:
    log = _ChoiceLog()
    h = PairHarness(FakePair(QPType.RC, fault), recorder=log, sink=log, time_scale=0.01)
    h.lifecycle.connect()
    return h, log


def _refused_twice(h: PairHarness) -> None:
    """A refusal, a fresh connection, the same refusal again."""
    for _ in range(2):
        _refused_write(h)
        h.quiet(0.01)
        for side in ("a", "b"):
            h.lifecycle.reset(side)
        h.lifecycle.connect()


def test_a_qp_rights_status_chosen_both_ways_is_inconsistent() -> None:
    h, _log = _recorded("qp_rights_inconsistent")
    with pytest.raises(DivergenceError) as caught:
        _refused_twice(h)
    record = caught.value.record
    assert (record.kind, record.rule_id) == ("inconsistent", access.RC_QP_RIGHTS.id)


@pytest.mark.parametrize("fault", [None, "qp_rights_as_invalid_request"])
def test_a_qp_rights_status_chosen_one_way_is_a_characteristic(fault) -> None:
    """Near miss: Remote Access Error every time, or Invalid Request every time (rxe)."""
    h, log = _recorded(fault)
    _refused_twice(h)
    h.finish()
    assert h.known == [] and log.divergences == []
    chosen = log.book.seen[access.RC_QP_RIGHTS.id][f"RC {access.RC_QP_RIGHTS.id}"]
    want = WCStatus.REM_INV_REQ_ERR if fault else WCStatus.REM_ACCESS_ERR
    assert set(chosen) == {f"status={want.name}"}


# ----------------------------------------------------------------------- traffic machines
@pytest.mark.parametrize(("qp_type", "rules"), [
    # UC: a WRITE into a target MR shows in its bytes; a WRITE with immediate in the
    # receive it takes, which the model's drop left waiting (an unexpected completion)
    (QPType.UC, {access.GUARD.id, "pair.completion.unexpected"}),
    (QPType.RC, {access.RC_QP_RIGHTS.id}),
], ids=["UC", "RC"])
def test_the_traffic_machine_narrows_a_qp_and_catches_one_that_ignores_it(
    qp_type, rules,
) -> None:
    """The machine's access draws narrow the responder's flags with an RTS->RTS modify and
    find the QP that lets the request through anyway."""
    def make() -> PairHarness:
        return PairHarness(FakePair(qp_type, "qp_rights_ignored"), sink=None,
                           time_scale=0.01)

    d = machine_divergence(machine_for(qp_type, make, faults={"access"}))
    assert d.rule_id in rules


def test_uc_inline_write_the_qp_does_not_enable_is_judged_by_the_drop() -> None:
    """An inline WRITE is the same WR not inline: its drop names the QP's rights."""
    m = connected_model(QPType.UC)
    _set(m, "b", int(F.LOCAL_WRITE))
    m.apply("a", m.post_send("a", 1, Op.RDMA_WRITE, inline=True), True)
    (step,) = m.progress()
    assert step.rule is access.UC_QP_RIGHTS
