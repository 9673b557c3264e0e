"""post_send / post_recv in each state, and the fate of the WR afterwards.

After the post the QP goes on to RTS (if it was before it and a modify can reach RTS: not on
iWARP) and then to ERR: a refused WR must never complete (a failed post leaves no trace), an
accepted one must be flushed.

Then two post_sends on a fresh QP in RESET, INIT and RTR (where reachable), straight to ERR
where the table allows: a provider that refuses the first send but keeps it may accept
the second, whose flush the model then owes (test_sends_then_err).
"""

from collections.abc import Sequence

import pytest

from models.enums import QPType
from models.variant import Variant
from qpconform.engine.device import Device
from qpconform.engine.lone import Checker
from suites import steps
from suites.cases import Group, post_groups, sends_then_err_groups


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One test per (QP type, state, verb), and per (QP type, state before RTS) for two
    sends then ERR, for the session's model variant."""
    variant = steps.collection_variant(metafunc.config)
    if "group" in metafunc.fixturenames:
        steps.parametrize(metafunc, "group", post_groups(variant))
    if "sends_group" in metafunc.fixturenames:
        steps.parametrize(metafunc, "sends_group", sends_then_err_groups(variant))


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


def test_sends_then_err(
    sends_group: Group,
    checker: Checker,
    qp_types: Sequence[QPType],
    variant: Variant,
    request: pytest.FixtureRequest,
) -> None:
    """Two sends in a state before RTS, then ERR: each refused or flushed as the model says."""
    steps.check_session(sends_group, qp_types, variant, steps.collection_variant(request.config))
    steps.run_group(checker, sends_group, steps.run_sends_then_err)
