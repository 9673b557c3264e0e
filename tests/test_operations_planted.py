"""Self-tests of the operations beyond SEND and WRITE: READ, immediate data, unsignaled WRs.

A clean fake pair passes every scenario; each planted fault of tests/fake_pair.py breaks
one promise of models/operations.py (or of the flush and error rules for an unsignaled WR)
and is caught by a deterministic scenario and by the traffic machine, with its rule.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from models.enums import QPState, QPType, WCOpcode, WCStatus
from models.operations import OPS_BY_TYPE, Op, imm_for
from models.outcomes import Expectation, ExpectedCompletion, Outcome
from models.pair import PairModel
from models.rules import SEND_DONE
from models.wire import Fault
from qpconform.engine.device import Completion
from qpconform.engine.judge import DivergenceError
from qpconform.engine.ledger import Found, Ledger
from qpconform.engine.pair import PairHarness
from qpconform.machines.pair import machine_for
from tests.fake_pair import FakePair, connected_fake, known_after, machine_divergence

S = QPState
ALL = [QPType.RC, QPType.UC, QPType.UD]


def _imm(h: PairHarness) -> None:
    """Immediate data both ways it travels: SEND_WITH_IMM, and WRITE_WITH_IMM (RC, UC)."""
    for op in (Op.SEND_WITH_IMM, Op.WRITE_WITH_IMM):
        if op in OPS_BY_TYPE[h.dev.qp_type]:
            h.post.recv("b")
            h.post.send("a", op)


def _read(h: PairHarness) -> None:
    """An RDMA READ (RC), with a receive posted at the responder that it must not consume."""
    h.post.recv("b")
    h.post.send("a", Op.RDMA_READ)
    h.post.send("a", Op.SEND)  # takes the receive the READ left


def _atomics(h: PairHarness) -> None:
    """Both atomics (RC), with a receive posted at the responder they must not consume."""
    h.post.recv("b")
    h.post.send("a", Op.COMP_SWAP)
    h.post.send("a", Op.FETCH_ADD)
    h.post.send("a", Op.SEND)


def _unsignaled(h: PairHarness) -> None:
    """Selective signaling: two unsignaled WRs, then a signaled one that retires them."""
    h.post.recv("b")
    h.post.send("a", Op.SEND, signaled=False)
    h.post.send("a", Op.SEND, signaled=False)
    h.post.recv("b")
    h.post.send("a", Op.SEND)


def _unsignaled_flush(h: PairHarness) -> None:
    """Unsignaled WRs held in SQD, then ERR: each is flushed though none is signaled."""
    h.modify("a", S.SQD)
    h.post.send("a", Op.SEND, signaled=False)
    h.post.send("a", Op.SEND, signaled=False)
    h.modify("a", S.ERR)


def _unsignaled_error(h: PairHarness) -> None:
    """An unsignaled WR with a bad local key: its error completes it anyway."""
    h.post.send("a", Op.SEND, Fault.BAD_LKEY, signaled=False)


SCENARIOS = [_imm, _read, _atomics, _unsignaled, _unsignaled_flush, _unsignaled_error]


_CLEAN = [(t, s) for t in ALL for s in SCENARIOS if s not in (_read, _atomics) or t == QPType.RC]


@pytest.mark.parametrize(
    ("qp_type", "scenario"), _CLEAN, ids=[f"{t.name}-{s.__name__.strip('_')}" for t, s in _CLEAN]
)
def test_clean_fake_has_no_divergence(qp_type: QPType, scenario: Callable) -> None:
    assert known_after(qp_type, scenario) == []


#: (planted fault, scenario, QP types, divergence kind, rule)
PLANTED = [
    ("read_as_write", _read, [QPType.RC], "fields", "pair.completion.opcode"),
    ("atomic_as_read", _atomics, [QPType.RC], "fields", "pair.completion.opcode"),
    ("write_imm_as_recv", _imm, [QPType.RC, QPType.UC], "fields", "pair.completion.opcode"),
    ("imm_lost", _imm, ALL, "fields", "pair.imm.delivered"),
    ("unsignaled_completes", _unsignaled, ALL, "completion", "pair.unsignaled.silent"),
    ("unsignaled_flush_lost", _unsignaled_flush, ALL, "missing_completion", "ibta.err.flush"),
    ("unsignaled_error_lost", _unsignaled_error, ALL, "missing_completion", "pair.bad_lkey"),
]
_CASES = [(f, s, t, k, r) for f, s, types, k, r in PLANTED for t in types]


@pytest.mark.parametrize(
    ("fault", "scenario", "qp_type", "kind", "rule"), _CASES,
    ids=[f"{f}-{t.name}" for f, _, t, _, _ in _CASES],
)
def test_planted_fault_is_caught(fault, scenario, qp_type, kind, rule) -> None:
    h = connected_fake(qp_type, fault)
    with pytest.raises(DivergenceError) as caught:
        scenario(h)
        h.quiet(0.01)
    assert (caught.value.record.kind, caught.value.record.rule_id) == (kind, rule)
    if "unsignaled" in fault and kind == "missing_completion":
        assert "unsignaled" in caught.value.record.tags


#: The rules the machine may name for a fault: a lost flush of an unsignaled WR may be one
#: the post into ERR/SQE owed, as well as one a move to ERR owed.
_MACHINE_RULES = {
    "unsignaled_flush_lost": {"ibta.err.flush", "ibta.post_send.ERR", "ibta.post_send.SQE"},
    # the fault loses any unsignaled error completion: the machine may meet one by RNR or by
    # retry exhaustion (a peer in ERR) first
    "unsignaled_error_lost": {"pair.bad_lkey", "pair.rc.rnr_retry_exc", "pair.rc.retry_exc"},
}


@pytest.mark.parametrize(
    ("fault", "qp_type", "rule"),
    [(f, types[0], r) for f, _, types, _, r in PLANTED],
    ids=[f for f, *_ in PLANTED],
)
def test_the_traffic_machine_catches_each_planted_fault(fault, qp_type, rule) -> None:
    """The machine draws the operations, signaled or not, and finds each fault (fixed seed:
    a derandomized exploration would move with every unrelated edit)."""

    def make() -> PairHarness:
        return PairHarness(FakePair(qp_type, fault), sink=None, time_scale=0.01)

    record = machine_divergence(machine_for(qp_type, make, faults=("bad_lkey",)))
    assert record.rule_id in _MACHINE_RULES.get(fault, {rule})


# ------------------------------------------------------------------ the model's side
def test_a_write_with_immediate_consumes_a_receive_and_carries_the_data() -> None:
    pair = PairModel(QPType.RC)
    for side in "ab":
        qp = pair.qp(side)
        qp.state = S.RTS
    exp = pair.post_recv("b", 1)
    pair.apply("b", exp, True)
    exp = pair.post_send("a", 2, Op.WRITE_WITH_IMM)
    pair.apply("a", exp, True)
    (step,) = pair.progress()
    recv = [c for side, e in step.effects if side == "b" for c in e.completions]
    send = [c for side, e in step.effects if side == "a" for c in e.completions]
    assert [(c.wr_id, c.opcode, c.imm_data) for c in recv] == [
        (1, WCOpcode.RECV_RDMA_WITH_IMM, imm_for(2))
    ]
    assert [(c.wr_id, c.opcode) for c in send] == [(2, WCOpcode.RDMA_WRITE)]


def test_a_read_consumes_no_receive() -> None:
    pair = PairModel(QPType.RC)
    for side in "ab":
        pair.qp(side).state = S.RTS
    pair.apply("b", pair.post_recv("b", 1), True)
    pair.apply("a", pair.post_send("a", 2, Op.RDMA_READ), True)
    (step,) = pair.progress()
    assert step.rule.id == "pair.read.delivered"
    assert pair.qp("b").queues.recvs == [1]


@pytest.mark.parametrize(("qp_type", "op"), [(QPType.UC, Op.RDMA_READ), (QPType.UD, Op.RDMA_WRITE)])
def test_an_operation_the_type_lacks_is_modelled_in_rts_only(qp_type: QPType, op: Op) -> None:
    """Outside RTS the post's own state rule would meet pair.op.not_of_type: not modelled."""
    with pytest.raises(ValueError, match="in RTS only"):
        PairModel(qp_type).post_send("a", 1, op)


