"""Known hazards: a verb that would crash the machine under test is not sent, and says so.

rxe on Linux 6.1 corrupts kernel memory when a modify grows max_dest_rd_atomic
(fixtures/quirks/rxe.toml rxe.rd_atomic_grow_corrupts_memory). The fake driver `Oops`
below plants that bug: such a modify loses the device. On 6.1 the engine must never send
it, and must record it as a known hazard (not a pass); on any other kernel, and for every
modify that does not grow the value, the verb is sent and checked as always.
"""

from __future__ import annotations

import pytest

from fixtures.selection import QUIRKS_DIR
from models.enums import Attr, QPState, QPType
from qpconform.engine.device import DeviceLost
from qpconform.engine.hazards import CONDITIONS, HazardAvoided, grows_max_dest_rd_atomic
from qpconform.engine.judge import DivergenceError
from qpconform.engine.lone import CheckedQP, Checker
from qpconform.engine.quirk_schema import HAZARDS
from qpconform.engine.quirks import Quirks
from qpconform.engine.records import DivergenceList
from qpconform.machines.lone import MachineConfig, QPMachine
from suites import steps
from suites.cases import Case, Group
from tests.fake_device import Behaviour, FakeDevice
from tests.oops_fake import Oops, RefusesSqdToSqd

S = QPState
K61 = "6.1.0-50-amd64"
K612 = "6.12.117+deb13-amd64"
HAZARD = "rxe.rd_atomic_grow_corrupts_memory"
MAX_DEST = Attr.MAX_DEST_RD_ATOMIC


def checker(kernel: str, behaviour: Behaviour | None = None) -> tuple[Checker, FakeDevice]:
    device = FakeDevice(kernel=kernel, behaviour=behaviour or Oops())
    quirks = Quirks.load(QUIRKS_DIR / "rxe.toml").for_run({"kernel": kernel, "rdma_core": "44"})
    return Checker(device, quirks=quirks, sink=DivergenceList(), settle_window=0.0,
                   must_wait=0.0), device


def set_max_dest(qp: CheckedQP, nxt: QPState, value: int) -> None:
    attrs, mask = qp.values.transition_attrs(nxt)
    attrs["max_dest_rd_atomic"] = value
    qp.modify(attrs, mask | MAX_DEST)


def sqd_to_sqd_with(kernel: str, value: int, behaviour: Behaviour | None = None) -> Checker:
    """A fresh RC QP (max_dest_rd_atomic 1 at RTR) to SQD, then SQD->SQD with `value`."""
    check, _ = checker(kernel, behaviour)
    try:
        qp = check.open_qp(QPType.RC)
        qp.bring_to(S.SQD)
        set_max_dest(qp, S.SQD, value)
        check.settle()
    finally:
        check.close()
    return check


def test_every_hazard_name_has_its_condition() -> None:
    assert set(CONDITIONS) == set(HAZARDS)


def test_a_growing_modify_is_not_sent_on_6_1_and_is_recorded_as_a_known_hazard() -> None:
    with pytest.raises(HazardAvoided, match=HAZARD) as caught:
        sqd_to_sqd_with(K61, 16)
    record = caught.value.record
    assert record.kind == "hazard" and record.known_quirk == HAZARD
    assert record.attrs["max_dest_rd_atomic"] == 16
    assert record.observed.endswith("(the QP holds max_dest_rd_atomic=1)"), record.observed


def test_on_6_12_the_same_modify_is_sent() -> None:
    """Outside the entry's range the verb goes to the device: here the planted oops."""
    with pytest.raises(DeviceLost):
        sqd_to_sqd_with(K612, 16)


@pytest.mark.parametrize("value", [0, 1])
def test_a_modify_that_does_not_grow_is_sent_and_checked(value: int) -> None:
    check = sqd_to_sqd_with(K61, value)
    assert [d.kind for d in check.known] == []
    qp_steps = [s for s in check.qps[0].steps] if check.qps else []
    assert not qp_steps or qp_steps[-1]["attrs"].get("max_dest_rd_atomic") == value


def test_a_new_qps_first_value_is_sent() -> None:
    check, device = checker(K61)
    try:
        set_max_dest_after_init = check.open_qp(QPType.RC)
        set_max_dest_after_init.bring_to(S.INIT)
        set_max_dest(set_max_dest_after_init, S.RTR, 16)
        assert set_max_dest_after_init.model.state == S.RTR
        assert device.qps[0].private["max_dest_rd_atomic"] == 16
    finally:
        check.close()


