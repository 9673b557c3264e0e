"""The siw profile covers what a siw0 run showed and nothing else.

`siw.query_qp_state_unset` (Linux 6.1: query_qp reads RESET whatever the state) must make
a siw-like fake with that bug pass the iwarp suites and the stateful machine with known
divergences only; the same bug on 6.12 (fixed there), and another wrong read-back on
6.1 (INIT in ERR), must still fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.selection import QUIRKS_DIR
from models.enums import Attr, QPState, QPType
from models.outcomes import Expectation
from qpconform.engine.judge import DivergenceError
from qpconform.engine.lone import Checker, Unreachable
from qpconform.engine.quirks import Quirks
from qpconform.engine.records import DivergenceList
from tests.fake_device import IWARP_STYLES, SIW_CAPS, Behaviour, FakeDevice, FakeQP, Verdict
from tests.sequences import (
    post_in_idle_then_err,
    recv_in_err,
    run_iwarp_machine,
    run_iwarp_suites,
)

S = QPState
RC = [QPType.RC]
K61 = "6.1.0-50-amd64"
K612 = "6.12.117+deb13-amd64"
SIW = IWARP_STYLES["siw-like"]


def _quirks(kernel: str) -> Quirks:
    return Quirks.load(QUIRKS_DIR / "siw.toml").for_run({"kernel": kernel, "rdma_core": "44.0"})


def _connected(fault: str, kernel: str = K612, srq_sides: frozenset[str] = frozenset()):
    """A harness over a connected iWARP fake pair planting `fault` (the `srq_sides` ends
    with an SRQ), judged with siw's quirks for `kernel`."""
    from qpconform.engine.pair import PairHarness
    from tests.fake_pair import FakePair

    pair = FakePair(QPType.RC, fault, iwarp=True, srq_sides=srq_sides)
    h = PairHarness(pair, quirks=_quirks(kernel), sink=None, time_scale=0.01, variant="iwarp")
    h.lifecycle.connect()
    return h


def _device(fault: str, kernel: str, accepts_in_err: bool = False) -> FakeDevice:
    """A siw-like fake; accepts_in_err: it accepts posts in ERR (as siw's user rings do)
    instead of refusing where the variant lets it."""
    style = {**SIW, "refuse_either": False} if accepts_in_err else SIW
    return FakeDevice([fault], variant="iwarp", caps=SIW_CAPS, qp_types=RC, kernel=kernel,
                      **style)


def _checker(device: FakeDevice, quirks: Quirks) -> Checker:
    return Checker(device, variant="iwarp", quirks=quirks, settle_window=0.0, must_wait=0.0,
                   sink=DivergenceList())


def test_the_6_1_query_bug_is_known_in_every_iwarp_suite_case() -> None:
    quirks = _quirks(K61)
    device = _device("query_state_unset", K61)
    checker = _checker(device, quirks)
    ran = run_iwarp_suites(checker, device)  # fails on an unknown divergence
    checker.close()
    assert ran > 20
    assert checker.known, "the bug never showed: the test would prove nothing"
    assert {d.known_quirk for d in checker.known} == {"siw.query_qp_state_unset"}
    assert "siw.query_qp_state_unset" not in {q.id for q in quirks.stale()}


def test_the_6_1_query_bug_is_known_to_the_stateful_machine(tmp_path: Path) -> None:
    known = run_iwarp_machine(_device("query_state_unset", K61), tmp_path, _quirks(K61),
                              max_examples=60, stateful_step_count=8)
    assert known and {d.known_quirk for d in known} == {"siw.query_qp_state_unset"}


@pytest.mark.parametrize(
    ("fault", "kernel"),
    [("query_state_unset", K612), ("query_err_as_init", K61)],
    ids=["fixed-kernel", "another-wrong-state"],
)
def test_a_near_miss_is_not_masked(fault: str, kernel: str) -> None:
    checker = _checker(_device(fault, kernel), _quirks(kernel))
    qp = checker.open_qp(QPType.RC)
    with pytest.raises(DivergenceError) as caught:
        qp.bring_to(S.INIT)
        qp.bring_to(S.ERR)
    assert caught.value.record.known_quirk is None
    assert caught.value.record.kind == "state"
    checker.close()


def test_a_receive_posted_in_err_and_never_flushed_is_known() -> None:
    quirks = _quirks(K612)
    checker = _checker(_device("recv_in_err_unflushed", K612, accepts_in_err=True), quirks)
    recv_in_err(checker.open_qp(QPType.RC))
    checker.close()
    assert {d.known_quirk for d in checker.known} == {"siw.user_post_in_err_never_flushed"}


