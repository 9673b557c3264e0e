"""ERR and RESET on connected pairs: flushes, automatic errors, discards and recovery.

Every step goes through PairHarness, which compares completions (status, order,
exactly once), async events and both QP states with models/pair.py. A divergence
covered by the device's quirk file is recorded as known and the harness follows
the device; any other fails the test with the divergence record. Every record
goes to reports/out/divergences.json and the run record.
"""

import pytest

from models.enums import QPState, QPType
from models.operations import Op
from models.wire import Fault
from qpconform.engine.connect import HOLD

S = QPState
ALL = [QPType.RC, QPType.UC, QPType.UD]


def _outstanding_sends(h, side: str = "a", n: int = 3) -> list[int]:
    """Sends that are posted and not completed: held in SQD (the same for every type)."""
    h.modify(side, S.SQD)
    return [h.post.send(side) for _ in range(n)]


@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_err_by_modify_flushes_everything_in_order(make_pair, qp_type):
    h = make_pair(qp_type)
    for _ in range(3):
        h.post.recv("a")
    _outstanding_sends(h)
    h.modify("a", S.ERR)  # sends then receives, each in posting order, exactly once
    h.quiet()


def test_err_by_modify_flushes_rc_sends_in_flight(make_pair):
    h = make_pair(QPType.RC, HOLD)
    h.post.recv("a")
    h.post.send("a")  # RNR-blocked: in flight
    h.post.send("a")
    h.modify("a", S.ERR)
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_err_on_one_end_with_receives_on_both(make_pair, qp_type):
    """IB: the peer keeps its receives (ERR is one QP's); iWARP: the connection ends and
    the peer enters ERR too, flushing them (iwarp.llp.close)."""
    h = make_pair(qp_type)
    h.post.recv("a")
    h.post.recv("b")
    h.modify("a", S.ERR)
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("how", [S.SQD, S.SQE], ids=lambda s: s.name)
def test_iwarp_close_ends_the_connection(make_pair, variant, how):
    """iWARP's CLOSING (SQD) and TERMINATE (SQE) by modify: both ends' WRs are flushed and
    the peer enters ERR (iwarp.llp.close). InfiniBand's SQD and SQE are the drain and
    error-handling tests'."""
    if not variant.connection_managed:
        pytest.skip("an iWARP close: InfiniBand's SQD/SQE are checked by the drain suite")
    h = make_pair(QPType.RC)
    h.post.recv("a")
    h.post.recv("b")
    h.modify("a", how)
    h.quiet()


_IWARP_FROM = [S.RTS, S.SQD, S.SQE]
_IWARP_TO = [S.RESET, S.INIT, S.RTR, S.RTS, S.SQD, S.SQE, S.ERR]


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("nxt", _IWARP_TO, ids=lambda s: s.name)
@pytest.mark.parametrize("cur", _IWARP_FROM, ids=lambda s: s.name)
def test_iwarp_modify_from_a_connected_state(make_pair, variant, cur, nxt):
    """Every modify from RTS, CLOSING (SQD) and TERMINATE (SQE), which a lone iWARP QP never
    reaches (only the connection manager brings it to RTS): each judged by its entry of the
    iwarp table, and the connection's end at the peer by iwarp.llp.close."""
    if not variant.connection_managed:
        pytest.skip("iWARP's connected states: InfiniBand's are the transition sweep's")
    h = make_pair(QPType.RC)
    h.post.recv("b")
    if cur != S.RTS:
        h.modify("a", cur)
    h.modify("a", nxt)
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("how", [S.SQD, S.SQE], ids=lambda s: s.name)
def test_iwarp_receive_posted_while_closing(make_pair, variant, how):
    """A receive posted right after iWARP's CLOSING (SQD) or TERMINATE (SQE): refused, or
    accepted and flushed (iwarp.post_recv.SQD/SQE); every run meets it, not only the random
    sequences that happen to post one there."""
    if not variant.connection_managed:
        pytest.skip("an iWARP close: InfiniBand's SQD/SQE are checked by the drain suite")
    h = make_pair(QPType.RC)
    h.modify("a", how)
    h.post.recv("a")
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("how", [S.SQD, S.SQE], ids=lambda s: s.name)
def test_iwarp_send_posted_while_closing(make_pair, variant, how):
    """A send posted right after iWARP's CLOSING (SQD) or TERMINATE (SQE): refused, or
    accepted and flushed, never delivered (iwarp.post_send.SQD/SQE)."""
    if not variant.connection_managed:
        pytest.skip("an iWARP close: InfiniBand's SQD/SQE are checked by the drain suite")
    h = make_pair(QPType.RC)
    h.post.recv("b")
    h.modify("a", how)
    h.post.send("a")
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_sends_posted_in_err_flush(make_pair, qp_type):
    h = make_pair(qp_type)
    h.modify("a", S.ERR)
    h.post.send("a")
    h.post.send("a")
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_receives_posted_in_err_flush(make_pair, qp_type):
    h = make_pair(qp_type)
    h.modify("a", S.ERR)
    h.post.recv("a")
    h.post.recv("a")
    h.quiet()


