"""Every (current, next) state pair of every QP type: exact, missing, extra and CUR_STATE masks.

Cases come from suites/cases.py (the model alone); the checker compares each modify with the
model. Extra-bit and wrong-CUR_STATE variants of a pair run as one test, each on its own QP.
"""

from collections.abc import Sequence

import pytest

from models.enums import QPType
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