@pytest.mark.parametrize(
    ("fault", "sequence"),
    [
        ("recv_in_err_wrong_status", recv_in_err),  # flushed, but with SUCCESS
        # a WR posted BEFORE the move not flushed
        ("lost_flush", lambda qp: post_in_idle_then_err(qp, "post_recv")),
    ],
    ids=["wrong-status-in-err", "lost-flush-on-entering-err"],
)
def test_other_flush_bugs_are_not_masked(fault: str, sequence) -> None:
    checker = _checker(_device(fault, K612, accepts_in_err=True), _quirks(K612))
    with pytest.raises(DivergenceError) as caught:
        sequence(checker.open_qp(QPType.RC))
    assert caught.value.record.known_quirk is None
    checker.close()


def test_err_is_final_is_known_and_a_qp_stuck_elsewhere_is_not() -> None:
    quirks = _quirks(K612)
    checker = _checker(_device("err_is_final", K612), quirks)
    qp = checker.open_qp(QPType.RC)
    qp.bring_to(S.ERR)
    with pytest.raises(Unreachable, match="cannot reach RESET from ERR"):
        qp.bring_to(S.RESET)  # known, then no other way out of ERR: not a crash
    checker.close()
    assert {d.known_quirk for d in checker.known} == {"siw.err_is_final"}
    # near miss: the same rule family, but a QP that reads INIT in ERR is another bug
    near = _checker(_device("query_err_as_init", K612), _quirks(K612))
    with pytest.raises(DivergenceError) as caught:
        near.open_qp(QPType.RC).bring_to(S.ERR)
    assert caught.value.record.known_quirk is None
    near.close()


@pytest.mark.parametrize("kernel", [K61, K612])  # 6.12: seen by the issue 22 soak
def test_a_send_accepted_in_idle_never_flushed_is_known_and_a_lost_recv_flush_is_not(
    kernel: str,
) -> None:
    checker = _checker(_device("lost_flush", kernel, accepts_in_err=True), _quirks(kernel))
    post_in_idle_then_err(checker.open_qp(QPType.RC), "post_send")
    checker.close()
    assert "siw.send_accepted_in_idle_never_flushed" in {d.known_quirk for d in checker.known}
    near = _checker(_device("lost_flush", kernel, accepts_in_err=True), _quirks(kernel))
    with pytest.raises(DivergenceError) as caught:
        post_in_idle_then_err(near.open_qp(QPType.RC), "post_recv")
    assert caught.value.record.known_quirk is None
    near.close()


@pytest.mark.parametrize("kernel", [K61, K612])
def test_a_bad_lkey_as_loc_qp_op_err_is_known_and_another_status_is_not(kernel: str) -> None:
    """siw.local_send_error_loc_qp_op_err covers siw's status on an iWARP pair (both
    kernels: the same code); REM_ACCESS_ERR for the same send is still a divergence."""
    from models.wire import Fault
    from qpconform.engine.pair import PairHarness

    def run(fault: str) -> PairHarness:
        h = _connected(fault, kernel)
        h.post.recv("a")
        h.post.send("a", fault=Fault.BAD_LKEY)
        h.quiet(0.01)
        return h

    h = run("bad_lkey_loc_qp_op_err")
    assert [d.known_quirk for d in h.known] == ["siw.local_send_error_loc_qp_op_err"]
    with pytest.raises(DivergenceError) as caught:
        run("bad_lkey_rem_access_err")
    assert caught.value.record.rule_id == "pair.bad_lkey"


def _bad_lkey_pair(fault: str, kernel: str):
    from models.wire import Fault

    h = _connected(fault, kernel)
    h.post.recv("a")
    h.post.send("a", fault=Fault.BAD_LKEY)
    h.post.send("a")  # accepted on a QP without a connection: never completes
    h.quiet(0.01)
    return h


def test_siw_bad_lkey_is_known_and_a_qp_left_in_sqe_is_not() -> None:
    """siw's whole bad-lkey behaviour (status, RTS kept, nothing flushed) is known on 6.12;
    the same send leaving the QP in SQE is still a divergence of ibta.err.send_error."""
    h = _bad_lkey_pair("siw_bad_lkey", K612)
    assert {d.known_quirk for d in h.known} == {
        "siw.local_send_error_loc_qp_op_err",
        "siw.local_send_error_qp_stays_rts",
        "siw.local_send_error_nothing_flushed",
    }
    with pytest.raises(DivergenceError) as caught:
        _bad_lkey_pair("bad_lkey_to_sqe", K612)
    assert (caught.value.record.kind, caught.value.record.rule_id) == (
        "state", "ibta.err.send_error",
    )


