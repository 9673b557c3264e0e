"""Self-tests of models/pair.py: the wire verdicts for every peer situation."""

import pytest

from models.enums import Attr, EventType, QPState, QPType, WCStatus
from models.operations import Op
from models.outcomes import ExpectedCompletion
from models.pair import PairModel
from models.pair_rules import (
    BAD_LKEY,
    RC_BAD_RKEY,
    RC_RETRY_EXHAUSTED,
    RC_RNR_EXHAUSTED,
    RC_RNR_WAITING,
    SEND_DELIVERED,
    UC_BAD_RKEY,
    UNRELIABLE_DROPPED,
    WRITE_DELIVERED,
)
from models.wire import Fault, WireSettings, WireStep

S = QPState
SEND_OK = WCStatus.SUCCESS


def completions_of(steps: list[WireStep], side: str) -> list[ExpectedCompletion]:
    """The completions due on `side` from a list of wire steps, in order."""
    return [c for st in steps for s, exp in st.effects if s == side for c in exp.completions]


def _go(pair: PairModel, side: str, state: QPState, **extra: int) -> None:
    """Force a legal modify through the model (attrs are valid, values irrelevant here)."""
    attrs = {
        "qp_state": state,
        "cur_qp_state": 0,
        "pkey_index": 0,
        "port_num": 1,
        "qkey": 1,
        "qp_access_flags": 15,  # every right: a QP without them refuses remote requests
        "path_mtu": 3,
        "dest_qp_num": 1,
        "rq_psn": 0,
        "sq_psn": 0,
        "max_dest_rd_atomic": 1,
        "min_rnr_timer": 1,
        "timeout": 10,
        "retry_cnt": 1,
        "rnr_retry": 1,
        "max_rd_atomic": 1,
        "ah_port_num": 1,
        "ah_sgid_index": 0,
        "en_sqd_async_notify": 0,
        **extra,
    }
    qp = pair.qp(side)
    entry = qp.table.lookup(pair.qp_type, qp.state, state)
    assert entry is not None, (qp.state, state)
    mask = Attr(entry.required) | Attr.STATE
    if extra.get("en_sqd_async_notify"):
        mask |= Attr.EN_SQD_ASYNC_NOTIFY
    exp = pair.modify(side, attrs, mask)
    assert exp.allows(True), exp.rule
    pair.apply(side, exp, True)


def _rts(pair: PairModel, side: str) -> None:
    for st in (S.INIT, S.RTR, S.RTS):
        _go(pair, side, st)


def _connected(qp_type: QPType, **settings: int) -> PairModel:
    pair = PairModel(qp_type, settings=WireSettings(**settings))
    _rts(pair, "a")
    _rts(pair, "b")
    return pair


def _post(pair: PairModel, side: str, verb: str, wr_id: int, **kw: object) -> None:
    exp = getattr(pair, verb)(side, wr_id, **kw)
    pair.apply(side, exp, True)


@pytest.mark.parametrize("qp_type", [QPType.RC, QPType.UC, QPType.UD])
def test_send_consumes_the_oldest_receive(qp_type: QPType) -> None:
    pair = _connected(qp_type)
    _post(pair, "b", "post_recv", 10)
    _post(pair, "b", "post_recv", 11)
    _post(pair, "a", "post_send", 1)
    steps = pair.progress()
    assert [s.rule for s in steps] == [SEND_DELIVERED]
    assert completions_of(steps, "b") == [ExpectedCompletion(10, "recv", SEND_OK)]
    assert completions_of(steps, "a") == [ExpectedCompletion(1, "send", SEND_OK)]
    assert pair.qp("b").queues.recvs == [11]


def test_rc_rnr_exhausted_moves_requester_to_err_and_flushes() -> None:
    pair = _connected(QPType.RC)
    _post(pair, "a", "post_recv", 20)
    _post(pair, "a", "post_send", 1)
    _post(pair, "a", "post_send", 2)
    steps = pair.progress()
    assert steps[0].rule == RC_RNR_EXHAUSTED
    assert completions_of(steps, "a") == [
        ExpectedCompletion(1, "send", WCStatus.RNR_RETRY_EXC_ERR),
        ExpectedCompletion(2, "send", WCStatus.WR_FLUSH_ERR),
        ExpectedCompletion(20, "recv", WCStatus.WR_FLUSH_ERR),
    ]
    assert pair.qp("a").state == S.ERR
    assert pair.qp("b").state == S.RTS
    assert EventType.QP_FATAL in steps[0].forbidden["a"]


