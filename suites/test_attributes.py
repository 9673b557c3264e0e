"""Attribute values at and beyond their limits, each at the transition that takes them.

Values relative to device limits (ports, P_Key and GID tables, MTU, RD atomic depth) are
resolved against the device's caps at run time; a value the C field cannot hold is skipped.
"""

from collections.abc import Sequence

import pytest

from models.enums import QPType
from models.variant import Variant
from qpconform.engine.device import Device
from qpconform.engine.lone import Checker
from suites import steps
from suites.cases import Group, attribute_groups


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One test per boundary value, for the session's model variant."""
    if "group" in metafunc.fixturenames:
        steps.parametrize(
            metafunc, "group", attribute_groups(steps.collection_variant(metafunc.config))
        )


def test_attribute(
    group: Group,
    checker: Checker,
    device: Device,
    qp_types: Sequence[QPType],
    variant: Variant,
    request: pytest.FixtureRequest,
) -> None:
    """modify_qp with one boundary value (all else valid) matches the model."""
    steps.check_session(group, qp_types, variant, steps.collection_variant(request.config))
    steps.run_group(
        checker,
        group,
        lambda qp, case: steps.run_modify_case(qp, device, case),
        caps=device.caps,
        reuse_refused=True,
    )
