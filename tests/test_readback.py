"""Attributes read back through query_qp: the model's expectation, and the sweep and the
stateful machine catching a driver that stores a value in the wrong field or reads a field
outside the mask (planted in the fake device)."""

from __future__ import annotations

import pytest

from models.enums import Attr, QPState, QPType
from models.qp import QPModel
from models.readback import READBACK, READBACK_ROUNDED, Stored, direction
from qpconform.engine.lone import Checker
from qpconform.engine.records import DivergenceList
from suites import steps
from suites.cases import transition_groups
from tests.fake_device import FakeDevice

S = QPState


def test_a_set_field_reads_back_as_set_and_a_wide_one_maybe_masked() -> None:
    stored = Stored()
    stored.store({"timeout": 40, "pkey_index": 0, "max_rd_atomic": 3}, Attr.TIMEOUT |
                 Attr.PKEY_INDEX | Attr.MAX_QP_RD_ATOMIC)
    assert stored.fields["pkey_index"].values == {0}
    assert stored.fields["pkey_index"].rule is READBACK
    assert stored.fields["timeout"].values == {40, 40 & 31}
    assert stored.fields["max_rd_atomic"].values == {3, 2, 4}
    assert stored.fields["max_rd_atomic"].rule is READBACK_ROUNDED
    assert stored.differences({"timeout": 8, "pkey_index": 0, "max_rd_atomic": 4}) == []
    assert stored.differences({"timeout": 9, "pkey_index": 0, "max_rd_atomic": 1}) == [
        ("timeout", stored.fields["timeout"], 9),
        ("max_rd_atomic", stored.fields["max_rd_atomic"], 1),
    ]


def test_fields_outside_the_mask_are_not_stored() -> None:
    stored = Stored()
    stored.store({"timeout": 14, "qkey": 5}, Attr.TIMEOUT)
    assert set(stored.fields) == {"timeout"}


def test_the_model_forgets_on_reset_and_a_refused_modify_changes_nothing() -> None:
    model = QPModel(QPType.UD)
    exp = model.modify({"qp_state": 1, "pkey_index": 0, "port_num": 1, "qkey": 7},
                       Attr.STATE | Attr.PKEY_INDEX | Attr.PORT | Attr.QKEY)
    model.apply(exp, True)
    assert model.stored.fields["qkey"].values == {7}
    bad = model.modify({"qp_state": 3, "qkey": 9}, Attr.STATE | Attr.QKEY)  # INIT->RTS
    model.apply(bad, False)
    assert model.stored.fields["qkey"].values == {7}
    reset = model.modify({"qp_state": 0}, Attr.STATE)
    model.apply(reset, True)
    assert model.stored.fields == {}


@pytest.mark.parametrize(
    ("fault", "rule"),
    [("store_in_wrong_field", "attr.readback"), ("read_unmasked_field", "attr.readback.unmasked")],
)
def test_the_transition_sweep_catches_a_driver_that_stores_wrongly(fault: str, rule: str) -> None:
    device = FakeDevice([fault])
    checker = Checker(device, settle_window=0.0, must_wait=0.0, sink=DivergenceList())
    failures = []
    for group in transition_groups("linux"):
        if group.qp_type != QPType.RC:
            continue
        try:
            steps.run_group(checker, group, lambda qp, case: steps.run_modify_case(qp, device,
                                                                                   case))
        except pytest.fail.Exception as exc:
            failures.append(str(exc))
    assert failures, "the sweep missed the planted fault"
    assert all(rule in f for f in failures), failures[0]
    clean = FakeDevice()
    checker = Checker(clean, settle_window=0.0, must_wait=0.0, sink=DivergenceList())
    for group in transition_groups("linux"):
        if group.qp_type == QPType.RC:
            steps.run_group(checker, group, lambda qp, case: steps.run_modify_case(qp, clean,
                                                                                   case))


@pytest.mark.parametrize(
    ("set_to", "reported", "fine"),
    [
        (0x3, 0x2, True),    # mlx5: only the remote bits it holds (LOCAL_WRITE dropped)
        (0x3, 0x7, True),    # bnxt_re: LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ forced on
        (0x1, 0x3, True),    # irdma: LOCAL_WRITE and REMOTE_WRITE from one bit
        (0xE, 0x6, True),    # no atomics (irdma)
        (0x13, 0x3, True),   # MW_BIND dropped
        (0x3, 0x3, True),
        (0x6, 0x2, False),   # REMOTE_READ set and lost
        (0x3, 0x1, False),   # REMOTE_WRITE set and lost
        (0x3, 0x23, False),  # a bit beyond the QP access bits appeared
    ],
)
def test_access_flags_read_back_keeps_the_remote_bits_the_rest_is_the_drivers(
    set_to: int, reported: int, fine: bool
) -> None:
    from models.enums import Attr
    from models.readback import READBACK_ACCESS, Stored

    stored = Stored()
    stored.store({"qp_access_flags": set_to}, Attr.ACCESS_FLAGS)
    found = stored.differences({"qp_access_flags": reported})
    assert (found == []) is fine, found
    if found:
        name, exp, seen = found[0]
        assert exp.rule is READBACK_ACCESS and seen == reported
        assert f"{set_to & 0x6:#x} set" in exp.text(name)


def test_access_flags_with_every_bit_set_stay_cheap() -> None:
    from models.enums import Attr
    from models.readback import Stored

    stored = Stored()
    stored.store({"qp_access_flags": 0xFFFFFFFF}, Attr.ACCESS_FLAGS)
    assert len(stored.fields["qp_access_flags"].values) <= 64


def test_a_read_back_size_says_which_side_of_the_set_value_it_fell() -> None:
    """A quirk may cover a driver that caps a value (read=lower) without covering one that
    inflates it; access flags are bits, not sizes, and have no side."""
    stored = Stored()
    stored.store({"max_rd_atomic": 12, "qp_access_flags": 2},
                 Attr.MAX_QP_RD_ATOMIC | Attr.ACCESS_FLAGS)
    rd, access = stored.fields["max_rd_atomic"], stored.fields["qp_access_flags"]
    assert direction(rd, 4) == ["read=lower"]  # 12 may read 8 or 16 (rounded), not 4
    assert direction(rd, 32) == ["read=higher"]
    assert direction(access, 0) == []
