"""Every rxe quirk covers its documented behaviour and nothing else.

For each entry of fixtures/quirks/rxe.toml, a fake device (tests/fake_device.py,
tests/fake_pair.py) plants the documented behaviour, which the profile must
report as known under that very entry; then a near miss, the same rule broken
in another way (or the same behaviour on a kernel outside the entry's range),
which the profile must NOT hide: the run fails with an unknown divergence.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from fixtures.selection import QUIRKS_DIR
from models.enums import Attr, QPState, QPType
from models.operations import Op
from models.wire import Fault, WireSettings
from qpconform.engine.connect import FAST, HOLD
from qpconform.engine.device import VerbResult
from qpconform.engine.hazards import HazardAvoided
from qpconform.engine.judge import DivergenceError
from qpconform.engine.lone import CheckedQP, Checker
from qpconform.engine.pair import PairHarness
from qpconform.engine.quirks import Quirks
from qpconform.engine.records import Divergence, DivergenceList
from tests import sequences
from tests.fake_device import Behaviour, FakeDevice
from tests.fake_pair import FakePair
from tests.oops_fake import Oops, RefusesSqdToSqd
from tests.sequences import extra_bit_without_state, init_to_rts

S = QPState
K61 = "6.1.0-50-amd64"
K612 = "6.12.117+deb13-amd64"
K73 = "7.3.4+deb13-amd64"  # trixie-backports: the newest kernel measured
#: RC sends wait (RNR, infinite retry) until the peer posts a receive: in flight for sure.



def rxe_quirks(kernel: str) -> Quirks:
    return Quirks.load(QUIRKS_DIR / "rxe.toml").for_run({"kernel": kernel, "rdma_core": "56.1"})


# ------------------------------------------------------------------------------ runs
@dataclass(frozen=True)
class Lone:
    """A scenario on one fake RC QP; `breaks`: the rule a near miss must fail under, when it
    is a sibling of the quirk's rule (default: one of the quirk's own rules)."""

    fault: str
    kernel: str
    steps: Callable[[CheckedQP], None]
    breaks: str | None = None
    behaviour: Callable[[], Behaviour] | None = None  # a driver's own code (no fault: "")

    def run(self) -> list[Divergence]:
        behaviour = self.behaviour() if self.behaviour else None
        device = FakeDevice([self.fault] if self.fault else [], kernel=self.kernel,
                            behaviour=behaviour)
        checker = Checker(device, quirks=rxe_quirks(self.kernel), sink=DivergenceList(),
                          settle_window=0.0, must_wait=0.0)
        try:
            self.steps(checker.open_qp(QPType.RC))
            checker.settle()
        except HazardAvoided:  # a known hazard: the rest of the scenario was not sent
            pass
        finally:
            checker.close()
        return checker.known


@dataclass(frozen=True)
class Pair:
    """A scenario on a fake connected pair."""

    fault: str
    kernel: str
    qp_type: QPType
    steps: Callable[[PairHarness], None]
    settings: WireSettings = FAST
    breaks: str | None = None
    srq_sides: frozenset[str] = frozenset()  # the ends with an SRQ

    def run(self) -> list[Divergence]:
        pair = FakePair(self.qp_type, self.fault, self.settings, kernel=self.kernel,
                        srq_sides=self.srq_sides)
        h = PairHarness(pair, self.settings, quirks=rxe_quirks(self.kernel), sink=None,
                        time_scale=0.01)
        h.lifecycle.connect()
        self.steps(h)
        h.quiet(0.01)
        return h.known


# -------------------------------------------------------------------------- sequences
def send_too_long(h: PairHarness) -> None:
    """An RC SEND longer than the peer's receive (pair.rc.recv_too_short)."""
    h.post.recv("b", short=True)
    h.post.recv("b")
    h.post.send("a")



def send_too_long_unreliable(h: PairHarness) -> None:
    """A UC or UD SEND longer than the peer's receive (pair.unreliable.recv_too_short)."""
    h.post.recv("b", short=True)
    h.post.recv("b")
    h.post.send("a")


