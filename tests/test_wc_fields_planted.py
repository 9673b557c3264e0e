"""Self-tests of the ibv_wc fields a successful receive reports (issue 45 item 1): byte_len,
IBV_WC_WITH_IMM in wc_flags and a UD receive's src_qp. A clean fake pair passes; each
planted fault of tests/fake_pair.py (WC_FIELD_FAULTS) is caught with its rule, by a
deterministic scenario and by the traffic machine; the "may" rules' other choice (a UD
byte_len without the GRH's 40 bytes, a WRITE with immediate's byte_len 0) is a near miss.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from models.enums import QPType, WCOpcode, WCStatus
from models.operations import (
    GRH_LEN,
    MESSAGE_LEN,
    UD_WC_BYTE_LEN,
    UD_WC_SRC_QP,
    WC_BYTE_LEN,
    WC_BYTE_LEN_WRITE_IMM,
    Op,
    recv_byte_len,
)
from models.outcomes import ExpectedCompletion
from models.rules import RECV_DONE
from qpconform.engine.choices import ChoiceBook
from qpconform.engine.device import Completion
from qpconform.engine.judge import DivergenceError
from qpconform.engine.ledger import Found, Ledger
from qpconform.engine.pair import PairHarness
from qpconform.machines.pair import machine_for
from tests.fake_pair import FakePair, connected_fake, known_after, machine_divergence
from tests.rule_log import RuleLog
from tests.test_operations_planted import _imm

ALL = [QPType.RC, QPType.UC, QPType.UD]


def _send(h: PairHarness) -> None:
    """A plain SEND into a posted receive."""
    h.post.recv("b")
    h.post.send("a", Op.SEND)


def _write_imm(h: PairHarness) -> None:
    """An RDMA WRITE with immediate only (RC, UC)."""
    h.post.recv("b")
    h.post.send("a", Op.WRITE_WITH_IMM)


def _both_ways(h: PairHarness) -> None:
    """A SEND each way: each receive names its own sender."""
    h.post.recv("b")
    h.post.recv("a")
    h.post.send("a", Op.SEND)
    h.post.send("b", Op.SEND_WITH_IMM)


SCENARIOS = [_send, _imm, _both_ways]


@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__.strip("_"))
def test_clean_fake_has_no_divergence(qp_type: QPType, scenario: Callable) -> None:
    assert known_after(qp_type, scenario) == []


#: (planted fault, scenario, QP types, rule)
PLANTED = [
    ("byte_len_one_more", _send, [QPType.RC, QPType.UC], WC_BYTE_LEN.id),
    ("byte_len_one_more", _send, [QPType.UD], UD_WC_BYTE_LEN.id),
    ("byte_len_one_more", _write_imm, [QPType.RC, QPType.UC], WC_BYTE_LEN_WRITE_IMM.id),
    ("imm_flag_clear", _imm, ALL, "pair.imm.delivered"),
    ("imm_flag_unasked", _send, ALL, "pair.imm.delivered"),
    ("src_qp_is_receiver", _send, [QPType.UD], UD_WC_SRC_QP.id),
    ("src_qp_is_receiver", _both_ways, [QPType.UD], UD_WC_SRC_QP.id),
]
_CASES = [(f, s, t, r) for f, s, types, r in PLANTED for t in types]


@pytest.mark.parametrize(
    ("fault", "scenario", "qp_type", "rule"), _CASES,
    ids=[f"{f}-{s.__name__.strip('_')}-{t.name}" for f, s, t, _ in _CASES],
)
def test_planted_fault_is_caught(fault, scenario, qp_type, rule) -> None:
    h = connected_fake(qp_type, fault)
    with pytest.raises(DivergenceError) as caught:
        scenario(h)
        h.quiet(0.01)
    assert (caught.value.record.kind, caught.value.record.rule_id) == ("fields", rule)


#: Near misses: the other choice a "may" rule allows is no divergence.
NEAR_MISSES = [
    ("ud_byte_len_without_grh", _send, QPType.UD),
    ("ud_byte_len_without_grh", _imm, QPType.UD),
    ("write_imm_byte_len_zero", _write_imm, QPType.RC),
    ("write_imm_byte_len_zero", _write_imm, QPType.UC),
]


@pytest.mark.parametrize(("fault", "scenario", "qp_type"), NEAR_MISSES,
                         ids=[f"{f}-{t.name}" for f, _, t in NEAR_MISSES])
def test_near_miss_is_no_divergence(fault, scenario, qp_type) -> None:
    h = connected_fake(qp_type, fault)
    scenario(h)
    h.quiet(0.01)
    assert h.known == []


@pytest.mark.parametrize(
    ("fault", "qp_type", "rules"),
    [("byte_len_one_more", QPType.RC, {WC_BYTE_LEN.id, WC_BYTE_LEN_WRITE_IMM.id}),
     ("byte_len_one_more", QPType.UD, {UD_WC_BYTE_LEN.id}),
     ("imm_flag_clear", QPType.UC, {"pair.imm.delivered"}),
     ("src_qp_is_receiver", QPType.UD, {UD_WC_SRC_QP.id})],
    ids=lambda v: v if isinstance(v, str) else getattr(v, "name", ""),
)
def test_the_traffic_machine_catches_each_planted_fault(fault, qp_type, rules) -> None:
    def make() -> PairHarness:
        return PairHarness(FakePair(qp_type, fault), sink=None, time_scale=0.01)

    record = machine_divergence(machine_for(qp_type, make, faults=("bad_lkey",)))
    assert record.rule_id in rules


class _ChoiceLog(RuleLog):
    """A recorder that also keeps the situations of the device's choices (as the run
    record does), so an inconsistent choice is judged."""

    def __init__(self) -> None:
        super().__init__()
        self.book = ChoiceBook()

    def choice(self, rule_id: str, chosen: str, situation: str | None = None,
               where: str = "") -> tuple[str, str] | None:
        super().choice(rule_id, chosen, situation, where)
        return None if situation is None else self.book.note(rule_id, situation, chosen, where)


def _recorded(fault: str | None) -> tuple[PairHarness, _ChoiceLog]:
    log = _ChoiceLog()
    h = PairHarness(FakePair(QPType.UD, fault), recorder=log, sink=log, time_scale=0.01)
    h.lifecycle.connect()
    return h, log


def _three_sends(h: PairHarness) -> None:
    for _ in range(3):
        _send(h)
    h.quiet(0.01)


def test_a_ud_byte_len_chosen_both_ways_is_inconsistent() -> None:
    h, _log = _recorded("ud_byte_len_flips")
    with pytest.raises(DivergenceError) as caught:
        _three_sends(h)
    assert (caught.value.record.kind, caught.value.record.rule_id) == (
        "inconsistent", UD_WC_BYTE_LEN.id)


@pytest.mark.parametrize("fault", [None, "ud_byte_len_without_grh"])
def test_a_ud_byte_len_chosen_one_way_is_a_characteristic(fault) -> None:
    """Near miss: with the GRH's 40 bytes every time (rxe), or without them every time."""
    h, log = _recorded(fault)
    _three_sends(h)
    assert h.known == [] and log.divergences == []
    assert log.chosen[UD_WC_BYTE_LEN.id] == 3
    chosen = log.book.seen[UD_WC_BYTE_LEN.id]["UD RECV"]
    assert set(chosen) == {f"byte_len={16 if fault else 56}"}