def test_rc_infinite_rnr_waits_until_a_receive_is_posted() -> None:
    pair = _connected(QPType.RC, rnr_retry=7)
    _post(pair, "a", "post_send", 1)
    assert pair.progress() == []
    assert pair.decide("a")[0] == RC_RNR_WAITING
    assert pair.blocked() == [("a", 1)]
    _post(pair, "b", "post_recv", 5)
    steps = pair.progress()
    assert [s.rule for s in steps] == [SEND_DELIVERED]


@pytest.mark.parametrize("qp_type", [QPType.UC, QPType.UD])
def test_unreliable_send_without_receive_is_dropped(qp_type: QPType) -> None:
    pair = _connected(qp_type)
    _post(pair, "a", "post_send", 1)
    steps = pair.progress()
    assert steps[0].rule == UNRELIABLE_DROPPED
    assert completions_of(steps, "a") == [ExpectedCompletion(1, "send", SEND_OK)]
    assert completions_of(steps, "b") == []


@pytest.mark.parametrize("peer_state", [S.RESET, S.INIT, S.ERR])
def test_peer_not_receiving(peer_state: QPState) -> None:
    for qp_type, rule, status in (
        (QPType.RC, RC_RETRY_EXHAUSTED, WCStatus.RETRY_EXC_ERR),
        (QPType.UC, UNRELIABLE_DROPPED, SEND_OK),
        (QPType.UD, UNRELIABLE_DROPPED, SEND_OK),
    ):
        pair = PairModel(qp_type)
        _rts(pair, "a")
        if peer_state != S.RESET:
            _go(pair, "b", S.INIT)
        if peer_state == S.ERR:
            _go(pair, "b", S.ERR)
        if peer_state == S.INIT:
            _post(pair, "b", "post_recv", 9)
        _post(pair, "a", "post_send", 1)
        steps = pair.progress()
        assert steps[0].rule == rule
        assert completions_of(steps, "a")[0] == ExpectedCompletion(1, "send", status)
        assert completions_of(steps, "b") == []
        assert pair.qp("a").state == (S.ERR if qp_type == QPType.RC else S.RTS)


def test_destroyed_peer_gives_retry_exceeded() -> None:
    pair = _connected(QPType.RC)
    exp = pair.destroy("b")
    pair.apply("b", exp, True)
    _post(pair, "a", "post_send", 1)
    assert pair.progress()[0].rule == RC_RETRY_EXHAUSTED
    pair.recreate("b")
    assert pair.qp("b").state == S.RESET and "b" not in pair.gone


def test_rc_bad_rkey_errors_both_ends_with_access_event() -> None:
    pair = _connected(QPType.RC)
    _post(pair, "b", "post_recv", 30)
    _post(pair, "a", "post_send", 1, op=Op.RDMA_WRITE, fault=Fault.BAD_RKEY)
    steps = pair.progress()
    assert steps[0].rule == RC_BAD_RKEY
    assert completions_of(steps, "a") == [ExpectedCompletion(1, "send", WCStatus.REM_ACCESS_ERR)]
    assert completions_of(steps, "b") == [ExpectedCompletion(30, "recv", WCStatus.WR_FLUSH_ERR)]
    peer_exp = next(e for s, e in steps[0].effects if s == "b")
    assert peer_exp.events == (EventType.QP_ACCESS_ERR,)
    assert pair.qp("a").state == S.ERR and pair.qp("b").state == S.ERR


def test_uc_bad_rkey_is_dropped_and_good_write_consumes_nothing() -> None:
    pair = _connected(QPType.UC)
    _post(pair, "b", "post_recv", 30)
    _post(pair, "a", "post_send", 1, op=Op.RDMA_WRITE, fault=Fault.BAD_RKEY)
    _post(pair, "a", "post_send", 2, op=Op.RDMA_WRITE)
    steps = pair.progress()
    assert [s.rule for s in steps] == [UC_BAD_RKEY, WRITE_DELIVERED]
    assert pair.qp("b").queues.recvs == [30]


