"""Self-tests of a receive whose lkey names no MR (models/pair_rules.py RC_RECV_BAD_LKEY).

post_recv takes it (the key is checked when data is placed); an RC SEND into it fails at
both ends: the receive LOC_PROT_ERR, the responder in ERR flushing the rest, the SEND
REM_OP_ERR (Remote Operational Error NAK), the requester in ERR. A clean fake passes; each
planted fault of tests/fake_pair.RECV_BAD_LKEY_FAULTS is caught under the rule.
"""

from __future__ import annotations

import pytest

from models.enums import QPState, QPType, WCStatus
from models.pair import PairModel
from models.pair_rules import RC_RECV_BAD_LKEY
from qpconform.engine.judge import DivergenceError
from qpconform.engine.pair import PairHarness
from tests.example_counts import PLANTED_RUN
from tests.fake_pair import connected_fake, connected_model

S = QPState


def _bad_lkey_recv(h: PairHarness) -> None:
    """A receive with a bad lkey, a good one behind it, a receive on the requester, then a
    SEND into the bad one."""
    h.post.recv("a")
    h.post.recv("b", bad_lkey=True)
    h.post.recv("b")
    h.post.send("a")
    h.quiet(0.01)


def test_the_model_fails_a_send_into_a_bad_lkey_receive_at_both_ends() -> None:
    m = connected_model()
    for wr in (10, 11):
        m.apply("b", m.post_recv("b", wr, bad_lkey=wr == 10), True)
    m.apply("a", m.post_send("a", 1), True)
    (step,) = m.progress()
    assert step.rule is RC_RECV_BAD_LKEY
    got = {(side, c.wr_id): c.status for side, e in step.effects for c in e.completions}
    assert got == {("b", 10): WCStatus.LOC_PROT_ERR, ("b", 11): WCStatus.WR_FLUSH_ERR,
                   ("a", 1): WCStatus.REM_OP_ERR}
    assert (m.qp("a").state, m.qp("b").state) == (S.ERR, S.ERR)


def test_a_write_with_immediate_is_not_judged_against_the_bad_key() -> None:
    """Only a SEND places data in the receive: the rule names no other operation."""
    from models.operations import Op

    m = connected_model()
    m.apply("b", m.post_recv("b", 10, bad_lkey=True), True)
    m.apply("a", m.post_send("a", 1, Op.WRITE_WITH_IMM), True)
    (step,) = m.progress()
    assert step.rule is not RC_RECV_BAD_LKEY


@pytest.mark.parametrize("qp_type", [QPType.UC, QPType.UD], ids=lambda t: t.name)
def test_the_model_posts_a_bad_lkey_receive_on_rc_only(qp_type) -> None:
    with pytest.raises(ValueError):
        PairModel(qp_type).post_recv("b", 1, bad_lkey=True)


def test_a_clean_fake_gives_no_divergence() -> None:
    h = connected_fake(QPType.RC)
    _bad_lkey_recv(h)
    h.finish()
    assert h.known == []
    assert RC_RECV_BAD_LKEY.id in [s["expected"] for s in h.steps if s["verb"] == "wire"]
    assert any(s.get("bad_lkey") for s in h.steps if s["verb"] == "post_recv")


@pytest.mark.parametrize(
    ("fault", "status"),
    [("recv_bad_lkey_succeeds", "SUCCESS"), ("recv_bad_lkey_as_malformed_wqe", "LOC_QP_OP_ERR"),
     ("recv_bad_lkey_loc_len_err", "LOC_LEN_ERR"),
     ("recv_bad_lkey_rem_access_err", "REM_ACCESS_ERR")],
)
def test_a_receive_not_failing_with_loc_prot_err_is_caught(fault, status) -> None:
    with pytest.raises(DivergenceError) as caught:
        _bad_lkey_recv(connected_fake(QPType.RC, fault))
    record = caught.value.record
    assert record.rule_id == RC_RECV_BAD_LKEY.id
    assert status in record.observed  # the SEND (or the receive) completes otherwise


def test_a_bad_lkey_receive_goes_to_the_own_queue_only() -> None:
    h = connected_fake(QPType.RC, srq_sides=frozenset({"b"}))
    with pytest.raises(ValueError):
        h.post.recv("b", bad_lkey=True)


def test_the_traffic_machine_catches_a_bad_lkey_receive_that_succeeds() -> None:
    """The machine draws receives whose lkey names no MR: a device that completes a SEND
    into one with SUCCESS is caught, under the rule or the error it owes."""
    from qpconform.machines.pair import machine_for
    from tests.fake_pair import FakePair, machine_divergence

    def make() -> PairHarness:
        return PairHarness(FakePair(QPType.RC, "recv_bad_lkey_succeeds"), sink=None,
                           time_scale=0.01)

    record = machine_divergence(machine_for(QPType.RC, make, faults=("bad_lkey_recv",)))
    assert record.rule_id in (RC_RECV_BAD_LKEY.id, "ibta.err.recv_error",
                              "ibta.err.send_error")


def test_the_traffic_machine_drawing_bad_lkey_receives_passes_a_clean_fake() -> None:
    """The clean fake with bad-lkey receives drawn gives no divergence: the machine does
    not trip the rule by itself."""
    from hypothesis import settings
    from hypothesis.stateful import run_state_machine_as_test

    from qpconform.machines.pair import machine_for
    from tests.fake_pair import FakePair

    def make() -> PairHarness:
        return PairHarness(FakePair(QPType.RC), sink=None, time_scale=0.01)

    machine = machine_for(QPType.RC, make, faults=("bad_lkey_recv",))
    run_state_machine_as_test(machine, settings=settings(
        max_examples=30, deadline=None, database=None, derandomize=True, **PLANTED_RUN))
