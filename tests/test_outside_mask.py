"""What the mask leaves out must not matter (issue 53): the gate can fail, and stays quiet.

The planted fault `state_from_unmasked_qp_state` (tests/fake_device.py) table-checks a
modify without STATE as cur -> attr.qp_state, as a driver reading qp_state outside the mask
would. The legal attribute-only cases of the transition sweep catch it under
`linux.modify.outside_mask_ignored`, whichever non-plain fill the modify carries; the plain
fill (qp_state = the current state) hides it, which is why every modify is filled. A
correct fake stays clean under every fill, and a divergence the reading does not explain
keeps its own rule.
"""

from __future__ import annotations

import pytest

from models.enums import Attr, QPState, QPType
from models.outside_mask import OUTSIDE_MASK
from qpconform.engine import unmasked
from qpconform.engine.judge import DivergenceError
from qpconform.engine.lone import Checker
from qpconform.engine.records import DivergenceList
from suites import cases, steps
from tests.fake_device import FakeDevice

FAULT = "state_from_unmasked_qp_state"
S = QPState
FILLS = {
    **{c: unmasked.uniform(c) for c in unmasked.CHOICES},
    "mixed": dict(zip(unmasked.FIELDS, [unmasked.ZERO, unmasked.WILD] * 9, strict=False)),
}


def _checker(faults: list[str]) -> tuple[Checker, DivergenceList]:
    found = DivergenceList()
    return Checker(FakeDevice(faults), settle_window=0.0, must_wait=0.0, sink=found), found


def _attribute_only(checker: Checker, qp_type: QPType, cur: QPState, fill: unmasked.Fill):
    qp = checker.open_qp(qp_type)
    qp.bring_to(cur)
    bit = Attr.QKEY if qp_type == QPType.UD else Attr.ACCESS_FLAGS
    return qp, qp.modify(qp.values.attrs_for(bit), bit, fill)


@pytest.mark.parametrize("fill", sorted(FILLS))
@pytest.mark.parametrize("cur", [S.INIT, S.RTS], ids=["INIT", "RTS"])
def test_the_fault_is_caught_by_every_fill_but_plain(fill: str, cur: QPState) -> None:
    checker, found = _checker([FAULT])
    if fill == unmasked.PLAIN:  # qp_state = cur: the fault checks cur -> cur, as it should
        _qp, res = _attribute_only(checker, QPType.RC, cur, FILLS[fill])
        assert res.accepted and found.items == []
        return
    with pytest.raises(DivergenceError) as caught:
        _attribute_only(checker, QPType.RC, cur, FILLS[fill])
    record = caught.value.record
    assert record.rule_id == OUTSIDE_MASK.id and record.rule_kind == "must"
    assert record.kind == "outcome"
    wanted = unmasked.value("qp_state", int(cur), FILLS[fill]["qp_state"])
    assert record.steps[-1]["unmasked"]["qp_state"] == wanted  # the fill: a reproducer sets it


@pytest.mark.parametrize("fill", sorted(FILLS))
@pytest.mark.parametrize("qp_type", [QPType.RC, QPType.UC, QPType.UD])
def test_a_correct_fake_ignores_every_fill(fill: str, qp_type: QPType) -> None:
    checker, found = _checker([])
    for cur in (S.INIT, S.RTS, S.SQD):
        qp, res = _attribute_only(checker, qp_type, cur, FILLS[fill])
        assert res.accepted and qp.model.state == cur
        for target in (S.ERR, S.RESET):  # and every move, its rest filled alike
            qp.modify(*qp.values.transition_attrs(target), FILLS[fill])
    assert found.items == []


def test_the_transition_sweep_catches_it_and_a_correct_fake_passes() -> None:
    groups = [g for g in cases.transition_groups("linux")  # the fake's types: no XRC
              if g.id.endswith("attr-only-ok") and g.qp_type in (QPType.RC, QPType.UC, QPType.UD)]
    assert {g.cur for g in groups if g.qp_type == QPType.RC} == {S.INIT, S.RTS, S.SQD}
    for faults in ([], [FAULT]):
        device = FakeDevice(faults)
        checker = Checker(device, settle_window=0.0, must_wait=0.0, sink=DivergenceList())
        failed = []
        for group in groups:
            try:
                steps.run_group(checker, group,
                                lambda qp, case, d=device: steps.run_modify_case(qp, d, case))
            except pytest.fail.Exception as exc:
                failed.append(str(exc))
        if not faults:
            assert failed == []
            continue
        assert len(failed) == len(groups), failed  # every legal attribute-only case
        assert all(OUTSIDE_MASK.id in f for f in failed)


def test_a_divergence_the_reading_does_not_explain_keeps_its_rule() -> None:
    """refuse_sqd_exit refuses SQD->RESET (STATE in the mask): nothing outside the mask
    explains it, so the transition's rule stays."""
    checker, _found = _checker(["refuse_sqd_exit"])
    qp = checker.open_qp(QPType.RC)
    qp.bring_to(S.SQD)
    with pytest.raises(DivergenceError) as caught:
        qp.modify(*qp.values.transition_attrs(S.RESET), unmasked.uniform(unmasked.ZERO))
    assert caught.value.record.rule_id.startswith("linux.transition.RC.SQD->RESET")


def test_the_drawn_fill_shrinks_to_plain_and_reaches_every_choice() -> None:
    from hypothesis import find

    from qpconform.machines.fills import FILLS

    assert find(FILLS, lambda f: True) == unmasked.uniform(unmasked.PLAIN)
    for choice in unmasked.CHOICES:  # each choice of a field is drawn, alone or mixed
        assert find(FILLS, lambda f, c=choice: f["timeout"] == c and f["qp_state"] != c)


def test_the_sweeps_fill_is_never_plain_and_the_same_for_the_same_modify() -> None:
    keyed = unmasked.Keyed()
    seen = set()
    for qp_type in (QPType.RC, QPType.UC, QPType.UD):
        for state in S:
            for mask in (Attr.STATE, Attr.ACCESS_FLAGS, Attr.QKEY, Attr.STATE | Attr.AV):
                fill = keyed(qp_type, state, mask)
                assert fill == keyed(qp_type, state, mask)
                assert set(fill.values()) != {unmasked.PLAIN}
                seen.add(tuple(sorted(fill.items())))
    assert len(seen) == 4  # zero, other, wild and the mix all occur
