"""What create and query hand back (models/returned.py, qpconform/engine/returned.py): the
near misses a driver may legitimately show pass, and each check is counted in the run record.

The planted faults (cap_below_asked, cqe_below_asked, query_cap_differs,
query_inline_below_asked, cur_state_stale) are caught in tests/test_harness_planted.py; here
the values just beside them must not be: caps rounded up at create (and reported so by
query), a query_qp inline limit above what was asked (siw), a cur_qp_state left 0 (efa).
"""

from __future__ import annotations

import pytest

from models import returned
from models.enums import QPState, QPType
from models.variant import LINUX
from qpconform.adapters import wire
from qpconform.engine.device import Created, QueryResult
from qpconform.engine.judge import DivergenceError
from qpconform.engine.lone import Checker
from qpconform.engine.quirks import Quirk, Quirks
from suites import test_transitions as transitions_suite
from tests.fake_device import ASKED_CAP, FakeDevice
from tests.rule_log import RuleLog

S = QPState


def _run(device: FakeDevice) -> RuleLog:
    """RESET -> RTS -> SQD -> ERR and a query on one RC QP, every step recorded."""
    log = RuleLog(strict=True)
    checker = Checker(device, recorder=log, sink=log, settle_window=0.0, must_wait=0.0)
    qp = checker.open_qp(QPType.RC)
    for state in (S.RTS, S.SQD, S.ERR):
        qp.bring_to(state)
    qp.query()
    checker.close()
    return log


@pytest.mark.parametrize("device", [
    FakeDevice(),
    FakeDevice(rounded_cap={"max_send_wr": 127, "max_recv_wr": 128, "max_inline_data": 60}),
    FakeDevice(query_inline=128),  # siw: SIW_MAX_INLINE whatever was asked
    FakeDevice(cur_unset=True),  # efa: memset, never written
], ids=["clean", "rounded_up", "query_inline_limit", "cur_unset"])
def test_near_misses_pass(device: FakeDevice) -> None:
    log = _run(device)
    for rule in returned.RULES:
        assert log.rules[rule.id] > 0, rule.id  # each was judged, and passed


def test_cur_unset_is_a_recorded_choice() -> None:
    log = _run(FakeDevice(cur_unset=True))
    assert log.chosen[returned.CUR_STATE.id] > 0


def test_inline_below_what_create_wrote_back_passes_above_asked() -> None:
    """query's inline may be below create's written-back value, as long as it is not
    below what was asked (siw reports its limit, create may have written more)."""
    device = FakeDevice(rounded_cap={"max_inline_data": 64},
                        query_inline=ASKED_CAP["max_inline_data"])
    _run(device)


def test_a_known_query_field_is_judged_once() -> None:
    """A quirk that covers a query cap difference: judged known once, then that field is
    not judged again on this QP (one bug, one record); other fields still are."""
    quirk = Quirk("fake.query_cap", ("query.cap.as_created",), "planted", ("test",))
    device = FakeDevice(["query_cap_differs"])
    checker = Checker(device, quirks=Quirks([quirk]), settle_window=0.0, must_wait=0.0)
    qp = checker.open_qp(QPType.RC)
    qp.bring_to(S.RTS)
    qp.query()
    assert [d.rule_id for d in checker.known] == ["query.cap.as_created"]
    checker.close()


def test_a_create_quirk_covers_what_create_returned() -> None:
    """A profile entry scoped to the create verb knows a short write-back: the QP is opened
    and used as usual, the record names the create step."""
    quirk = Quirk("fake.short_cap", ("create.cap.at_least",), "planted", ("test",),
                  verbs=("create",))
    checker = Checker(FakeDevice(["cap_below_asked"]), quirks=Quirks([quirk]),
                      settle_window=0.0, must_wait=0.0)
    qp = checker.open_qp(QPType.RC)
    qp.bring_to(S.RTS)
    [known] = checker.known
    assert (known.rule_id, known.verb, known.steps[0]["verb"]) == (
        "create.cap.at_least", "create", "create")
    checker.close()