@pytest.mark.parametrize("peer_state", [S.RESET, S.INIT, S.ERR], ids=lambda s: s.name)
@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_send_to_peer_not_receiving(make_pair, qp_type, peer_state):
    """RC: RETRY_EXC_ERR then ERR and flush; UD/UC: dropped, SUCCESS."""
    h = make_pair(qp_type)
    h.post.recv("a")
    if peer_state == S.INIT:
        h.modify("b", S.RESET)
        h.modify("b", S.INIT)
    else:
        h.modify("b", peer_state)
    h.post.send("a")
    h.post.send("a")
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_send_to_destroyed_peer(make_pair, qp_type):
    h = make_pair(qp_type)
    h.lifecycle.destroy("b")
    h.post.send("a")
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_receiver_not_ready(make_pair, qp_type):
    """RC: RNR_RETRY_EXC_ERR (rnr_retry=1) then ERR; UD/UC: silently dropped."""
    h = make_pair(qp_type)
    h.post.recv("a")
    h.post.send("a")
    h.post.send("a")
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("qp_type", [QPType.RC, QPType.UC], ids=lambda t: t.name)
def test_bad_rkey(make_pair, qp_type):
    """RC: REM_ACCESS_ERR, requester ERR; responder ERR with QP_ACCESS_ERR. UC: dropped."""
    h = make_pair(qp_type)
    h.post.recv("b")
    h.post.send("a", Op.RDMA_WRITE, Fault.BAD_RKEY)
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("qp_type", [QPType.RC, QPType.UC], ids=lambda t: t.name)
def test_good_rdma_write(make_pair, qp_type):
    h = make_pair(qp_type)
    h.post.recv("b")
    h.post.send("a", Op.RDMA_WRITE)
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_bad_lkey(make_pair, qp_type):
    """LOC_PROT_ERR; RC -> ERR with flush, UD/UC -> SQE (receives keep working)."""
    h = make_pair(qp_type)
    h.post.recv("a")
    h.post.send("a", fault=Fault.BAD_LKEY)
    h.post.send("a")
    h.quiet()


@pytest.mark.parametrize("qp_type", [QPType.UC, QPType.UD], ids=lambda t: t.name)
def test_sqe_receives_keep_working_and_rts_recovers(make_pair, qp_type):
    h = make_pair(qp_type)
    h.post.recv("a")
    h.post.send("a", fault=Fault.BAD_LKEY)  # -> SQE
    h.post.send("b")  # consumes a's receive (C10-38)
    h.post.recv("a")
    h.modify("a", S.RTS)  # SQE -> RTS
    h.post.recv("b")
    h.post.send("a")
    h.quiet()


def _load(h, state: QPState) -> None:
    """Outstanding receives (and held sends where possible) before the RESET."""
    if state != S.RESET:
        h.post.recv("a")
        h.post.recv("a")
    if state == S.SQD:
        h.post.send("a")
        h.post.send("a")


