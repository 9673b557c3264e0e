"""A UC/UD SEND longer than the receive (pair.unreliable.recv_too_short, may) and the bytes
an inline SEND delivers (pair.inline.delivered).

The fake pair drops a too-long message; under "too_long_error" it completes the receive
LOC_LEN_ERR and enters ERR: both conform (the rule's two outcomes), each learnt by the
harness from the device and then held, also when the responder holds sends in SQD and
their flush shows before the receive's error. Each planted fault (the receive "succeeds",
the error leaves the QP in RTS, the requester fails, two choices in one run, the flushes
without the receive's error, an inline SEND's bytes wrong) is caught, in the deterministic
cases and by the traffic machine.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from models.enums import QPState, QPType, WCStatus
from models.operations import INLINE_DELIVERED, SINK_PAYLOAD, Op
from models.pair import PairModel
from models.pair_rules import TOO_LONG_DROPPED, TOO_LONG_ERROR, UNRELIABLE_RECV_TOO_SHORT
from qpconform.engine.judge import DivergenceError
from qpconform.engine.pair import PairHarness
from qpconform.engine.quirks import Quirks
from qpconform.machines.pair import machine_for
from reports.run_record import RunRecorder
from tests.example_counts import PLANTED_RUN
from tests.fake_pair import (
    FakePair,
    connected_fake,
    connected_model,
    machine_divergence,
    scenario_divergence,
)

S = QPState
UNRELIABLE = [QPType.UC, QPType.UD]


def _too_long_twice(h: PairHarness) -> None:
    """suites/test_error_handling.py test_unreliable_send_longer_than_the_receive."""
    h.post.recv("b", short=True)
    h.post.recv("b")
    h.post.send("a")
    h.quiet(0.01)
    if h.model.qp("b").state == S.ERR:
        h.lifecycle.reset("b")
        h.lifecycle.bring_up("b")
        h.post.recv("b", short=True)
    h.post.send("a")
    h.quiet(0.01)
    h.finish()


def _too_long_behind_held_sends(h: PairHarness) -> None:
    """The responder holds a send in SQD when the too-long message comes: under the error
    outcome the flush of that send (send CQ, polled first) precedes the receive's
    LOC_LEN_ERR; the traffic machine found this order (a receive, SQD, exchanges). Twice,
    as `_too_long_twice` (a dropped message leaves the short receive first in line)."""
    for _ in range(2):
        if h.model.qp("b").state == S.ERR:
            h.lifecycle.reset("b")
            h.lifecycle.bring_up("b")
        if h.model.qp("b").state == S.RTS:
            h.post.recv("b", short=True)
            h.post.recv("b")
            h.modify("b", S.SQD)
        h.post.recv("a")
        h.post.send("b")  # held in SQD
        h.post.send("a")
        h.quiet(0.01)
    h.finish()


SCENARIOS = {"twice": _too_long_twice, "held": _too_long_behind_held_sends}


# ------------------------------------------------------------------------------ model
@pytest.mark.parametrize("qp_type", UNRELIABLE, ids=lambda t: t.name)
def test_the_model_expects_the_drop_until_it_knows(qp_type: QPType) -> None:
    m = connected_model(qp_type)
    m.apply("b", m.post_recv("b", 1, short=True), True)
    m.apply("a", m.post_send("a", 2), True)
    (step,) = m.progress()
    assert step.rule is UNRELIABLE_RECV_TOO_SHORT
    assert [(s, [c.status for c in e.completions]) for s, e in step.effects] == [
        ("a", [WCStatus.SUCCESS])]
    assert m.qp("b").queues.recvs == [1] and m.undecided == {("b", 1)}
    exp = m.too_long_completed("b", 1)
    assert [c.status for c in exp.completions] == [WCStatus.LOC_LEN_ERR]
    assert m.qp("b").state == S.ERR and m.too_long == TOO_LONG_ERROR


def test_the_model_completes_in_error_once_chosen() -> None:
    m = connected_model(QPType.UD)
    m.too_long = TOO_LONG_ERROR
    m.apply("b", m.post_recv("b", 1, short=True), True)
    m.apply("b", m.post_recv("b", 2), True)
    m.apply("a", m.post_send("a", 3), True)
    (step,) = m.progress()
    (_, sent), (_, got) = sorted(step.effects)
    assert [c.status for c in got.completions] == [WCStatus.LOC_LEN_ERR, WCStatus.WR_FLUSH_ERR]
    assert [c.status for c in sent.completions] == [WCStatus.SUCCESS]
    assert m.qp("b").state == S.ERR and m.qp("a").state == S.RTS


def test_iwarp_and_bad_lkey_receives_stay_out_of_the_unreliable_types() -> None:
    with pytest.raises(ValueError):
        connected_model(QPType.UC).post_recv("b", 1, bad_lkey=True)


# ------------------------------------------------------------------- deterministic case
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("fault, chosen", [(None, TOO_LONG_DROPPED),
                                           ("too_long_error", TOO_LONG_ERROR),
                                           ("too_long_error_fatal", TOO_LONG_ERROR)])
@pytest.mark.parametrize("qp_type", UNRELIABLE, ids=lambda t: t.name)
def test_either_outcome_conforms(
    qp_type: QPType, fault: str | None, chosen: str, scenario: str
) -> None:
    """The clean fake drops; the near miss completes in error (with QP_FATAL, as irdma
    may): all pass, and the harness learnt which, also from a held send's flush seen
    before the receive's error ("held")."""
    h = connected_fake(qp_type, fault)
    SCENARIOS[scenario](h)
    assert h.model.too_long == chosen


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("fault, rules", [
    ("too_long_succeeds", {UNRELIABLE_RECV_TOO_SHORT.id}),
    ("too_long_error_stays_rts", {"ibta.err.recv_error"}),
    ("too_long_inconsistent", {UNRELIABLE_RECV_TOO_SHORT.id}),
    ("too_long_requester_error", {UNRELIABLE_RECV_TOO_SHORT.id}),
    ("too_long_error_recv_lost", {"ibta.err.recv_error"}),  # a flush before it: order
])
@pytest.mark.parametrize("qp_type", UNRELIABLE, ids=lambda t: t.name)
def test_a_planted_fault_is_caught(
    qp_type: QPType, fault: str, rules: set[str], scenario: str
) -> None:
    record = scenario_divergence(connected_fake(qp_type, fault), SCENARIOS[scenario])
    assert record.rule_id in rules, record