def test_an_unsignaled_success_is_silent() -> None:
    pair = PairModel(QPType.UC)
    for side in "ab":
        pair.qp(side).state = S.RTS
    pair.apply("a", pair.post_send("a", 1, Op.RDMA_WRITE, signaled=False), True)
    (step,) = pair.progress()
    (side, exp), = step.effects
    assert (exp.completions, exp.silent) == ((), frozenset({1}))
    assert "pair.unsignaled.silent" in [r.id for r in exp.checked]


# ----------------------------------------------------------------- the ledger's side
def _silent_ledger() -> Ledger:
    ledger = Ledger()
    exp = Expectation("send_completion", Outcome.ACCEPT, SEND_DONE, S.RTS, S.RTS,
                      silent=frozenset({5}))
    ledger.expect(exp, origin=0)
    return ledger


def test_a_silent_wr_may_be_flushed_before_a_later_completion_retires_it() -> None:
    found = _silent_ledger().match(Completion(5, "send", WCStatus.WR_FLUSH_ERR, 1))
    assert found.found is Found.UNRETIRED_FLUSH


def test_a_silent_wr_never_completes_successfully() -> None:
    found = _silent_ledger().match(Completion(5, "send", WCStatus.SUCCESS, 1))
    assert found.found is Found.NEVER
    assert found.because is not None and found.because.rule.id == "pair.unsignaled.silent"