def test_unknown_query_difference_raises() -> None:
    checker = Checker(FakeDevice(["query_cap_differs"]), settle_window=0.0, must_wait=0.0)
    with pytest.raises(DivergenceError):
        checker.open_qp(QPType.RC).bring_to(S.INIT)
    checker.close()


def test_model_functions() -> None:
    asked = dict(ASKED_CAP)
    assert returned.created_cap(asked, asked) == []
    short = returned.created_cap(asked, {**asked, "max_recv_sge": 0})
    assert [(r.id, f) for r, f, _, _ in short] == [("create.cap.at_least", "max_recv_sge")]
    assert returned.queried_cap(asked, asked, {**asked, "max_inline_data": 512}) == []
    assert returned.cqe_short(64, {"send": 64, "recv": 127}) == []
    assert returned.cur_state_allowed(S.RTS) == {int(S.RTS), int(S.RESET)}


def test_wire_carries_them() -> None:
    made = Created(dict(ASKED_CAP), {**ASKED_CAP, "max_send_wr": 128}, 64, {"send": 64})
    assert wire.to_created(wire.created(made)) == made
    assert wire.to_created(wire.created(None)) is None
    q = QueryResult(S.RTS, False, {"cur_qp_state": 3}, dict(ASKED_CAP))
    assert wire.to_query_result(wire.query_result(q)) == q
    old = wire.query_result(q)[:3]  # an executor older than the cap
    assert wire.to_query_result(old).cap is None


class _Cap:
    """A stand-in for pyverbs' QPCap (the five ibv_qp_cap properties)."""

    max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data = 64, 65, 1, 2, 0


class _InitWithCapOnly:
    """A QPInitAttrEx-like object: no max_* shortcuts, a cap."""

    cap = _Cap()


class _CQ:
    def __str__(self) -> str:  # as pyverbs' CQ.__str__ prints it
        return "CQ\nHandle                : 3                   \nCQEs                  : 127 \n"


def test_the_adapter_reads_what_pyverbs_shows() -> None:
    """pyverbs_compat's readers (the guest's adapter, tests/test_vm_fields.py covers pyverbs
    itself): the cap from the shortcuts or from .cap, the cqe from the CQ's str()."""
    from qpconform.adapters import pyverbs_compat as pc

    want = {"max_send_wr": 64, "max_recv_wr": 65, "max_send_sge": 1, "max_recv_sge": 2,
            "max_inline_data": 0}
    assert pc.init_cap(_Cap()) == want
    assert pc.init_cap(_InitWithCapOnly()) == want
    assert pc.init_cap(object()) == {}
    assert pc.cq_cqe(_CQ()) == 127
    assert pc.cq_cqe(object()) is None


@pytest.mark.parametrize("faults", [(), ("cur_state_stale",)], ids=["clean", "stale"])
def test_the_cur_state_suite_case_finds_a_stale_cur_qp_state(faults: tuple[str, ...]) -> None:
    """suites/test_transitions.py's CUR_STATE case on the fake: clean it passes; with a
    cur_qp_state left at the state before the last modify (RTS, read in RESET) it fails
    under query.cur_qp_state, so the ci profile meets the rxe 6.1 quirk every run."""
    case = transitions_suite.test_query_after_a_modify_that_carried_cur_state
    log = RuleLog()
    checker = Checker(FakeDevice(faults), recorder=log, sink=log, settle_window=0.0,
                      must_wait=0.0)
    try:
        if not faults:
            case(checker, QPType.RC, [QPType.RC], LINUX)
            assert log.rules[returned.CUR_STATE.id] > 0
            return
        with pytest.raises(DivergenceError, match=r"query\.cur_qp_state"):
            case(checker, QPType.RC, [QPType.RC], LINUX)
    finally:
        checker.close()