def send_into_bad_lkey(h: PairHarness) -> None:
    """An RC SEND into a receive whose lkey names no MR (pair.rc.recv_bad_lkey)."""
    h.post.recv("b", bad_lkey=True)
    h.post.recv("b")
    h.post.send("a")


def drain(notify: bool) -> Callable[[CheckedQP], None]:
    def run(qp: CheckedQP) -> None:
        sequences.drain(qp, notify)
        qp.settle()

    return run


def then(*parts: Callable[[CheckedQP], None]) -> Callable[[CheckedQP], None]:
    def run(qp: CheckedQP) -> None:
        for part in parts:
            part(qp)
            qp.settle()

    return run


def to(state: QPState) -> Callable[[CheckedQP], None]:
    return lambda qp: qp.bring_to(state)


def sqd_to_sqd(qp: CheckedQP) -> None:
    qp.modify(*qp.values.transition_attrs(S.SQD))


def post_send(qp: CheckedQP) -> None:
    qp.post_send()


def recv_in_err(qp: CheckedQP) -> None:
    qp.bring_to(S.ERR)
    qp.settle()
    qp.post_recv()


def modify_with(nxt: QPState, **values: int) -> Callable[[CheckedQP], None]:
    def run(qp: CheckedQP) -> None:
        attrs, mask = qp.values.transition_attrs(nxt)
        attrs.update(values)
        qp.modify(attrs, mask)

    return run


def bad_lkey(h: PairHarness) -> None:
    h.post.recv("b")
    h.post.send("a", fault=Fault.BAD_LKEY)


def local_sge(fault: Fault) -> Callable[[PairHarness], None]:
    """A SEND whose local SGE is past its MR's end or in another PD (pair.local.*)."""

    def run(h: PairHarness) -> None:
        h.post.recv("b")
        h.post.send("a", fault=fault)

    return run


def send_into_read_only(h: PairHarness) -> None:
    """An RC SEND into a receive in an MR without LOCAL_WRITE (pair.rc.local.recv_write)."""
    h.post.recv("b", read_only=True)
    h.post.recv("b")
    h.post.send("a")


def held_then_rts(h: PairHarness) -> None:
    h.modify("a", S.SQD)
    h.post.send("a")
    h.post.recv("b")
    h.modify("a", S.RTS)


def held_then_rts_then_post(h: PairHarness) -> None:
    """A send held in SQD that SQD->RTS does not start, then the doorbell of a new post."""
    h.modify("a", S.SQD)
    h.post.send("a")
    h.post.recv("b")
    h.post.recv("b")
    h.modify("a", S.RTS)
    h.post.send("a")


def held_bad_lkey_then_rts(h: PairHarness) -> None:
    """A bad-lkey send held in SQD, SQD->RTS (not started: the QP stays RTS), then a post
    whose doorbell runs it: the error state comes only now."""
    h.modify("a", S.SQD)
    h.post.send("a", fault=Fault.BAD_LKEY)
    h.modify("a", S.RTS)
    h.post.recv("b")
    h.post.send("a")


def drain_after_reset(reset: bool) -> Callable[[PairHarness], None]:
    """(A send held in SQD, SQD->RESET, bring-up,) then RTS->SQD asking for SQ_DRAINED."""

    def run(h: PairHarness) -> None:
        if reset:
            h.modify("a", S.SQD)
            h.post.send("a")
            h.modify("a", S.RESET)
            h.lifecycle.bring_up("a")
        h.modify("a", S.SQD, {"en_sqd_async_notify": 1}, Attr.EN_SQD_ASYNC_NOTIFY)

    return run


def rnr_send_then_sqd(h: PairHarness) -> None:
    h.post.send("a")  # no receive at b: RNR, retried forever, in flight
    h.modify("a", S.SQD)


def rnr_send_sqd_then_recv(h: PairHarness) -> None:
    rnr_send_then_sqd(h)
    h.post.recv("b")  # the send completes: the drain is over


def bad_rkey(h: PairHarness) -> None:
    h.post.send("a", Op.RDMA_WRITE, Fault.BAD_RKEY)