@pytest.mark.parametrize(
    "state", [S.RESET, S.INIT, S.RTR, S.RTS, S.SQD, S.ERR], ids=lambda s: s.name
)
@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_reset_discards_and_the_qp_comes_back(make_pair, qp_type, state):
    h = make_pair(qp_type, connect=False)
    if state in (S.RTS, S.SQD, S.ERR):
        h.lifecycle.connect()
    if state in (S.INIT, S.RTR):
        h.lifecycle.bring_up("b", S.RTS)
        h.lifecycle.bring_up("a", state)
    if state == S.SQD:
        h.modify("a", S.SQD)
    if state == S.ERR:
        h.modify("a", S.ERR)
    _load(h, state)
    h.modify("a", S.RESET)
    h.quiet()  # nothing discarded may complete or run
    h.lifecycle.bring_up("a", S.RTS)
    h.post.recv("b")
    h.post.recv("a")
    h.post.send("a")
    h.post.send("b")
    h.quiet()


@pytest.mark.parametrize("qp_type", [QPType.RC], ids=lambda t: t.name)
def test_reset_discards_rc_send_in_flight(make_pair, qp_type):
    h = make_pair(qp_type, HOLD)
    h.post.send("a")  # RNR-blocked in flight
    h.modify("a", S.RESET)
    h.post.recv("b")  # would let the discarded send through if it still existed
    h.quiet()
    h.lifecycle.bring_up("a", S.RTS)
    h.post.recv("b")
    h.post.send("a")
    h.quiet()


def test_send_longer_than_the_receive(make_pair):
    """RC: a 16-byte SEND meets a receive with room for 8: the receive completes with
    LOC_LEN_ERR and the responder enters ERR, flushing its next receive; the responder NAKs
    (Invalid Request): the SEND completes REM_INV_REQ_ERR and the requester enters ERR,
    flushing what it holds (pair.rc.recv_too_short, ibta.err.recv_error)."""
    h = make_pair(QPType.RC)
    h.post.recv("a")
    h.post.recv("b", short=True)
    h.post.recv("b")
    h.post.send("a")
    h.quiet()


@pytest.mark.parametrize("qp_type", [QPType.UC, QPType.UD], ids=lambda t: t.name)
def test_unreliable_send_longer_than_the_receive(make_pair, qp_type):
    """UC/UD: a 16-byte SEND meets a receive with room for 8 (UD: after the GRH). The
    requester completes SUCCESS either way; the responder drops the message (its receives
    stay, it stays RTS) or completes the receive LOC_LEN_ERR and enters ERR, flushing the
    next one (pair.unreliable.recv_too_short, may). A second such message, on b brought
    back if the first took it to ERR, must meet the same choice."""
    h = make_pair(qp_type)
    h.post.recv("b", short=True)
    h.post.recv("b")
    h.post.send("a")
    h.quiet()
    if h.model.qp("b").state == S.ERR:  # the device completed it in error: once more
        h.lifecycle.reset("b")
        h.lifecycle.bring_up("b")
        h.post.recv("b", short=True)
    h.post.send("a")  # dropped: it meets the same short receive, still first
    h.quiet()


def test_send_into_a_receive_with_a_bad_lkey(make_pair):
    """RC: b's receive names no MR (its lkey's index bits flipped): post_recv takes it; a
    SEND into it fails at both ends: the receive LOC_PROT_ERR, b in ERR flushing its next
    receive; a Remote Operational Error NAK: the SEND REM_OP_ERR, a in ERR flushing what
    it holds (pair.rc.recv_bad_lkey, ibta.err.recv_error)."""
    h = make_pair(QPType.RC)
    h.post.recv("a")
    h.post.recv("b", bad_lkey=True)
    h.post.recv("b")
    h.post.send("a")
    h.quiet()


@pytest.mark.parametrize("op", [Op.SEND_WITH_IMM, Op.WRITE_WITH_IMM])
def test_short_receive_and_immediate_data(make_pair, op):
    """RC: a SEND with immediate data is as long as a SEND (the receive is too short: ERR
    at both ends); a WRITE with immediate places no data in the receive buffer: the short
    receive takes it with SUCCESS."""
    h = make_pair(QPType.RC)
    h.post.recv("b", short=True)
    h.post.send("a", op)
    h.post.recv("b")
    h.post.send("a")
    h.quiet()
