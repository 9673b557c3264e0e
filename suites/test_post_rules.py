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
from qpconform.engine.lone import Checker
from suites import steps
from suites.cases import Group, post_groups


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One test per (QP type, state, verb), for the session's model variant."""
    if "group" in metafunc.fixturenames:
        steps.parametrize(metafunc, "group", post_groups(steps.collection_variant(metafunc.config)))


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
    steps.run_group(checker, group, steps.run_post_case)