def test_terminate_keeping_its_receives_is_known_but_a_close_keeping_them_is_not() -> None:
    """siw.terminate_flushes_nothing_locally covers RTS->SQE's own receives; the same loss on
    RTS->SQD (CLOSING, which siw does flush) is still a divergence of iwarp.err.flush."""
    from qpconform.engine.pair import PairHarness

    def close(fault: str, how: QPState) -> PairHarness:
        h = _connected(fault)
        h.post.recv("a")
        h.post.recv("b")
        h.modify("a", how)
        h.quiet(0.01)
        return h

    h = close("sqe_keeps_own_wrs", S.SQE)
    assert {d.known_quirk for d in h.known} == {"siw.terminate_flushes_nothing_locally"}
    with pytest.raises(DivergenceError) as caught:
        close("sqd_keeps_own_wrs", S.SQD)
    assert (caught.value.record.kind, caught.value.record.rule_id) == (
        "missing_completion", "iwarp.err.flush",
    )


@pytest.mark.parametrize("how", [S.SQD, S.SQE])
def test_a_receive_posted_while_closing_and_never_flushed_is_known_a_wrong_status_is_not(
    how: QPState,
) -> None:
    """siw.user_recv_while_closing_never_flushed (issue 22 soak, trixie siw): a receive
    posted after RTS->SQD (CLOSING) or RTS->SQE (TERMINATE) is never completed; flushed with
    SUCCESS it is still a divergence."""
    from qpconform.engine.pair import PairHarness

    def closing_then_recv(fault: str) -> PairHarness:
        h = _connected(fault)
        h.modify("a", how)
        h.post.recv("a")
        h.quiet(0.01)
        return h

    h = closing_then_recv("recv_in_closing_unflushed")
    assert {d.known_quirk for d in h.known} == {"siw.user_recv_while_closing_never_flushed"}
    with pytest.raises(DivergenceError) as caught:
        closing_then_recv("recv_in_closing_wrong_status")
    assert caught.value.record.known_quirk is None
    assert caught.value.record.rule_id == f"iwarp.post_recv.{how.name}"


def test_last_wqe_never_raised_is_known_and_one_without_an_srq_is_not() -> None:
    """siw.last_wqe_reached_never_raised: an SRQ's QP entering ERR raises no Last WQE
    Reached; a QP without an SRQ raising one is still a divergence."""
    from qpconform.engine.pair import PairHarness

    def srq_qp_to_err(fault: str) -> PairHarness:
        h = _connected(fault, srq_sides=frozenset({"b"}))
        h.post.srq_recv("b")
        h.modify("b", QPState.ERR)
        h.quiet(0.01)
        return h

    h = srq_qp_to_err("last_wqe_missing")
    assert {d.known_quirk for d in h.known} == {"siw.last_wqe_reached_never_raised"}
    with pytest.raises(DivergenceError) as caught:
        srq_qp_to_err("last_wqe_without_srq")
    assert caught.value.record.known_quirk is None
    assert caught.value.record.rule_id == "srq.last_wqe_reached.no_srq"


def test_an_srq_qp_post_that_kills_the_process_is_known_and_an_accepted_one_is_not() -> None:
    """siw.srq_qp_post_recv_kills_the_process: the post made in a child dies of SIGFPE; a
    post on an SRQ's QP that is accepted, and the same crash with an rdma-core past the
    range seen, are still divergences."""
    from suites.test_srq import test_post_recv_on_the_qp_of_an_srq_is_refused as case

    def make(fault: str, rdma_core: str = "56.1-1"):
        from qpconform.engine.pair import PairHarness
        from tests.fake_pair import FakePair

        def make_pair(qp_type: QPType, srq_sides: tuple[str, ...] = ()) -> PairHarness:
            pair = FakePair(qp_type, fault, iwarp=True, srq_sides=frozenset(srq_sides))
            quirks = Quirks.load(QUIRKS_DIR / "siw.toml").for_run(
                {"kernel": K612, "rdma_core": rdma_core})
            h = PairHarness(pair, quirks=quirks, sink=None, time_scale=0.01, variant="iwarp")
            h.lifecycle.connect()
            return h

        return make_pair

    made: list = []

    def keep(maker):
        def make_pair(*args, **kwargs):
            made.append(maker(*args, **kwargs))
            return made[-1]
        return make_pair

    case(keep(make("srq_qp_post_recv_kills")), QPType.RC)
    assert {d.known_quirk for d in made[-1].known} == {"siw.srq_qp_post_recv_kills_the_process"}
    assert made[-1].known[0].observed.endswith("the calling process was killed (SIGFPE)")
    with pytest.raises(DivergenceError) as caught:
        case(make("srq_qp_post_recv_accepted"), QPType.RC)
    assert (caught.value.record.rule_id, caught.value.record.known_quirk) == (
        "srq.qp.post_recv", None)
    with pytest.raises(DivergenceError) as caught:
        case(make("srq_qp_post_recv_kills", rdma_core="57.0"), QPType.RC)
    assert "outcome=killed" in caught.value.record.tags