def test_two_choices_in_one_run_are_inconsistent() -> None:
    """Each pair learns its own choice; the run's recorder holds the first: a pair of the
    same run that chooses otherwise is an inconsistent divergence."""
    recorder = RunRecorder({}, {})
    first = PairHarness(FakePair(QPType.UD), sink=None, time_scale=0.01, recorder=recorder)
    first.lifecycle.connect()
    _too_long_twice(first)
    second = PairHarness(FakePair(QPType.UD, "too_long_error"), sink=None, time_scale=0.01,
                         recorder=recorder)
    second.lifecycle.connect()
    with pytest.raises(DivergenceError) as caught:
        _too_long_twice(second)
    assert caught.value.record.rule_id == UNRELIABLE_RECV_TOO_SHORT.id
    assert caught.value.record.kind == "inconsistent"


@pytest.mark.parametrize("first, then", [(None, "too_long_error"), ("too_long_error", None)])
def test_a_later_pair_starts_from_the_run_s_choice(first: str | None, then: str | None) -> None:
    """The second pair of a run expects the first's choice from its first short receive:
    the other outcome is a divergence of the rule at once; the same one passes."""
    recorder = RunRecorder({}, {})
    for fault in (first, first):
        h = PairHarness(FakePair(QPType.UC, fault), sink=None, time_scale=0.01,
                        recorder=recorder)
        h.lifecycle.connect()
        _too_long_twice(h)
    chosen = h.model.too_long
    h = PairHarness(FakePair(QPType.UC, then), sink=None, time_scale=0.01, recorder=recorder)
    h.lifecycle.connect()
    h.post.recv("b", short=True)
    assert h.model.too_long == chosen
    with pytest.raises(DivergenceError) as caught:
        _too_long_twice(h)
    assert caught.value.record.rule_id == UNRELIABLE_RECV_TOO_SHORT.id


# --------------------------------------------------------------------- traffic machine
@pytest.mark.parametrize("qp_type", UNRELIABLE, ids=lambda t: t.name)
def test_the_traffic_machine_catches_a_failing_requester(qp_type: QPType) -> None:
    def make() -> PairHarness:
        return PairHarness(FakePair(qp_type, "too_long_requester_error"), sink=None,
                           time_scale=0.01)

    record = machine_divergence(machine_for(qp_type, make, faults=("short_recv",)))
    assert record.rule_id == UNRELIABLE_RECV_TOO_SHORT.id