def foreign_op(h: PairHarness) -> None:
    """A READ on UC (an operation the type lacks), a receive waiting at the peer."""
    h.post.recv("b")
    h.post.send("a", Op.RDMA_READ)


def reset_from(state: QPState, recv: bool = True) -> Callable[[PairHarness], None]:
    """A send held in SQD (from SQD), RESET, bring-up, then a send (to a peer with a
    receive, or without one: UD drops it)."""

    def run(h: PairHarness) -> None:
        h.modify("a", state)
        if state == S.SQD:
            h.post.send("a")  # held in SQD, discarded by RESET
        h.modify("a", S.RESET)
        h.lifecycle.bring_up("a")
        if recv:
            h.post.recv("b")
        h.post.send("a")

    return run


# ------------------------------------------------------------------------------ table
#: quirk id -> (the documented behaviour, near misses that must stay unknown).
CASES: dict[str, tuple[Lone | Pair, tuple[Lone | Pair, ...]]] = {
    "rxe.sq_drained_unconditional": (
        Lone("event_unasked", K61, drain(False)),
        (Lone("event_in_rts", K61, to(S.RTS),
              "ibta.sqd.drained_event.outside_sqd"),
         Lone("sq_drained_twice", K61, drain(True), "ibta.sqd.drained_event.once")),
    ),
    "rxe.failed_post_send_runs_later": (
        Lone("run_failed_post", K61, then(post_send, to(S.RTS))),
        (Lone("failed_post_completes_at_once", K61, then(to(S.INIT), post_send)),),
    ),
    "rxe.recv_posted_in_err_not_flushed": (
        Lone("recv_in_err_unflushed", K61, recv_in_err),
        (Lone("recv_in_err_wrong_status", K61, recv_in_err),),
    ),
    "rxe.attr_ranges_unchecked": (
        Lone("accept_out_of_range", K61, modify_with(S.INIT, pkey_index=128)),
        (Lone("accept_out_of_range_no_move", K61, modify_with(S.INIT, pkey_index=128)),),
    ),
    "rxe.path_mtu_zero_accepted": (
        Lone("accept_out_of_range", K61, then(to(S.INIT), modify_with(S.RTR, path_mtu=0))),
        (Lone("accept_out_of_range", K61, then(to(S.INIT), modify_with(S.RTR, path_mtu=6))),),
    ),
    "rxe.attr_only_modify_not_table_checked": (
        Lone("accept_attr_only_modify", K612, extra_bit_without_state),
        (Lone("accept_illegal_transition", K612, init_to_rts),
         Lone("accept_attr_only_modify", K61, extra_bit_without_state)),
    ),
    "rxe.sqd_exit_refused_while_draining": (
        Lone("refuse_sqd_exit_draining", K612, then(drain(True), to(S.RESET))),
        (Lone("refuse_sqd_exit", K612, then(drain(True), to(S.RESET))),),
    ),
    "rxe.sqd_to_sqd_raises_sq_drained_again": (
        Lone("sq_drained_on_sqd_to_sqd", K612, then(drain(True), sqd_to_sqd)),
        (Lone("sq_drained_twice", K612, drain(True)),
         Lone("sq_drained_on_sqd_to_sqd", K61, then(drain(True), sqd_to_sqd))),
    ),
    "rxe.bad_lkey_loc_qp_op_err": (
        Pair("bad_lkey_loc_qp_op_err", K61, QPType.RC, bad_lkey),
        (Pair("bad_lkey_rem_access_err", K61, QPType.RC, bad_lkey),
         Pair("bad_lkey_loc_qp_op_err", K612, QPType.RC, bad_lkey)),
    ),
    "rxe.local_send_error_completes_as_flush": (
        Pair("bad_lkey_flush", K612, QPType.RC, bad_lkey),
        (Pair("bad_lkey_flush", K61, QPType.RC, bad_lkey),),
    ),
    "rxe.local_pd_loc_qp_op_err": (
        Pair("local_loc_qp_op_err", K61, QPType.RC, local_sge(Fault.LOCAL_OTHER_PD)),
        (Pair("local_loc_qp_op_err", K61, QPType.UD, local_sge(Fault.LOCAL_PAST_END),
              breaks="pair.local.bounds"),
         Pair("local_loc_qp_op_err", K612, QPType.UC, local_sge(Fault.LOCAL_OTHER_PD)),
         Pair("local_pd_unchecked", K61, QPType.RC, local_sge(Fault.LOCAL_OTHER_PD))),
    ),
    "rxe.local_sge_error_completes_as_flush": (
        Pair("local_flush", K612, QPType.UC, local_sge(Fault.LOCAL_PAST_END)),
        (Pair("local_flush", K61, QPType.RC, local_sge(Fault.LOCAL_PAST_END)),
         Pair("local_bounds_loc_len_err", K612, QPType.UD, local_sge(Fault.LOCAL_PAST_END)),
         Pair("local_bounds_unchecked", K612, QPType.RC, local_sge(Fault.LOCAL_PAST_END))),
    ),
    "rxe.recv_without_local_write_as_malformed_wqe": (
        Pair("recv_bad_lkey_as_malformed_wqe", K612, QPType.RC, send_into_read_only),
        (Pair("recv_bad_lkey_loc_len_err", K61, QPType.RC, send_into_read_only),
         Pair("recv_write_unchecked", K61, QPType.RC, send_into_read_only)),
    ),
    "rxe.recv_too_short_as_malformed_wqe": (
        Pair("recv_len_err_as_malformed_wqe", K61, QPType.RC, send_too_long),
        (Pair("recv_len_err_loc_prot_err", K612, QPType.RC, send_too_long),
         Pair("short_recv_succeeds", K612, QPType.RC, send_too_long)),
    ),
    "rxe.query_cur_qp_state_stale": (
        Lone("cur_state_stale", K61, lambda qp: qp.bring_to(S.RTR)),
        (Lone("cur_state_stale", K612, lambda qp: qp.bring_to(S.RTR)),),
    ),
    "rxe.create_writes_back_asked_wr": (
        Lone("query_cap_differs", K61, lambda qp: qp.bring_to(S.INIT)),
        (Lone("query_cap_lower", K61, lambda qp: qp.bring_to(S.INIT)),
         Lone("query_cap_differs", K612, lambda qp: qp.bring_to(S.INIT))),
    ),
    "rxe.unreliable_too_long_as_malformed_wqe": (
        Pair("too_long_as_malformed_wqe", K61, QPType.UC, send_too_long_unreliable),
        (Pair("too_long_succeeds", K61, QPType.UD, send_too_long_unreliable),
         Pair("too_long_error_stays_rts", K612, QPType.UC, send_too_long_unreliable,
              breaks="ibta.err.recv_error")),
    ),
    "rxe.recv_bad_lkey_as_malformed_wqe": (
        Pair("recv_bad_lkey_as_malformed_wqe", K61, QPType.RC, send_into_bad_lkey),
        (Pair("recv_bad_lkey_loc_len_err", K612, QPType.RC, send_into_bad_lkey),
         Pair("recv_bad_lkey_rem_access_err", K61, QPType.RC, send_into_bad_lkey),
         Pair("recv_bad_lkey_succeeds", K612, QPType.RC, send_into_bad_lkey)),
    ),
    "rxe.foreign_op_completes_as_flush": (
        Pair("op_not_of_type_flush", K612, QPType.UC, foreign_op),
        (Pair("op_not_of_type_flush", K61, QPType.UC, foreign_op),
         Pair("op_not_of_type_succeeds", K612, QPType.UC, foreign_op)),
    ),
    "rxe.send_error_enters_err_not_sqe": (
        Pair("send_error_to_err", K61, QPType.UD, bad_lkey),
        (Pair("send_error_stays_rts", K61, QPType.UD, bad_lkey),),
    ),
    "rxe.sqd_to_rts_does_not_resume_sq": (
        Pair("sqd_rts_no_resume", K61, QPType.RC, held_then_rts),
        (Pair("sqd_rts_resume_bad_status", K61, QPType.RC, held_then_rts),
         # after the followed step: the doorbell runs the held send wrongly, or never
         Pair("sqd_rts_no_resume_then_bad_status", K61, QPType.RC, held_then_rts_then_post),
         Pair("sqd_rts_no_resume_then_lost", K61, QPType.RC, held_then_rts_then_post),
         Pair("sqd_rts_no_resume_then_stays_rts", K61, QPType.RC, held_bad_lkey_then_rts,
              breaks="ibta.err.send_error")),
    ),
    "rxe.sqd_drained_while_rnr_send_outstanding": (
        Pair("drain_early", K61, QPType.RC, rnr_send_then_sqd, HOLD),
        (Pair("drain_never_ends", K61, QPType.RC, rnr_send_sqd_then_recv, HOLD),),
    ),
    "rxe.no_access_err_event_on_rkey_violation": (
        Pair("no_access_err_event", K61, QPType.RC, bad_rkey),
        (Pair("access_err_as_fatal", K61, QPType.RC, bad_rkey,
              breaks="ibta.modify.no_error_event"),
         # 7.3 raises QP_ACCESS_ERR (measured): losing it again there is a regression
         Pair("no_access_err_event", K73, QPType.RC, bad_rkey)),
    ),
    "rxe.reset_leaves_stale_sq_index_drain_never_ends": (
        Lone("event_not_raised", K612, then(to(S.INIT), post_send, to(S.RESET), drain(True))),
        (Lone("event_not_raised", K612, drain(True)),
         Lone("event_not_raised", K612, then(post_send, drain(True))),  # refused, never reset
         Lone("event_not_raised", K61, then(to(S.INIT), post_send, to(S.RESET), drain(True)))),
    ),
    "rxe.reset_leaves_stale_sq_index": (
        Pair("stale_sq_after_sqd_reset", K612, QPType.UD, reset_from(S.SQD)),
        (Pair("stale_sq_after_any_reset", K612, QPType.UD, reset_from(S.ERR)),
         Pair("stale_sq_after_sqd_reset", K61, QPType.UD, reset_from(S.SQD))),
    ),
}