def test_what_the_qp_holds_survives_reset() -> None:
    """rxe_qp_reset() keeps the array: after RESET a bigger value at RTR still grows it."""
    check, _ = checker(K61)
    try:
        qp = check.open_qp(QPType.RC)
        qp.bring_to(S.RTR)
        qp.bring_to(S.RESET)
        qp.bring_to(S.INIT)
        with pytest.raises(HazardAvoided):
            set_max_dest(qp, S.RTR, 8)
        assert qp.model.state == S.INIT  # nothing was sent: the model did not move
    finally:
        check.close()


@pytest.mark.parametrize(
    ("state", "attrs", "mask", "holds"),
    [
        (S.SQD, {"max_dest_rd_atomic": 16}, Attr.STATE | MAX_DEST, True),
        (S.SQD, {"max_dest_rd_atomic": 16}, MAX_DEST, True),  # SQD->SQD without STATE
        (S.RTS, {"max_dest_rd_atomic": 16}, Attr.STATE | MAX_DEST, False),  # core refuses
        (S.SQD, {"max_dest_rd_atomic": 16}, Attr.STATE, False),  # not in the mask
        (S.SQD, {"max_dest_rd_atomic": 2}, Attr.STATE | MAX_DEST, True),
        (S.SQD, {"max_dest_rd_atomic": 1}, Attr.STATE | MAX_DEST, False),
        # INIT->RTR after a RESET (rxe keeps its array); with CUR_STATE the core refuses it
        (S.INIT, {"max_dest_rd_atomic": 16, "qp_state": int(S.RTR)},
         Attr.STATE | MAX_DEST | Attr.CUR_STATE | Attr.AV | Attr.PATH_MTU | Attr.DEST_QPN
         | Attr.RQ_PSN | Attr.MIN_RNR_TIMER, False),
        (S.INIT, {"max_dest_rd_atomic": 16, "qp_state": int(S.RTR)},
         Attr.STATE | MAX_DEST | Attr.AV | Attr.PATH_MTU | Attr.DEST_QPN | Attr.RQ_PSN
         | Attr.MIN_RNR_TIMER, True),
    ],
)
def test_the_condition_is_the_driver_storing_a_bigger_value(
    state: QPState, attrs: dict[str, int], mask: Attr, holds: bool
) -> None:
    given = {"qp_state": int(state), "cur_qp_state": int(state), **attrs}
    assert grows_max_dest_rd_atomic(
        {"max_dest_rd_atomic": 1}, state, given, mask, QPType.RC) is holds
    assert not grows_max_dest_rd_atomic({}, state, given, mask, QPType.RC)  # never set


@pytest.mark.parametrize("kernel", [K61, K612])
def test_a_different_bug_of_the_same_modify_is_still_reported(kernel: str) -> None:
    """Near miss: a driver refusing SQD->SQD with max_dest_rd_atomic; on 6.1 with a value
    that does not grow (sent), on 6.12 with one that does (sent too)."""
    with pytest.raises(DivergenceError) as caught:
        sqd_to_sqd_with(kernel, 1 if kernel == K61 else 16, RefusesSqdToSqd())
    assert caught.value.record.known_quirk is None
    assert caught.value.record.rule_id == "linux.transition.RC.SQD->SQD"


def sqd_group(*values: int) -> Group:
    """Cases SQD->SQD setting max_dest_rd_atomic to each value (the QP holds 1)."""
    cases = tuple(
        Case(f"RC-SQD-SQD-max_dest_rd_atomic-{v}", QPType.RC, S.SQD, S.SQD, "modify",
             Attr.STATE | MAX_DEST, (("max_dest_rd_atomic", v),))
        for v in values
    )
    return Group("RC-SQD-SQD-max_dest", "attributes", QPType.RC, S.SQD, S.SQD, cases)


def run_sweep_group(group: Group) -> None:
    check, device = checker(K61)
    try:
        steps.run_group(check, group, lambda qp, case: steps.run_modify_case(qp, device, case))
    finally:
        check.close()
    assert device.live == []


def test_a_sweep_group_whose_every_case_is_avoided_is_a_skip_naming_the_hazard() -> None:
    with pytest.raises(pytest.skip.Exception, match=f"{HAZARD}.*and 1 more"):
        run_sweep_group(sqd_group(16, 8))


