"""Self-tests of the iWARP pair (models/iwarp_pair.py through PairHarness): a clean fake
iWARP pair passes every scenario and the iWARP state machine, each planted fault is
caught under its rule, and the model's decisions are the iWARP ones (no RNR, no retry)."""

import pytest

from models.enums import QPState, QPType, WCStatus
from models.iwarp_pair import (
    BAD_STAG,
    CM_ESTABLISHED,
    LLP_CLOSED,
    NO_RECEIVE,
    SEND_DELIVERED,
    IwarpPairModel,
)
from models.operations import Op
from models.wire import Fault
from qpconform.engine.judge import DivergenceError
from qpconform.engine.pair import PairHarness
from tests.example_counts import PLANTED_RUN, examples
from tests.fake_pair import FakePair

S = QPState
RC = QPType.RC


def _harness(fault: str | None = None) -> PairHarness:
    h = PairHarness(FakePair(RC, fault, iwarp=True), sink=None, time_scale=0.01, variant="iwarp")
    h.lifecycle.connect()
    return h


def _traffic(h: PairHarness) -> None:
    h.post.recv("b")
    h.post.send("a")
    h.post.send("b", Op.RDMA_WRITE)


def _err_by_modify(h: PairHarness) -> None:
    h.post.recv("a")
    h.post.recv("b")
    h.post.recv("b")
    h.modify("a", S.ERR)


def _err_with_nothing_posted(h: PairHarness) -> None:
    h.modify("a", S.ERR)  # nothing to flush: only b's state shows the connection's end


def _no_receive(h: PairHarness) -> None:
    h.post.recv("a")
    h.post.send("a")  # b has no receive: Terminate, both ERR, a's receive flushed


def _bad_stag(h: PairHarness) -> None:
    h.post.recv("b")
    h.post.send("a", Op.RDMA_WRITE, Fault.BAD_RKEY)


def _peer_destroyed(h: PairHarness) -> None:
    h.post.recv("a")
    h.lifecycle.destroy("b")
    h.post.send("a")


def _close_by_sqd(h: PairHarness) -> None:
    h.post.recv("a")
    h.post.recv("b")
    h.modify("a", S.SQD)


def _terminate_by_sqe(h: PairHarness) -> None:
    h.post.recv("a")
    h.post.recv("b")
    h.modify("b", S.SQE)


def _reconnect(h: PairHarness) -> None:
    h.modify("b", S.ERR)
    h.lifecycle.reconnect()
    _traffic(h)


#: Scenarios a clean iWARP pair passes (tests/test_remote_pair.py runs them through the
#: executor too).
CLEAN = [
    _traffic, _err_by_modify, _no_receive, _bad_stag, _peer_destroyed, _reconnect,
    _close_by_sqd, _terminate_by_sqe,
]


@pytest.mark.parametrize("scenario", CLEAN)
def test_clean_fake_iwarp_pair_has_no_divergence(scenario):
    h = _harness()
    scenario(h)
    h.quiet(0.01)
    assert h.known == []


def test_connect_reaches_rts_through_the_connection_manager():
    h = _harness()
    assert [h.model.qp(s).state for s in "ab"] == [S.RTS, S.RTS]
    assert [st["expected"] for st in h.steps if st["verb"] == "wire"] == [CM_ESTABLISHED.id] * 2
    modifies = [st for st in h.steps if st.get("verb") == "modify"]
    assert modifies and all(st.get("expected") != "RTS" for st in modifies)


def test_err_on_one_end_ends_the_connection_for_both():
    h = _harness()
    _err_by_modify(h)
    assert [h.model.qp(s).state for s in "ab"] == [S.ERR, S.ERR]
    assert LLP_CLOSED.id in [st["expected"] for st in h.steps if st["verb"] == "wire"]


#: (fault, scenario, kind, rule): each planted fault caught (through the executor too).
PLANTED = [
    ("close_not_seen", _err_with_nothing_posted, "state", LLP_CLOSED.id),
    ("close_not_seen", _err_by_modify, "missing_completion", LLP_CLOSED.id),
    ("close_without_flush", _err_by_modify, "missing_completion", LLP_CLOSED.id),
    ("no_terminate", _no_receive, "missing_completion", NO_RECEIVE.id),
]


@pytest.mark.parametrize(("fault", "scenario", "kind", "rule"), PLANTED)
def test_planted_iwarp_fault_is_caught(fault, scenario, kind, rule):
    h = _harness(fault)
    with pytest.raises(DivergenceError) as caught:
        scenario(h)
        h.quiet(0.01)
    assert (caught.value.record.kind, caught.value.record.rule_id) == (kind, rule)


def test_an_ib_fault_name_is_refused_for_an_iwarp_fake():
    with pytest.raises(ValueError):
        FakePair(RC, "lost_flush", iwarp=True)


def _machine(fault: str | None):
    from hypothesis import settings

    from qpconform.machines.pair import iwarp_machine_for

    def make() -> PairHarness:
        return PairHarness(
            FakePair(RC, fault, iwarp=True), sink=None, time_scale=0.01, variant="iwarp"
        )

    machine = iwarp_machine_for(make)
    machine.TestCase.settings = settings(
        max_examples=examples(100), stateful_step_count=25, deadline=None, derandomize=True,
        database=None, **PLANTED_RUN,
    )
    return machine


def test_iwarp_state_machine_finds_nothing_on_a_clean_fake():
    _machine(None).TestCase().runTest()


@pytest.mark.parametrize("fault", ["close_not_seen", "close_without_flush", "no_terminate"])
def test_iwarp_state_machine_catches_a_planted_fault(fault):
    with pytest.raises(DivergenceError):
        _machine(fault).TestCase().runTest()


# ------------------------------------------------------------------------------ the model
def _connected() -> IwarpPairModel:
    m = IwarpPairModel(RC)
    for side in "ab":
        m.apply(side, exp := m.modify(side, {"qp_state": int(S.INIT), "pkey_index": 0,
                                              "port_num": 1, "qp_access_flags": 0},
                                      _init_mask()), True)
        assert exp.state_if_accepted == S.INIT
    m.establish()
    return m


def _init_mask():
    from models.enums import Attr

    return Attr.STATE | Attr.PKEY_INDEX | Attr.PORT | Attr.ACCESS_FLAGS


def test_model_has_no_rnr_a_send_without_receive_terminates():
    m = _connected()
    m.apply("a", m.post_send("a", 1), True)
    assert m.decide("a") == (NO_RECEIVE, WCStatus.SUCCESS, "terminate")
    steps = m.progress()
    assert [s.rule for s in steps] == [NO_RECEIVE]
    assert (m.qp("a").state, m.qp("b").state, m.connected) == (S.ERR, S.ERR, False)


def test_model_delivers_a_send_to_a_posted_receive_and_stays_connected():
    m = _connected()
    m.apply("b", m.post_recv("b", 1), True)
    m.apply("a", m.post_send("a", 2), True)
    assert [s.rule for s in m.progress()] == [SEND_DELIVERED]
    assert (m.qp("a").state, m.qp("b").state, m.connected) == (S.RTS, S.RTS, True)


def test_model_bad_stag_terminates_and_lets_the_sink_raise_access_error():
    m = _connected()
    m.apply("a", m.post_send("a", 1, Op.RDMA_WRITE, Fault.BAD_RKEY), True)
    (step,) = m.progress()
    assert step.rule is BAD_STAG
    sink = [exp for side, exp in step.effects if side == "b"]
    assert sink and sink[0].allowed_events and not sink[0].events


def test_model_connects_only_idle_ends():
    m = _connected()
    with pytest.raises(RuntimeError):
        m.establish()
