"""Self-tests of an SRQ's returned sizes and limit and its resize (models/srq_sizes.py,
qpconform/engine/srq_sizes.py) on the fake pair: a clean fake passes each scenario, and each
planted fault of tests/fake_srq.py is caught with its rule."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from models import srq_sizes
from models.enums import QPType
from models.operations import Op
from qpconform.engine.pair import PairHarness
from qpconform.engine.quirks import Quirk, Quirks
from qpconform.machines.pair import machine_for
from reports.qualification import build_report
from reports.run_record import RunRecorder, merge_runs
from suites.test_srq import resize_below_the_limit
from tests.fake_pair import FakePair, connected_fake, machine_divergence, scenario_divergence
from tests.rule_log import RuleLog

ALL = [QPType.RC, QPType.UC, QPType.UD]
SRQ_B = frozenset({"b"})


def _query(h: PairHarness) -> None:
    """create_srq's write-back and one query_srq."""
    h.srq_sizes.check("b")


def _limit(h: PairHarness) -> None:
    """The limit armed at 3 over 4 receives (read back armed), then fired by two SENDs and
    read back again."""
    for _ in range(4):
        h.post.srq_recv("b")
    h.post.arm_srq("b", 3)
    h.post.send("a", Op.SEND)
    h.post.send("a", Op.SEND)
    h.quiet(0.01)
    h.srq_sizes.check("b")


def _grow(h: PairHarness) -> None:
    """Two receives held, the SRQ resized to 128 then back to 8; a SEND takes one."""
    h.post.srq_recv("b")
    h.post.srq_recv("b")
    h.srq_sizes.resize("b", 128)
    h.srq_sizes.resize("b", 8)
    h.post.send("a", Op.SEND)


def _below(h: PairHarness) -> None:
    """Four receives held, a resize to 2: refused (or room for all four kept)."""
    for _ in range(4):
        h.post.srq_recv("b")
    h.srq_sizes.resize("b", 2)
    h.post.send("a", Op.SEND)


SCENARIOS = [_query, _limit, _grow, _below]


@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__.strip("_"))
def test_clean_fake_srq_sizes_have_no_divergence(qp_type: QPType, scenario: Callable) -> None:
    h = connected_fake(qp_type, srq_sides=SRQ_B)
    scenario(h)
    h.quiet(0.01)
    assert h.known == []


#: (planted fault, scenario, rule)
PLANTED = [
    ("srq_create_short", _query, srq_sizes.CREATE_AT_LEAST),
    ("srq_query_short", _query, srq_sizes.QUERY_SIZE),
    ("srq_limit_unread", _limit, srq_sizes.QUERY_LIMIT),
    ("srq_limit_after_fire", _limit, srq_sizes.QUERY_LIMIT_FIRED),
    ("srq_resize_refused", _grow, srq_sizes.RESIZE),
    ("srq_resize_below_held", _below, srq_sizes.RESIZE_BELOW_HELD),
    ("srq_failed_resize_changes", _below, srq_sizes.FAILED_UNCHANGED),
]


@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
@pytest.mark.parametrize(("fault", "scenario", "rule"), PLANTED, ids=[p[0] for p in PLANTED])
def test_planted_srq_size_fault_is_caught(fault, scenario, rule, qp_type) -> None:
    record = scenario_divergence(connected_fake(qp_type, fault, srq_sides=SRQ_B), scenario)
    assert (record.kind, record.rule_id) == ("readback", rule.id)


def test_no_resize_is_sent_to_a_device_without_the_feature() -> None:
    h = connected_fake(QPType.RC, srq_sides=SRQ_B)
    h.device_identity["srq_resize"] = "no"
    with pytest.raises(ValueError, match="IBV_DEVICE_SRQ_RESIZE"):
        h.srq_sizes.resize("b", 128)


def test_the_limit_read_back_after_it_fired_may_be_zero_or_the_limit() -> None:
    assert srq_sizes.limit_allowed(3, fired=True) == {0, 3}
    assert srq_sizes.limit_allowed(3, fired=False) == {3}
    assert srq_sizes.limit_rule(True) is srq_sizes.QUERY_LIMIT_FIRED


def test_a_device_without_srq_resize_is_reported_lacking_it(tmp_path) -> None:
    """The device's own IBV_DEVICE_SRQ_RESIZE (the identity's srq_resize) decides the
    report's SRQ_RESIZE capability, and the resize rules are out of its scope."""
    for said, has in (("no", False), ("yes", True)):
        recorder = RunRecorder({"device": "rxe0", "srq_resize": said}, {"variant": "linux"})
        report = build_report(merge_runs([recorder.write(tmp_path / f"run-{said}.json")]))
        assert report["capabilities"]["SRQ_RESIZE"] is has
        assert report["capabilities"]["SRQ"] is True


@pytest.mark.parametrize(("fault", "rule"), [("srq_query_short", srq_sizes.QUERY_SIZE),
                                             ("srq_limit_unread", srq_sizes.QUERY_LIMIT)])
def test_the_traffic_machine_reads_the_srq_back_at_each_arm(fault, rule) -> None:
    """The machine's arm_srq draw reads the SRQ back (query_srq after the arm): a device
    reporting less than it holds, or not the limit armed, is found there."""

    def make(srq_sides: tuple[str, ...] = ()) -> PairHarness:
        return PairHarness(FakePair(QPType.RC, fault, srq_sides=SRQ_B), sink=None,
                           time_scale=0.01)

    record = machine_divergence(machine_for(QPType.RC, make, faults=(), srq=True), 200, 1)
    assert record.rule_id == rule.id


def _below_limit(h: PairHarness) -> None:
    """The suite's resize case (suites/test_srq.py test_srq_resize), on the fake."""
    resize_below_the_limit(h, quiet=0.01)


def test_a_resize_below_the_armed_limit_is_clean_and_a_changed_refusal_is_caught() -> None:
    clean = connected_fake(QPType.RC, srq_sides=SRQ_B)
    _below_limit(clean)
    assert clean.known == []
    faulty = connected_fake(QPType.RC, "srq_failed_resize_changes", srq_sides=SRQ_B)
    record = scenario_divergence(faulty, _below_limit)
    assert record.rule_id == srq_sizes.FAILED_UNCHANGED.id


def test_a_known_srq_size_is_judged_once_and_logged_known() -> None:
    """A quirk covering a short query_srq: known once for that field (one bug, one record),
    the run record's steps say "known" where it was found; the limit is still judged."""
    steps: list[tuple[str, str]] = []

    class Recorder(RuleLog):
        def step(self, qp_type, verb, state_before, target, rules, result) -> None:
            super().step(qp_type, verb, state_before, target, rules, result)
            steps.append((verb, result))

    quirk = Quirk("fake.srq_query_short", (srq_sizes.QUERY_SIZE.id,), "planted", ("test",))
    h = PairHarness(FakePair(QPType.RC, "srq_query_short", srq_sides=SRQ_B),
                    quirks=Quirks([quirk]), recorder=Recorder(), sink=None, time_scale=0.01)
    h.lifecycle.connect()
    _limit(h)
    assert [d.rule_id for d in h.known] == [srq_sizes.QUERY_SIZE.id]
    assert ("query_srq", "known") in steps and ("query_srq", "match") in steps