def sqd_to_sqd_with_max_dest(value: int) -> Callable[[CheckedQP], None]:
    """Up to SQD (max_dest_rd_atomic 1 at RTR), then SQD->SQD setting it to `value`."""
    def run(qp: CheckedQP) -> None:
        qp.bring_to(S.SQD)
        attrs, mask = qp.values.transition_attrs(S.SQD)
        attrs["max_dest_rd_atomic"] = value
        qp.modify(attrs, mask | Attr.MAX_DEST_RD_ATOMIC)

    return run


SQD_TO_SQD = "linux.transition.RC.SQD->SQD"
# a hazard: the planted oops is never reached on 6.1 (recorded as known); a driver that
# refuses the modify is still reported on 6.1 when the value does not grow (sent), and on
# 6.12 when it does (outside the entry's range: sent)
CASES["rxe.rd_atomic_grow_corrupts_memory"] = (
    Lone("", K61, sqd_to_sqd_with_max_dest(16), behaviour=Oops),
    (Lone("", K61, sqd_to_sqd_with_max_dest(1), SQD_TO_SQD, RefusesSqdToSqd),
     Lone("", K612, sqd_to_sqd_with_max_dest(16), SQD_TO_SQD, RefusesSqdToSqd)),
)


def srq_qp_to_err(h: PairHarness) -> None:
    """The SRQ's end ("b") to ERR with a receive in the SRQ; then the other end too."""
    h.post.srq_recv("b")
    h.modify("b", S.ERR)
    h.quiet(0.01)
    h.modify("a", S.ERR)


