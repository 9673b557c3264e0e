"""Self-tests of inline WRs, operations a QP type lacks and the initiator depth.

A clean fake pair passes every scenario; each planted fault of tests/fake_pair.py's
OPS_EXTRA_FAULTS breaks one rule of models/operations.py (pair.inline.delivered,
pair.inline.over_cap, pair.op.not_of_type, pair.read.initiator_depth) and is caught by a
deterministic scenario and by the traffic machine, with its rule. The model's side of each
rule is checked here too.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from models.enums import QPState, QPType, WCStatus
from models.operations import Op, foreign_ops
from models.outcomes import Outcome
from models.pair import PairModel
from models.wire import Fault
from qpconform.engine.judge import DivergenceError
from qpconform.engine.pair import PairHarness
from qpconform.machines.pair import machine_for
from tests.fake_pair import (
    FAKE_MAX_INLINE,
    FakePair,
    connected_fake,
    known_after,
    machine_divergence,
)

S = QPState
ALL = [QPType.RC, QPType.UC, QPType.UD]


def _inline(h: PairHarness) -> None:
    """A SEND and (RC, UC) a WRITE posted inline, within the reported cap."""
    h.post.recv("b")
    h.post.send("a", Op.SEND, inline=True)
    if h.dev.qp_type != QPType.UD:
        h.post.send("a", Op.RDMA_WRITE, inline=True)


def _over_cap(h: PairHarness) -> None:
    """An inline SEND one byte beyond the cap (refused), then a SEND that must run."""
    h.post.recv("b")
    h.post.send("a", Op.SEND, Fault.INLINE_OVER_CAP)
    h.post.send("a", Op.SEND)


def _foreign(h: PairHarness) -> None:
    """The first operation the QP type lacks (UC: READ; UD: WRITE), a receive waiting."""
    h.post.recv("b")
    h.post.send("a", foreign_ops(h.dev.qp_type)[0])


def _misaligned(h: PairHarness) -> None:
    """A compare-and-swap to a remote address off alignment, then a SEND (RC)."""
    h.post.recv("b")
    h.post.send("a", Op.COMP_SWAP, Fault.MISALIGNED)
    h.post.send("a", Op.SEND)


def _depth(h: PairHarness) -> None:
    """Four READs back to back with max_rd_atomic 1 (RC)."""
    with h.post.back_to_back():
        for _ in range(4):
            h.post.send("a", Op.RDMA_READ)


_TYPES: dict[Callable, list[QPType]] = {
    _inline: ALL, _over_cap: ALL, _foreign: [QPType.UC, QPType.UD], _depth: [QPType.RC],
    _misaligned: [QPType.RC],
}
_CLEAN = [(t, s) for s, types in _TYPES.items() for t in types]


@pytest.mark.parametrize(
    ("qp_type", "scenario"), _CLEAN, ids=[f"{t.name}-{s.__name__.strip('_')}" for t, s in _CLEAN]
)
def test_clean_fake_has_no_divergence(qp_type: QPType, scenario: Callable) -> None:
    assert known_after(qp_type, scenario) == []


#: (planted fault, scenario, divergence kind, rule, the machine's faults)
PLANTED = [
    ("inline_fails", _inline, "status", "pair.inline.delivered", ()),
    ("inline_over_cap_accepted", _over_cap, "outcome", "pair.inline.over_cap",
     ("inline_over_cap",)),
    ("op_not_of_type_succeeds", _foreign, "status", "pair.op.not_of_type", ("foreign_op",)),
    ("read_beyond_depth_fails", _depth, "status", "pair.read.initiator_depth", ()),
    ("misaligned_atomic_executes", _misaligned, "status", "pair.rc.atomic_misaligned",
     ("misaligned_atomic",)),
]
_CASES = [(f, s, t, k, r) for f, s, k, r, _ in PLANTED for t in _TYPES[s]]


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


@pytest.mark.parametrize(
    ("fault", "qp_type", "rule", "faults"),
    [(f, _TYPES[s][-1], r, m) for f, s, _, r, m in PLANTED],
    ids=[f for f, *_ in PLANTED],
)
def test_the_traffic_machine_catches_each_planted_fault(fault, qp_type, rule, faults) -> None:
    """The machine draws inline or not on its post_send rule, plants an over-cap inline WR
    or an operation the type lacks, and posts READ bursts (fixed seed, as for the others)."""

    def make() -> PairHarness:
        return PairHarness(FakePair(qp_type, fault), sink=None, time_scale=0.01)

    record = machine_divergence(machine_for(qp_type, make, faults=faults))
    assert record.rule_id == rule


# ------------------------------------------------------------------ the model's side
def _rts(qp_type: QPType) -> PairModel:
    pair = PairModel(qp_type)
    for side in "ab":
        pair.qp(side).state = S.RTS
    return pair


def test_an_inline_wr_beyond_the_cap_is_refused_and_never_runs() -> None:
    pair = _rts(QPType.RC)
    exp = pair.post_send("a", 1, Op.RDMA_WRITE, Fault.INLINE_OVER_CAP)
    assert (exp.outcome, exp.rule.id, exp.never_run) == (
        Outcome.REFUSE, "pair.inline.over_cap", frozenset({1})
    )
    pair.apply("a", exp, False)
    assert pair.qp("a").queues.outstanding_sends == [] and pair.progress() == []


def test_an_inline_wr_below_rts_keeps_the_state_rule() -> None:
    exp = PairModel(QPType.RC).post_send("a", 1, Op.SEND, Fault.INLINE_OVER_CAP)
    assert (exp.outcome, exp.rule.id) == (Outcome.REFUSE, "ibta.post_send.RESET")


def test_a_read_or_atomic_cannot_be_inline() -> None:
    with pytest.raises(ValueError, match="cannot be posted inline"):
        _rts(QPType.RC).post_send("a", 1, Op.RDMA_READ, inline=True)


def test_an_inline_send_is_delivered_as_a_send() -> None:
    pair = _rts(QPType.UD)
    pair.apply("b", pair.post_recv("b", 1), True)
    pair.apply("a", pair.post_send("a", 2, Op.SEND, inline=True), True)
    (step,) = pair.progress()
    assert step.rule.id == "pair.inline.delivered"
    assert pair.qp("b").queues.recvs == []


@pytest.mark.parametrize("qp_type", [QPType.UC, QPType.UD], ids=lambda t: t.name)
def test_an_accepted_foreign_op_fails_locally_and_reaches_nothing(qp_type: QPType) -> None:
    pair = _rts(qp_type)
    pair.apply("b", pair.post_recv("b", 1), True)
    exp = pair.post_send("a", 2, foreign_ops(qp_type)[0])
    assert (exp.outcome, exp.rule.id) == (Outcome.EITHER, "pair.op.not_of_type")
    pair.apply("a", exp, True)
    (step,) = pair.progress()
    ((side, done),) = step.effects
    assert side == "a" and [c.status for c in done.completions] == [WCStatus.LOC_QP_OP_ERR]
    assert pair.qp("a").state == S.SQE and pair.qp("b").queues.recvs == [1]


def test_a_refused_foreign_op_never_runs() -> None:
    pair = _rts(QPType.UC)
    exp = pair.post_send("a", 2, Op.FETCH_ADD)
    pair.apply("a", exp, False)
    assert pair.qp("a").queues.never_run == {2} and pair.progress() == []


def test_reads_beyond_the_depth_are_named_only_back_to_back() -> None:
    pair = _rts(QPType.RC)
    for wr_id in (1, 2):
        pair.apply("a", pair.post_send("a", wr_id, Op.RDMA_READ), True)
    pair.burst = {}
    for wr_id in (3, 4, 5):
        pair.apply("a", pair.post_send("a", wr_id, Op.FETCH_ADD), True)
    rules = [(st.wr_id, st.rule.id) for st in pair.progress()]
    assert rules == [
        (1, "pair.read.delivered"), (2, "pair.read.delivered"), (3, "pair.atomic.delivered"),
        (4, "pair.read.initiator_depth"), (5, "pair.read.initiator_depth"),
    ]


def test_the_fake_reports_a_rounded_up_cap() -> None:
    h = connected_fake(QPType.RC)
    assert h.post.max_inline("a") == FAKE_MAX_INLINE and h.post.can_inline("a", over_cap=True)


def test_a_provider_that_refuses_a_misaligned_atomic_conforms() -> None:
    """rdma-core's rxe provider refuses the post (EINVAL): a "may" choice, recorded; the
    WR never runs and the SEND after it is delivered."""
    h = connected_fake(QPType.RC, "misaligned_atomic_refused")
    _misaligned(h)
    h.quiet(0.01)
    assert h.known == []


def test_a_misaligned_atomic_is_an_either_post_and_an_invalid_request() -> None:
    pair = _rts(QPType.RC)
    exp = pair.post_send("a", 1, Op.FETCH_ADD, Fault.MISALIGNED)
    assert (exp.outcome, exp.rule.id, exp.errnos) == (
        Outcome.EITHER, "pair.atomic.misaligned.post", frozenset({22}))
    pair.apply("a", exp, True)
    (step,) = pair.progress()
    assert step.rule.id == "pair.rc.atomic_misaligned"
    sent = next(e for side, e in step.effects if side == "a")
    responder = next(e for side, e in step.effects if side == "b")
    assert [c.status for c in sent.completions] == [WCStatus.REM_INV_REQ_ERR]
    assert pair.qp("a").state == pair.qp("b").state == S.ERR
    assert responder.events == () and responder.allowed_events  # the driver's event, or none
    with pytest.raises(ValueError, match="atomic only"):
        _rts(QPType.RC).post_send("a", 2, Op.RDMA_WRITE, Fault.MISALIGNED)