class ErrorIsFinal(Behaviour):
    """siw_qp_modify() in ERROR: no case, returns 0: every modify accepted, the QP stays."""

    name = "siw-error-final"

    def modify(self, qp: FakeQP, exp: Expectation, attrs: dict, mask: Attr) -> Verdict | None:
        return Verdict(True, state=S.ERR) if qp.model.state == S.ERR else None


def _unseen_final(kernel: str, through_err: bool) -> Checker:
    """siw 6.1 (state reads RESET) whose ERROR is final: INIT (through ERR and RESET when
    `through_err`), then INIT->RTS with STATE only, which the iwarp model refuses."""
    device = FakeDevice(["query_state_unset"], variant="iwarp", caps=SIW_CAPS, qp_types=RC,
                        kernel=kernel, behaviour=ErrorIsFinal(), **SIW)
    checker = _checker(device, _quirks(kernel))
    qp = checker.open_qp(QPType.RC)
    try:
        qp.bring_to(S.INIT)
        if through_err:
            qp.modify(*qp.values.transition_attrs(S.ERR))
            qp.modify(*qp.values.transition_attrs(S.RESET))  # accepted; the QP stays in ERROR
            qp.bring_to(S.INIT)
        qp.modify({"qp_state": int(S.RTS)}, Attr.STATE)
    finally:
        checker.close()
    return checker


def test_an_unseen_final_error_accepting_a_refused_move_is_known_on_6_1() -> None:
    known = {d.known_quirk for d in _unseen_final(K61, through_err=True).known}
    assert "siw.err_is_final_unseen_accepts_any_modify" in known


@pytest.mark.parametrize(("kernel", "through_err"), [(K61, False)], ids=["never-in-err"])
def test_an_accepted_refused_move_without_err_before_is_not_masked(
    kernel: str, through_err: bool
) -> None:
    """A QP that never went ERR->RESET accepting INIT->RTS is another bug (the fake accepts
    it only through its query fault's neighbour: planted with accept_illegal_transition)."""
    device = FakeDevice(["query_state_unset", "accept_illegal_transition"], variant="iwarp",
                        caps=SIW_CAPS, qp_types=RC, kernel=kernel, **SIW)
    checker = _checker(device, _quirks(kernel))
    qp = checker.open_qp(QPType.RC)
    with pytest.raises(DivergenceError) as caught:
        qp.bring_to(S.INIT)
        qp.modify({"qp_state": int(S.RTS)}, Attr.STATE)
    checker.close()
    assert caught.value.record.known_quirk is None
    assert caught.value.record.rule_id.startswith("iwarp.transition.")


def test_the_unseen_final_error_entry_is_6_1_only() -> None:
    """6.12 reads the state: siw.err_is_final covers it there, at ERR->RESET."""
    assert "siw.err_is_final_unseen_accepts_any_modify" in _quirks(K612).not_applicable


def test_a_refused_query_srq_is_known_and_a_short_one_is_not() -> None:
    """siw.query_srq_not_implemented: libsiw refuses every query_srq; a query_srq that
    answers with a max_wr short of what create wrote back is still a divergence."""

    def query_after_arm(fault: str):
        h = _connected(fault, srq_sides=frozenset({"b"}))
        h.post.srq_recv("b")
        h.post.arm_srq("b", 1)
        return h

    h = query_after_arm("srq_query_refused")
    assert {d.known_quirk for d in h.known} == {"siw.query_srq_not_implemented"}
    with pytest.raises(DivergenceError) as caught:
        query_after_arm("srq_query_short")
    assert caught.value.record.known_quirk is None
    assert caught.value.record.rule_id == "srq.query.size"