# ------------------------------------------------------------------------------ the model
def test_recv_byte_len_per_operation() -> None:
    assert recv_byte_len(Op.SEND, ud=False) == (frozenset({MESSAGE_LEN}), WC_BYTE_LEN)
    assert recv_byte_len(Op.SEND_WITH_IMM, ud=True) == (
        frozenset({MESSAGE_LEN + GRH_LEN, MESSAGE_LEN}), UD_WC_BYTE_LEN)
    assert recv_byte_len(Op.WRITE_WITH_IMM, ud=False) == (
        frozenset({MESSAGE_LEN, 0}), WC_BYTE_LEN_WRITE_IMM)
    assert recv_byte_len(Op.RDMA_WRITE, ud=False) is None  # consumes no receive


# ----------------------------------------------------------------------------- the ledger
def _due_recv(byte_len=None, src_qp=None) -> Ledger:
    """A ledger owing one successful receive (RECV, no immediate data)."""
    ledger = Ledger()
    ledger.add_due(ExpectedCompletion(9, "recv", WCStatus.SUCCESS, WCOpcode.RECV,
                                      byte_len=byte_len, src_qp=src_qp), RECV_DONE, 0)
    return ledger


def test_fields_not_read_are_not_compared() -> None:
    """A completion whose adapter read no byte_len, wc_flags or src_qp (None) matches."""
    ledger = _due_recv((frozenset({16}), WC_BYTE_LEN), src_qp=0x22)
    got = Completion(9, "recv", WCStatus.SUCCESS, 0x11, WCOpcode.RECV)
    assert ledger.match(got).found is Found.MATCH


def test_each_field_read_is_compared() -> None:
    ok = Completion(9, "recv", WCStatus.SUCCESS, 0x11, WCOpcode.RECV, byte_len=16,
                    wc_flags=0, src_qp=0x22)
    assert _due_recv((frozenset({16}), WC_BYTE_LEN), 0x22).match(ok).found is Found.MATCH
    for bad, rule in ((replace(ok, byte_len=15), WC_BYTE_LEN),
                      (replace(ok, src_qp=0x11), UD_WC_SRC_QP)):
        found = _due_recv((frozenset({16}), WC_BYTE_LEN), 0x22).match(bad)
        assert found.found is Found.FIELDS and found.because.rule == rule


def test_the_wc_with_imm_flag_is_the_truth() -> None:
    """imm_data without IBV_WC_WITH_IMM, or the flag on a message without immediate data,
    is a divergence of pair.imm.delivered; the flag clear and no imm_data matches."""
    plain = Completion(9, "recv", WCStatus.SUCCESS, 0x11, WCOpcode.RECV, wc_flags=0)
    assert _due_recv().match(plain).found is Found.MATCH
    for bad in (replace(plain, wc_flags=0x2), replace(plain, imm_data=0x5A000009)):
        found = _due_recv().match(bad)
        assert found.found is Found.FIELDS
        assert found.because.rule.id == "pair.imm.delivered"