@pytest.mark.parametrize("fault", [None, "too_long_error"])
@pytest.mark.parametrize("qp_type", UNRELIABLE, ids=lambda t: t.name)
def test_the_traffic_machine_passes_either_outcome(qp_type: QPType, fault: str | None) -> None:
    def make() -> PairHarness:
        return PairHarness(FakePair(qp_type, fault), sink=None, time_scale=0.01)

    machine = machine_for(qp_type, make, faults=("short_recv",))
    run_state_machine_as_test(machine, settings=settings(
        max_examples=30, deadline=None, database=None, derandomize=True, **PLANTED_RUN))


# ------------------------------------------------------------------------ inline bytes
@pytest.mark.parametrize("op", [Op.SEND, Op.SEND_WITH_IMM])
def test_an_inline_send_names_the_bytes_it_carries(op: Op) -> None:
    m: PairModel = connected_model(QPType.RC)
    m.apply("b", m.post_recv("b", 1), True)
    m.apply("a", m.post_send("a", 2, op, inline=True), True)
    (step,) = m.progress()
    got = dict(step.effects)["b"].completions[0]
    assert (got.data, got.data_rule) == (SINK_PAYLOAD, INLINE_DELIVERED)


def _inline_send(h: PairHarness) -> None:
    h.post.recv("b")
    h.post.send("a", inline=True)
    h.quiet(0.01)
    h.finish()


@pytest.mark.parametrize("qp_type", [QPType.RC, QPType.UC, QPType.UD], ids=lambda t: t.name)
def test_inline_bytes_are_compared(qp_type: QPType) -> None:
    _inline_send(connected_fake(qp_type))  # the clean fake: the bytes it was posted with
    record = scenario_divergence(connected_fake(qp_type, "inline_wrong_bytes"), _inline_send)
    assert record.rule_id == INLINE_DELIVERED.id


def test_the_traffic_machine_catches_wrong_inline_bytes() -> None:
    def make() -> PairHarness:
        return PairHarness(FakePair(QPType.RC, "inline_wrong_bytes"), sink=None,
                           time_scale=0.01)

    record = machine_divergence(machine_for(QPType.RC, make, faults=()))
    assert record.rule_id == INLINE_DELIVERED.id


# ------------------------------------------------------------------- rxe's UC, predicted
_PREDICTED = '''
[[quirk]]
id = "rxe.unreliable_too_long_as_malformed_wqe"
provenance = "source"
rule = "pair.unreliable.recv_too_short"
qp_types = ["UC", "UD"]
kinds = ["status"]
observed = [{ queue = "recv", status = "LOC_QP_OP_ERR" }]
reason = "rxe: copy_data() -EINVAL, RESPST_ERR_MALFORMED_WQE: the receive LOC_QP_OP_ERR."
evidence = ["linux v6.1 drivers/infiniband/sw/rxe/rxe_resp.c send_data_in(): -EINVAL"]
'''


@pytest.mark.parametrize("qp_type", UNRELIABLE, ids=lambda t: t.name)
def test_rxe_predicted_status_is_a_divergence_of_the_rule(qp_type: QPType, tmp_path) -> None:
    """rxe's UC path, read in its source (never run here): the receive completes
    LOC_QP_OP_ERR, the QP enters ERR. Without a quirk: a status divergence of
    pair.unreliable.recv_too_short; with an entry naming it (what the lead adds once a
    device run shows it), known, and the rest (ERR, the flush, the next message's same
    choice) still compared."""
    record = scenario_divergence(connected_fake(qp_type, "too_long_as_malformed_wqe"),
                                 _too_long_twice)
    assert (record.rule_id, record.kind) == (UNRELIABLE_RECV_TOO_SHORT.id, "status")
    profile = tmp_path / "rxe.toml"
    profile.write_text(_PREDICTED)
    quirks = Quirks.load(profile).for_run({"kernel": "6.1.0-50-amd64", "rdma_core": "56.1"})
    h = PairHarness(FakePair(qp_type, "too_long_as_malformed_wqe"), quirks=quirks, sink=None,
                    time_scale=0.01)
    h.lifecycle.connect()
    _too_long_twice(h)
    assert {d.known_quirk for d in h.known} == {"rxe.unreliable_too_long_as_malformed_wqe"}
    assert h.model.too_long == TOO_LONG_ERROR