def test_a_sweep_group_with_a_case_left_to_check_runs_it() -> None:
    run_sweep_group(sqd_group(16, 1))  # no skip: the case with 1 ran (and conformed)


class Scripted:
    """A machine rule's `data`: each draw answered by its label."""

    def __init__(self, **answers: object) -> None:
        self.answers = answers

    def draw(self, strategy: object, label: str) -> object:
        return self.answers[label]


def test_the_lone_machines_rules_skip_an_avoided_modify_and_go_on() -> None:
    """A machine rule whose modify a hazard keeps unsent does nothing (Hypothesis must not
    see an error): a drawn boundary value that grows the QP's, and a bring-up after RESET
    whose valid value grows the 0 the QP took before. On 6.1 the oops is never reached."""
    device = FakeDevice(kernel=K61, behaviour=Oops())
    quirks = Quirks.load(QUIRKS_DIR / "rxe.toml").for_run({"kernel": K61, "rdma_core": "44"})
    machine = QPMachine(device, [QPType.RC], "linux", quirks,
                        MachineConfig(settle_window=0.0, must_wait=0.0, park=False))
    try:
        qp = machine.checker.open_qp(QPType.RC)
        qp.bring_to(S.SQD)
        grow = Scripted(boundary=True, field="max_dest_rd_atomic", max_dest_rd_atomic=16,
                        unmasked="valid")
        machine._modify(qp, S.SQD, Attr.STATE | MAX_DEST, grow, S.SQD)
        assert qp.model.state == S.SQD
        qp.bring_to(S.RESET)
        qp.bring_to(S.INIT)
        to_zero = Scripted(boundary=True, field="max_dest_rd_atomic", max_dest_rd_atomic=0,
                           unmasked="valid")
        machine._modify(qp, S.RTR, qp.values.transition_attrs(S.RTR)[1], to_zero, S.INIT)
        qp.bring_to(S.RESET)
        machine.bring_to(qp=qp, state=S.RTS)  # INIT->RTR with 1 grows the 0: not sent
        assert qp.model.state == S.INIT
        machine.drain(qp=qp, notify=True)  # the same bring-up, inside the drain rule
    finally:
        machine.teardown()
    hazards = [d for d in machine.checker.known if d.kind == "hazard"]
    assert [d.attrs["max_dest_rd_atomic"] for d in hazards] == [16, 1, 1]
    assert {d.known_quirk for d in hazards} == {HAZARD}
    assert device.live == []


HAZARD_ENTRY = """
[[quirk]]
id = "x.grow"
rule = "*"
reason = "r"
evidence = ["e"]
{extra}
"""


@pytest.mark.parametrize(
    "extra",
    [
        'hazard = "grows_max_dest_rd_atomic"\nverbs = ["modify"]',  # no kinds
        'hazard = "grows_max_dest_rd_atomic"\nkinds = ["hazard"]',  # no verbs
        'kinds = ["hazard"]\nverbs = ["modify"]',  # no hazard
        'hazard = "grows_max_dest_rd_atomic"\nkinds = ["hazard", "outcome"]\nverbs = ["modify"]',
    ],
)
def test_a_hazard_entry_is_a_hazard_and_nothing_else(extra: str) -> None:
    with pytest.raises(ValueError, match="hazard"):
        Quirks.from_toml(HAZARD_ENTRY.format(extra=extra))


def test_an_unknown_hazard_name_lists_the_known_ones() -> None:
    extra = 'hazard = "grows"\nkinds = ["hazard"]\nverbs = ["modify"]'
    with pytest.raises(ValueError, match="grows_max_dest_rd_atomic"):
        Quirks.from_toml(HAZARD_ENTRY.format(extra=extra))


def test_a_hazard_no_verb_met_is_unseen_not_stale() -> None:
    """No growing modify in a run is no sign of a fix: nothing was kept unsent."""
    quirks = Quirks.from_toml(HAZARD_ENTRY.format(
        extra='hazard = "grows_max_dest_rd_atomic"\nkinds = ["hazard"]\nverbs = ["modify"]'))
    assert quirks.stale() == []
    assert [q.id for q in quirks.unseen()] == ["x.grow"]
    assert "no verb of this run met its condition" in quirks.why_unseen(quirks.quirks[0])
