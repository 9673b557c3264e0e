"""The pair machines draw each modify's fill outside its mask (qpconform/machines/fills.py
FILLS, one draw per modify rule, shrinking to plain) and catch a pair end that reads a
field outside the mask: cur_qp_state without IBV_QP_CUR_STATE (planted fault
cur_state_from_unmasked, the pair's counterpart of the lone fake's
state_from_unmasked_qp_state: a pair modify always carries IBV_QP_STATE)."""

from __future__ import annotations

from models.enums import QPState, QPType
from qpconform.engine import unmasked
from qpconform.engine.judge import DivergenceError
from qpconform.engine.pair import PairHarness
from qpconform.machines.pair import machine_for
from tests.fake_pair import FakePair, machine_divergence

S = QPState
FAULT = "cur_state_from_unmasked"


def _plain_harness(qp_type: QPType, fault: str | None = FAULT) -> PairHarness:
    """A harness whose own modifies (the connect, resets) take the plain fill: only a fill
    given to `modify` (the machine's draw) can put another value outside the mask."""
    h = PairHarness(FakePair(qp_type, fault), sink=None, time_scale=0.01)
    h.fills = lambda *_: {}
    return h


def test_a_cur_qp_state_outside_the_mask_read_as_the_current_state_is_caught() -> None:
    h = _plain_harness(QPType.RC)
    h.lifecycle.connect()
    try:
        h.modify("a", S.SQD, fill=unmasked.uniform(unmasked.ZERO))  # RESET -> SQD: illegal
    except DivergenceError as caught:
        record = caught.record
    else:
        raise AssertionError("the fake refused RTS->SQD and nothing diverged")
    assert (record.kind, record.verb) == ("outcome", "modify")
    step = [s for s in record.steps if s.get("verb") == "modify"][-1]
    assert (step["unmasked"]["cur_qp_state"], step["mask"]) == (0, ["STATE"])


def test_the_plain_fill_hides_it() -> None:
    """Near miss: the same faulty end, every modify plain (cur_qp_state the QP's state)."""
    h = _plain_harness(QPType.RC)
    h.lifecycle.connect()
    h.modify("a", S.SQD, fill=unmasked.uniform(unmasked.PLAIN))
    h.modify("a", S.RTS, fill=unmasked.uniform(unmasked.PLAIN))
    h.modify("b", S.ERR, fill=unmasked.uniform(unmasked.PLAIN))
    h.quiet(0.01)
    assert h.known == []


def test_the_traffic_machine_draws_the_fill_that_catches_it() -> None:
    """Only the machine's modify rule draws a fill here (the harness's own are plain): the
    fault is found, at a modify whose drawn cur_qp_state is not the QP's state."""

    def make() -> PairHarness:
        return _plain_harness(QPType.RC)

    record = machine_divergence(machine_for(QPType.RC, make, faults=()))
    assert (record.kind, record.verb) == ("outcome", "modify")
    last = [s for s in record.steps if s.get("verb") == "modify"][-1]
    assert last["unmasked"]["cur_qp_state"] != S[last["expect"]["state_before"]]