SRQ_B = frozenset({"b"})
CASES["rxe.last_wqe_reached_never_raised"] = (
    Pair("last_wqe_missing", K61, QPType.RC, srq_qp_to_err, srq_sides=SRQ_B),
    # 6.12 raises it: missing there is a bug; and on 6.1 a QP without an SRQ raising it
    (Pair("last_wqe_missing", K612, QPType.RC, srq_qp_to_err, srq_sides=SRQ_B),
     Pair("last_wqe_without_srq", K61, QPType.UD, srq_qp_to_err, srq_sides=SRQ_B,
          breaks="srq.last_wqe_reached.no_srq")),
)


def test_every_rxe_quirk_has_a_documented_case_and_a_near_miss() -> None:
    ids = {q.id for q in Quirks.load(QUIRKS_DIR / "rxe.toml")}
    assert ids == set(CASES)
    assert all(misses for _, misses in CASES.values())


@pytest.mark.parametrize("quirk_id", sorted(CASES))
def test_documented_behaviour_is_known_under_its_quirk(quirk_id: str) -> None:
    documented, _ = CASES[quirk_id]
    known = documented.run()
    assert known, "the planted behaviour produced no divergence at all"
    assert {d.known_quirk for d in known} >= {quirk_id}, [d.known_quirk for d in known]