def test_a_retired_silent_wr_may_not_be_flushed_any_more() -> None:
    ledger = _silent_ledger()
    ledger.add_due(ExpectedCompletion(6, "send", WCStatus.SUCCESS), SEND_DONE, 1)
    assert ledger.match(Completion(6, "send", WCStatus.SUCCESS, 1)).found is Found.MATCH
    found = ledger.match(Completion(5, "send", WCStatus.WR_FLUSH_ERR, 1))
    assert found.found is Found.NEVER
    assert found.because is not None and found.because.rule.id == "pair.unsignaled.silent"


def test_an_error_completion_s_opcode_is_not_judged() -> None:
    ledger = Ledger()
    due = ExpectedCompletion(7, "send", WCStatus.WR_FLUSH_ERR, WCOpcode.RDMA_READ)
    ledger.add_due(due, SEND_DONE, 0)
    got = Completion(7, "send", WCStatus.WR_FLUSH_ERR, 1, WCOpcode.SEND)
    assert ledger.match(got).found is Found.MATCH


def test_a_pair_without_atomics_carries_none_and_the_suite_says_why() -> None:
    from suites.test_operations import test_rc_bad_rkey

    h = PairHarness(FakePair(QPType.RC, atomics=False), sink=None, time_scale=0.01)
    assert not any(op.atomic for op in h.ops) and Op.RDMA_READ in h.ops

    def make_pair(qp_type: QPType, *_: object) -> PairHarness:
        h.lifecycle.connect()
        return h

    with pytest.raises(pytest.skip.Exception, match="atomic_cap is NONE"):
        test_rc_bad_rkey(make_pair, Op.COMP_SWAP)


def test_a_device_without_atomics_lacks_the_feature_in_the_report() -> None:
    from reports.qualification import build_report

    run = {"identity": {"device": "x", "atomic_cap": "none"}, "steps": [], "settings": {}}
    assert build_report(run)["capabilities"]["ATOMICS"] is False
    run["identity"]["atomic_cap"] = "hca"
    assert build_report(run)["capabilities"]["ATOMICS"] is True
