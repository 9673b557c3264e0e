"""Self-tests of fences and of a receive completing in error (issue 24).

A fenced WR (IBV_SEND_FENCE) sends the requester's READ sink: the model names what the
peer must receive (models.operations.SINK_*), the pyverbs adapter names the bytes it got
(qpconform/adapters/pyverbs_pair.py, _label), and the harness compares the two
(pair.fence.after_reads). An RC SEND longer than the receive fails at both ends
(pair.rc.recv_too_short, ibta.err.recv_error). A clean fake passes; each planted fault
(tests/fake_pair.py FENCE_RECV_FAULTS) is caught, deterministically and by the traffic
machine.
"""

from __future__ import annotations

import pytest

from models.enums import QPState, QPType
from models.operations import (
    FENCE_AFTER_READS,
    SINK_ATOMIC,
    SINK_PAYLOAD,
    SINK_READ,
    SINK_STALE,
    Op,
)
from models.pair import PairModel
from models.pair_rules import RC_RECV_TOO_SHORT
from qpconform.adapters import pyverbs_pair
from qpconform.engine.judge import DivergenceError
from qpconform.engine.pair import PairHarness
from qpconform.machines.pair import iwarp_machine_for, machine_for
from tests.fake_pair import FakePair, connected_fake, connected_model, machine_divergence

S = QPState


def _fenced(h: PairHarness, before: Op = Op.RDMA_READ) -> None:
    h.post.recv("b")
    with h.post.back_to_back():
        h.post.send("a", before)
        h.post.send("a", Op.SEND, fence=True)
    h.quiet(0.01)


def _short(h: PairHarness) -> None:
    h.post.recv("b", short=True)
    h.post.recv("b")
    h.post.send("a")
    h.quiet(0.01)


# ------------------------------------------------------------------------------ model
def test_a_fenced_send_expects_what_the_reads_before_it_leave() -> None:
    m = connected_model()
    wr = iter(range(1, 100))

    def post(op: Op, fence: bool = False) -> int:
        w = next(wr)
        m.apply("a", m.post_send("a", w, op, fence=fence), True)
        return w

    m.apply("b", m.post_recv("b", 50), True)
    post(Op.SEND, fence=True)  # nothing before it: the sink's first bytes
    steps = m.progress()
    assert [c.data for s in steps for _, e in s.effects for c in e.completions] == [
        SINK_STALE, None]
    assert steps[0].rule is FENCE_AFTER_READS
    m.apply("b", m.post_recv("b", 51), True)
    m.burst = {}
    post(Op.RDMA_READ)
    post(Op.FETCH_ADD)
    post(Op.SEND, fence=True)  # the last one before it wins: the atomic's value
    m.burst = None
    got = [c.data for s in m.progress() for _, e in s.effects for c in e.completions]
    assert SINK_ATOMIC in got and SINK_READ not in got


@pytest.mark.parametrize("op", [Op.RDMA_READ, Op.COMP_SWAP])
def test_the_model_fences_data_operations_only(op) -> None:
    m = PairModel(QPType.RC)
    with pytest.raises(ValueError, match="fences a SEND or WRITE"):
        m.post_send("a", 1, op, fence=True)
    with pytest.raises(ValueError, match="fences a SEND or WRITE"):
        m.post_send("a", 1, Op.SEND, inline=True, fence=True)


@pytest.mark.parametrize("qp_type", [QPType.UC, QPType.UD])
def test_a_bad_lkey_receive_is_modelled_on_rc_only(qp_type) -> None:
    """(A short one is modelled on UC and UD too: pair.unreliable.recv_too_short,
    tests/test_too_long_inline.py.)"""
    with pytest.raises(ValueError, match="RC QP only"):
        PairModel(qp_type).post_recv("b", 1, bad_lkey=True)


def test_a_short_receive_is_not_modelled_on_iwarp() -> None:
    from models.iwarp_pair import IwarpPairModel

    with pytest.raises(ValueError, match="DDP Terminate"):
        IwarpPairModel(QPType.RC).post_recv("b", 1, short=True)