@pytest.mark.parametrize(
    ("quirk_id", "index"),
    [(q, i) for q, (_, misses) in sorted(CASES.items()) for i in range(len(misses))],
)
def test_near_miss_is_not_masked(quirk_id: str, index: int) -> None:
    miss = CASES[quirk_id][1][index]
    with pytest.raises(DivergenceError) as caught:
        miss.run()
    record = caught.value.record
    assert record.known_quirk is None
    # the same rule, broken another way (or on a kernel outside the entry's range)
    quirk = next(q for q in Quirks.load(QUIRKS_DIR / "rxe.toml") if q.id == quirk_id)
    rules = (miss.breaks,) if miss.breaks else quirk.rules
    assert any(fnmatch.fnmatchcase(record.rule_id, r) for r in rules), record.format()


def reset_to_reset(qp: CheckedQP) -> None:
    qp.modify(*qp.values.transition_attrs(S.RESET))


def test_a_reset_to_reset_leaves_the_stale_sq_index_too() -> None:
    """The trixie newcomer run of the host engine (seed 3742911254, the lone machine, shrunk
    to 18 verbs): a send refused in RESET, RESET->RESET (rxe_qp_reset() runs on every move to
    RESET), bring-up, RTS->SQD with notify, no SQ_DRAINED: known under the quirk; the same
    without the RESET->RESET stays unknown (the near misses above)."""
    steps = then(post_send, reset_to_reset, drain(True))
    known = Lone("event_not_raised", K612, steps).run()
    assert "rxe.reset_leaves_stale_sq_index_drain_never_ends" in {d.known_quirk for d in known}
    with pytest.raises(DivergenceError):
        Lone("event_not_raised", K61, steps).run()  # 6.1 resets the index: a bug there


def test_the_stale_sq_index_flushes_a_send_the_peer_would_have_dropped() -> None:
    """Issue 22 (trixie, seed 408919583): after SQD->RESET the next UD send is flushed
    whether the peer would have taken it or dropped it (no receive posted)."""
    known = Pair("stale_sq_after_sqd_reset", K612, QPType.UD, reset_from(S.SQD, recv=False)).run()
    assert {d.known_quirk for d in known} == {"rxe.reset_leaves_stale_sq_index"}
    assert "pair.unreliable.dropped" in {d.rule_id for d in known}
    with pytest.raises(DivergenceError) as caught:  # the same loss after ERR->RESET: unknown
        Pair("stale_sq_after_any_reset", K612, QPType.UD, reset_from(S.ERR, recv=False)).run()
    assert caught.value.record.rule_id == "pair.unreliable.dropped"