@pytest.mark.parametrize(
    ("qp_type", "after"), [(QPType.RC, S.ERR), (QPType.UC, S.SQE), (QPType.UD, S.SQE)]
)
def test_bad_lkey(qp_type: QPType, after: QPState) -> None:
    pair = _connected(qp_type)
    _post(pair, "a", "post_recv", 40)
    _post(pair, "a", "post_send", 1, fault=Fault.BAD_LKEY)
    _post(pair, "a", "post_send", 2)
    steps = pair.progress()
    assert steps[0].rule == BAD_LKEY
    done = completions_of(steps, "a")
    assert done[:2] == [
        ExpectedCompletion(1, "send", WCStatus.LOC_PROT_ERR),
        ExpectedCompletion(2, "send", WCStatus.WR_FLUSH_ERR),
    ]
    assert pair.qp("a").state == after
    # SQE: receives keep working (C10-38); ERR: the receive is flushed too
    assert (pair.qp("a").queues.recvs == [40]) == (after == S.SQE)
    if after == S.SQE:
        _post(pair, "b", "post_send", 3)
        steps = pair.progress()
        assert completions_of(steps, "a") == [ExpectedCompletion(40, "recv", SEND_OK)]


def test_sqd_holds_then_rts_resumes_through_the_wire() -> None:
    pair = _connected(QPType.RC)
    _go(pair, "a", S.SQD, en_sqd_async_notify=1)
    _post(pair, "a", "post_send", 1)
    _post(pair, "b", "post_recv", 7)
    assert pair.progress() == []
    _go(pair, "a", S.RTS)
    steps = pair.progress()
    assert [s.rule for s in steps] == [SEND_DELIVERED]


def test_drain_event_when_the_blocked_send_finishes() -> None:
    pair = _connected(QPType.RC, rnr_retry=7)
    _post(pair, "a", "post_send", 1)
    pair.progress()
    _go(pair, "a", S.SQD, en_sqd_async_notify=1)
    assert pair.qp("a").draining
    _post(pair, "b", "post_recv", 7)
    steps = pair.progress()
    exp = next(e for s, e in steps[0].effects if s == "a")
    assert exp.events == (EventType.SQ_DRAINED,)


def test_invalid_combinations_are_refused() -> None:
    pair = _connected(QPType.UD)
    with pytest.raises(ValueError):  # an operation UD lacks is modelled without a fault only
        pair.post_send("a", 1, op=Op.RDMA_WRITE, fault=Fault.BAD_RKEY)
    with pytest.raises(ValueError):
        pair.post_send("a", 1, fault=Fault.BAD_RKEY)


def test_settings_bound_is_short_for_the_suite_values() -> None:
    assert WireSettings(timeout=10, retry_cnt=1, rnr_retry=1).bound() < 1.0


def test_following_a_device_into_err_flushes_what_is_outstanding() -> None:
    pair = _connected(QPType.UD)
    _post(pair, "a", "post_recv", 40)
    flushed = pair.qp("a").follow(S.ERR)
    assert flushed == (ExpectedCompletion(40, "recv", WCStatus.WR_FLUSH_ERR),)
    assert pair.qp("a").state == S.ERR and pair.qp("a").queues.recvs == []
    assert pair.qp("a").follow(S.ERR) == ()
    assert pair.qp("a").follow(S.RESET) == () and pair.qp("a").state == S.RESET


def test_follow_drained_holds_the_in_flight_send_until_rts() -> None:
    pair = _connected(QPType.RC, rnr_retry=7)
    _post(pair, "a", "post_send", 1)
    pair.progress()
    _go(pair, "a", S.SQD)
    assert pair.follow_drained("a") == [1]
    assert not pair.qp("a").draining and pair.qp("a").queues.in_flight == []
    _post(pair, "b", "post_recv", 7)
    assert pair.progress() == []  # held in SQD
    _go(pair, "a", S.RTS)
    assert [s.rule for s in pair.progress()] == [SEND_DELIVERED]
