"""Every (current, next) state pair of every QP type: exact, missing, extra and CUR_STATE masks.

Cases come from suites/cases.py (the model alone); the checker compares each modify with the
model. Extra-bit and wrong-CUR_STATE variants of a pair run as one test, each on its own QP.
"""

from collections.abc import Sequence

import pytest

from models.enums import Attr, QPState, QPType
from models.reach import reachable_states
from models.variant import Variant
from qpconform.engine.device import Device
from qpconform.engine.lone import Checker
from suites import steps
from suites.cases import Group, transition_groups


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One test per case group, for the session's model variant."""
    if "group" in metafunc.fixturenames:
        steps.parametrize(
            metafunc, "group", transition_groups(steps.collection_variant(metafunc.config))
        )


def test_transition(
    group: Group,
    checker: Checker,
    device: Device,
    qp_types: Sequence[QPType],
    variant: Variant,
    request: pytest.FixtureRequest,
) -> None:
    """modify_qp from group.cur to group.nxt with the group's masks matches the model."""
    steps.check_session(group, qp_types, variant, steps.collection_variant(request.config))
    steps.run_group(
        checker, group, lambda qp, case: steps.run_modify_case(qp, device, case),
        reuse_refused=True,
    )


def test_types_the_variant_lacks_are_refused(checker: Checker, variant: Variant) -> None:
    """create_qp of each QP type the variant has none of is refused (iwarp: RC only,
    iwarp.qp_type.rc_only), whatever the other suites then skip for that type."""
    absent = [t for t in QPType if t not in variant.table.qp_types]
    if not absent:
        pytest.skip(f"the {variant.name} variant has QPs of every type: no create to refuse")
    for qp_type in absent:
        checker.check_absent_type(qp_type)


@pytest.mark.parametrize("qp_type", [QPType.RC, QPType.UC, QPType.UD], ids=lambda t: t.name)
def test_drain_after_a_refused_send_and_a_reset(
    checker: Checker, qp_type: QPType, qp_types: Sequence[QPType], variant: Variant
) -> None:
    """A send refused below RTS changes nothing (a failed verb), not even after a RESET:
    the QP brought up again, RTS->SQD with EN_SQD_ASYNC_NOTIFY raises SQ_DRAINED
    (ibta.sqd.drained_event). Found by the lone machine: rxe 6.12 keeps a stale SQ index
    there (quirk rxe.reset_leaves_stale_sq_index_drain_never_ends); a case of its own, so
    the ci profile provokes it whatever the machine's draws."""
    if qp_type not in qp_types:
        pytest.skip(f"{qp_type.name}: not selected, or not supported by the device")
    if QPState.SQD not in reachable_states(variant.table, qp_type):
        pytest.skip(f"the {variant.name} variant's {qp_type.name} QPs reach no SQD by modify")
    qp = checker.open_qp(qp_type)
    qp.bring_to(QPState.INIT)
    qp.post_send()
    qp.settle()
    qp.bring_to(QPState.RESET)
    qp.bring_to(QPState.RTS)
    mask = Attr.STATE | Attr.EN_SQD_ASYNC_NOTIFY
    attrs = qp.values.attrs_for(mask, QPState.SQD)
    attrs["en_sqd_async_notify"] = 1
    qp.modify(attrs, mask)
    qp.settle()


@pytest.mark.parametrize("qp_type", [QPType.RC, QPType.UC, QPType.UD], ids=lambda t: t.name)
def test_query_after_a_modify_that_carried_cur_state(
    checker: Checker, qp_type: QPType, qp_types: Sequence[QPType], variant: Variant
) -> None:
    """RTR->RTS with IBV_QP_CUR_STATE, then RTS->RESET, then query_qp: cur_qp_state is the
    state the QP is in, or RESET unwritten (query.cur_qp_state). Found by the lone machine:
    rxe 6.1 reports the qp_state of the last modify that carried CUR_STATE (quirk
    rxe.query_cur_qp_state_stale); a case of its own, so the ci profile provokes it
    whatever the machine's draws."""
    if qp_type not in qp_types:
        pytest.skip(f"{qp_type.name}: not selected, or not supported by the device")
    entry = variant.table.lookup(qp_type, QPState.RTR, QPState.RTS)
    if entry is None or not entry.optional & Attr.CUR_STATE:
        pytest.skip(f"the {variant.name} variant's {qp_type.name} RTR->RTS takes no CUR_STATE")
    qp = checker.open_qp(qp_type)
    qp.bring_to(QPState.RTR)
    attrs, mask = qp.values.transition_attrs(QPState.RTS)
    attrs["cur_qp_state"] = int(QPState.RTR)
    qp.modify(attrs, mask | Attr.CUR_STATE)
    qp.bring_to(QPState.RESET)
    qp.query()
    qp.settle()