def test_a_pair_drain_that_never_ends_after_reset_is_followed() -> None:
    """Issue 22 (trixie, seed 694344456): on a pair, after SQD->RESET discarded held sends,
    RTS->SQD never ends its drain (no SQ_DRAINED, sq_draining 1 for good): known, and the
    model drains on with the device; the same drain on a QP never reset is a divergence."""
    known = Pair("stale_sq_drain_never_ends", K612, QPType.UD, drain_after_reset(True)).run()
    assert {d.known_quirk for d in known} == {"rxe.reset_leaves_stale_sq_index_drain_never_ends"}
    assert {d.kind for d in known} == {"missing_event", "state"}
    with pytest.raises(DivergenceError) as caught:
        Pair("drain_never_ends", K612, QPType.UD, drain_after_reset(False)).run()
    assert caught.value.record.rule_id == "pair.sqd.sq_draining"
    assert caught.value.record.known_quirk is None

    def then_err(h: PairHarness) -> None:  # after the followed drain: SQD->ERR flushes
        drain_after_reset(True)(h)
        h.post.recv("a")
        h.post.recv("a")
        h.modify("a", S.ERR)

    with pytest.raises(DivergenceError) as caught:  # ... a lost flush is still a divergence
        Pair("stale_sq_drain_never_ends_lost_flush", K612, QPType.UD, then_err).run()
    assert caught.value.record.rule_id == "ibta.err.flush"
    assert caught.value.record.known_quirk is None