def test_the_adapter_names_the_bytes_it_received() -> None:
    label = pyverbs_pair._label
    assert label(pyverbs_pair._STALE_BYTES) == SINK_STALE
    assert label(pyverbs_pair._READ_BYTES) == SINK_READ
    assert label((1).to_bytes(8, "little") + pyverbs_pair._STALE_BYTES[8:]) == SINK_ATOMIC
    assert label(bytes(8) + pyverbs_pair._READ_BYTES[8:]) == SINK_ATOMIC
    assert label(pyverbs_pair._PLAIN_BYTES) == SINK_PAYLOAD
    assert label(b"x" * 16) == "other"
    # every pattern is 16 bytes (a WR's length) and none starts like an atomic's value
    for b in (pyverbs_pair._STALE_BYTES, pyverbs_pair._READ_BYTES, pyverbs_pair._PLAIN_BYTES):
        assert len(b) == pyverbs_pair._WR_LEN and int.from_bytes(b[:8], "little") > 1


# ------------------------------------------------------------------------- clean fake
@pytest.mark.parametrize("before", [Op.RDMA_READ, Op.COMP_SWAP, Op.FETCH_ADD])
def test_a_clean_fake_passes_the_fence(before) -> None:
    _fenced(connected_fake(QPType.RC), before)


def test_a_clean_fake_passes_the_short_receive() -> None:
    h = connected_fake(QPType.RC)
    _short(h)
    for side in ("a", "b"):
        assert h.model.qp(side).state == S.ERR


def test_a_clean_iwarp_fake_passes_the_fence() -> None:
    h = PairHarness(FakePair(QPType.RC, iwarp=True), sink=None, time_scale=0.01,
                    variant="iwarp")
    h.lifecycle.connect()
    _fenced(h)


# ----------------------------------------------------------------------- planted faults
def test_a_fence_ignored_is_caught() -> None:
    with pytest.raises(DivergenceError) as caught:
        _fenced(connected_fake(QPType.RC, "fence_ignored"))
    record = caught.value.record
    assert record.rule_id == FENCE_AFTER_READS.id
    assert "read data" in record.expected and "stale data" in record.observed


def test_a_fence_ignored_on_iwarp_is_caught() -> None:
    h = PairHarness(FakePair(QPType.RC, "fence_ignored", iwarp=True), sink=None,
                    time_scale=0.01, variant="iwarp")
    h.lifecycle.connect()
    with pytest.raises(DivergenceError) as caught:
        _fenced(h)
    assert caught.value.record.rule_id == FENCE_AFTER_READS.id


@pytest.mark.parametrize(
    ("fault", "status"),
    [("short_recv_succeeds", "SUCCESS"), ("recv_len_err_as_malformed_wqe", "REM_OP_ERR"),
     ("recv_len_err_loc_prot_err", "LOC_PROT_ERR"), ("recv_len_err_rem_op_err_only", "REM_OP_ERR")],
)
def test_a_receive_not_failing_with_loc_len_err_is_caught(fault, status) -> None:
    with pytest.raises(DivergenceError) as caught:
        _short(connected_fake(QPType.RC, fault))
    record = caught.value.record
    assert record.rule_id == RC_RECV_TOO_SHORT.id
    assert status in record.observed  # the receive (or, first, the SEND) fails otherwise


def test_the_traffic_machine_catches_an_ignored_fence() -> None:
    def make() -> PairHarness:
        return PairHarness(FakePair(QPType.RC, "fence_ignored"), sink=None, time_scale=0.01)

    # seed 1: with the rules of the local SGE faults in the machine, seed 0's 300 examples
    # draw no fenced SEND behind a READ (seeds 1-3 all do)
    record = machine_divergence(machine_for(QPType.RC, make, faults=()), from_seed=1)
    assert record.rule_id == FENCE_AFTER_READS.id


def test_the_iwarp_machine_catches_an_ignored_fence() -> None:
    def make() -> PairHarness:
        pair = FakePair(QPType.RC, "fence_ignored", iwarp=True)
        return PairHarness(pair, sink=None, time_scale=0.01, variant="iwarp")

    record = machine_divergence(iwarp_machine_for(make, faults=()))
    assert record.rule_id == FENCE_AFTER_READS.id


def test_the_traffic_machine_catches_a_short_receive_that_succeeds() -> None:
    def make() -> PairHarness:
        return PairHarness(FakePair(QPType.RC, "short_recv_succeeds"), sink=None,
                           time_scale=0.01)

    record = machine_divergence(machine_for(QPType.RC, make, faults=("short_recv",)))
    assert record.rule_id in (RC_RECV_TOO_SHORT.id, "ibta.err.recv_error",
                              "ibta.err.send_error")

