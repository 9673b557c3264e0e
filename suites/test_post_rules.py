"""post_send / post_recv in each state, and the fate of the WR afterwards.

After the post the QP goes on to RTS (if it was before it and a modify can reach RTS: not on
iWARP) and then to ERR: a refused WR must never complete (a failed post leaves no trace), an
accepted one must be flushed.
"""

from collections.abc import Sequence

import pytest

from models.enums import QPType
from models.variant import Variant
from qpconform.engine.device import Device
from qpconform.engine.lone import CheckedQP, Checker
from suites import steps
from suites.cases import Case, Group, after_post_path, post_groups, reachable_states


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One test per (QP type, state, verb), for the session's model variant."""
    if "group" in metafunc.fixturenames:
        steps.parametrize(metafunc, "group", post_groups(steps.collection_variant(metafunc.config)))


def _post_and_follow(qp: CheckedQP, case: Case) -> None:
    steps.bring_to(qp, case.cur)
    getattr(qp, case.kind)()  # post_send / post_recv: the checker picks the wr_id
    qp.settle()
    for nxt in after_post_path(case.cur, reachable_states(qp.model.table, qp.qp_type)):
        steps.step_to(qp, nxt)
    qp.settle()


def test_post(
    group: Group,
    checker: Checker,
    device: Device,
    qp_types: Sequence[QPType],
    variant: Variant,
    request: pytest.FixtureRequest,
) -> None:
    """A post in group.cur is accepted or refused as the model says, and its WR's fate too."""
    steps.check_session(group, qp_types, variant, steps.collection_variant(request.config))
    steps.run_group(checker, group, _post_and_follow)