def test_reset_goes_through_err_when_a_known_refusal_keeps_the_qp_in_sqd(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 22 (trixie, seed 694344456, replace_peer): the followed drain never ends, rxe
    refuses SQD->RESET while draining (known); the harness reaches RESET through ERR instead
    of bringing up a QP still in SQD."""
    pair = FakePair(QPType.UD, "stale_sq_drain_never_ends", FAST, kernel=K612)
    h = PairHarness(pair, FAST, quirks=rxe_quirks(K612), sink=None, time_scale=0.01)
    h.lifecycle.connect()
    drain_after_reset(True)(h)
    end, modify = pair.end("a"), pair.end("a").modify

    def refuse_while_draining(attrs, mask):  # rxe: only ERR may leave a running drain
        qp = pair.model.qp("a")
        if qp.state == S.SQD and qp.draining and attrs.get("qp_state") != int(S.ERR):
            return VerbResult(False, 22, "draining")
        return modify(attrs, mask)

    monkeypatch.setattr(end, "modify", refuse_while_draining)
    # the machine's replace_peer: a new peer, this end reset, both connected
    h.lifecycle.destroy("b")
    h.lifecycle.recreate("b")
    h.lifecycle.reset("a")
    h.lifecycle.connect()
    assert h.model.qp("a").state == S.RTS == pair.model.qp("a").state
    assert "rxe.sqd_exit_refused_while_draining" in {d.known_quirk for d in h.known}


def test_a_failed_post_flushed_in_err_is_known_when_seen_only_after_the_qp_moved_on() -> None:
    """The rxe 6.12 stateful run: post_send refused in RESET, then RTS->SQD->ERR->RESET->INIT
    in one rule; the flush of the refused WR is polled only once the QP is in INIT."""
    known = Lone(
        "run_failed_post", K612, then(post_send, lambda qp: (qp.bring_to(S.RTS),
                                                            qp.bring_to(S.ERR),
                                                            qp.bring_to(S.INIT)))
    ).run()
    assert [d.known_quirk for d in known] == ["rxe.failed_post_send_runs_later"]
    assert known[0].context["state"] == "INIT" and "ERR" in known[0].context["since"]


@pytest.mark.parametrize(("qp_type", "kernel", "error_state"), [
    (QPType.RC, K61, S.ERR), (QPType.RC, K612, S.ERR), (QPType.UC, K61, S.SQE),
    (QPType.UD, K612, S.SQE),
])
def test_a_held_bad_send_is_followed_until_the_doorbell_runs_it(
    qp_type: QPType, kernel: str, error_state: QPState
) -> None:
    """Issue 22: rxe leaves a bad-lkey send held in SQD unstarted by SQD->RTS. The state the
    model would have reached through it (ERR; SQE for UC/UD) is not reported: the engine
    follows the quirk's `instead`, the send waits, and the next post's doorbell runs it, so
    the error state comes then and is judged as usual."""
    pair = FakePair(qp_type, "sqd_rts_no_resume", FAST, kernel=kernel)
    h = PairHarness(pair, FAST, quirks=rxe_quirks(kernel), sink=None, time_scale=0.01)
    h.lifecycle.connect()
    held_bad_lkey_then_rts(h)
    h.quiet(0.01)
    assert {d.known_quirk for d in h.known} == {"rxe.sqd_to_rts_does_not_resume_sq"}
    assert not h.desynced
    assert h.model.qp("a").state == error_state == pair.model.qp("a").state
    assert any(s.get("verb") == "follow" and "doorbell" in s["observed"] for s in h.steps)


def test_a_held_send_the_device_did_run_is_not_rewound() -> None:
    """The rewind needs everything the resumed sends owed to be missing: a device that
    resumes correctly is never followed back (no known record, nothing held)."""
    pair = FakePair(QPType.RC, None, FAST, kernel=K61)
    h = PairHarness(pair, FAST, quirks=rxe_quirks(K61), sink=None, time_scale=0.01)
    h.lifecycle.connect()
    held_then_rts_then_post(h)
    h.quiet(0.01)
    assert h.known == [] and not h.model.qp("a").queues.outstanding_sends


def test_a_second_sq_drained_seen_after_the_qp_left_sqd_belongs_to_the_sqd_to_sqd() -> None:
    """rxe.sqd_to_sqd_raises_sq_drained_again on a loaded host: the event the SQD->SQD
    raised is read only after SQD->RTS; it is the newest drain's, and still known. Without
    the SQD->SQD (a second event of one RTS->SQD drain) it is not."""
    late = Lone("sq_drained_on_sqd_to_sqd_late", K612, then(drain(True), sqd_to_sqd, to(S.RTS)))
    assert {d.known_quirk for d in late.run()} >= {"rxe.sqd_to_sqd_raises_sq_drained_again"}
    with pytest.raises(DivergenceError) as caught:
        Lone("sq_drained_twice", K612, then(drain(True), to(S.RTS))).run()
    assert caught.value.record.known_quirk is None


def test_a_drain_event_after_an_sqd_to_sqd_accepted_under_another_quirk_is_known() -> None:
    """Found by the host engine's lone machine on trixie (stop 39): SQD->SQD with an out-of-
    range P_Key index, refused by the model and accepted by rxe (rxe.attr_ranges_unchecked),
    is still an SQD->SQD: the SQ_DRAINED it raises on 6.12 is
    rxe.sqd_to_sqd_raises_sq_drained_again, not an unknown second drain event; on 6.1 (no
    such quirk) the same event stays unknown."""

    def out_of_range_sqd_to_sqd(qp: CheckedQP) -> None:
        attrs, mask = qp.values.transition_attrs(S.SQD)
        qp.modify({**attrs, "pkey_index": 1}, mask | Attr.PKEY_INDEX)

    def run(kernel: str) -> list[Divergence]:
        # delivered after the SQD->SQD's event window, at a later step, as in the VM
        device = FakeDevice(["accept_out_of_range", "sq_drained_on_sqd_to_sqd"],
                            kernel=kernel, delay=0.1)
        checker = Checker(device, quirks=rxe_quirks(kernel), sink=DivergenceList(),
                          settle_window=0.2, must_wait=1.0, event_window=0.01)
        try:
            qp = checker.open_qp(QPType.UD)
            drain(True)(qp)
            out_of_range_sqd_to_sqd(qp)
            qp.modify({"qp_state": int(S.INIT)}, Attr.STATE)  # refused: SQD->INIT is none
            time.sleep(0.2)  # the event is there when the settle step reads it
            checker.settle(0.3)
        finally:
            checker.close()
        return checker.known

    known = {d.known_quirk for d in run(K612)}
    assert {"rxe.attr_ranges_unchecked", "rxe.sqd_to_sqd_raises_sq_drained_again"} <= known
    with pytest.raises(DivergenceError) as caught:
        run(K61)
    assert caught.value.record.rule_id == "ibta.sqd.drained_event.once"
