"""Q_Keys (models/qkey.py): the model's verdict on a UD SEND naming a wrong Q_Key, and the
planted fault (a fake that takes the datagram anyway) caught by the rule's name, by a
scenario and by the UD traffic machine, with the correct fake clean."""

from __future__ import annotations

import pytest

from models import qkey
from models.enums import QPState, QPType, WCStatus
from models.operations import Op
from models.wire import Fault
from qpconform.engine.pair import PairHarness
from qpconform.machines.pair import machine_for
from tests.fake_pair import (
    FakePair,
    connected_fake,
    connected_model,
    machine_divergence,
    scenario_divergence,
)

S = QPState


# ----------------------------------------------------------------------------- the model
@pytest.mark.parametrize("op", [Op.SEND, Op.SEND_WITH_IMM], ids=str)
def test_a_wrong_qkey_is_dropped_and_the_receive_stays(op: Op) -> None:
    m = connected_model(QPType.UD)
    m.apply("b", m.post_recv("b", 9), True)
    m.apply("a", m.post_send("a", 1, op, Fault.BAD_QKEY), True)
    (step,) = m.progress()
    assert step.rule is qkey.MISMATCH
    assert [s for s, _ in step.effects] == ["a"]  # nothing at the responder
    (sent,) = [e for _, e in step.effects]
    assert [c.status for c in sent.completions] == [WCStatus.SUCCESS]
    assert not sent.events
    assert m.qp("a").state == m.qp("b").state == S.RTS and m.qp("b").queues.recvs == [9]
    m.apply("a", m.post_send("a", 2, Op.SEND), True)  # the next datagram takes it
    (good,) = m.progress()
    assert good.rule.id == "pair.send.delivered" and m.qp("b").queues.recvs == []


def test_a_wrong_qkey_is_planted_on_a_ud_send_only() -> None:
    for qp_type, op, inline in ((QPType.RC, Op.SEND, False), (QPType.UC, Op.SEND, False),
                                (QPType.UD, Op.SEND, True)):
        with pytest.raises(ValueError, match="Q_Key"):
            connected_model(qp_type).post_send("a", 1, op, Fault.BAD_QKEY, inline=inline)


def test_the_wrong_qkey_is_another_and_not_a_controlled_one() -> None:
    for right in (0x11111111, 0, 0x7FFFFFFF, 0xFFFFFFFF):
        wrong = qkey.wrong_qkey(right)
        assert wrong != right and not wrong & qkey.CONTROLLED_BIT


# -------------------------------------------------------------------------- planted faults
def _wrong_then_right(h: PairHarness) -> None:
    h.post.recv("b")
    h.post.send("a", Op.SEND, Fault.BAD_QKEY)
    h.post.send("a", Op.SEND)


@pytest.mark.parametrize("srq", [False, True], ids=["own-rq", "srq"])
def test_a_datagram_taken_despite_its_wrong_qkey_is_caught(srq: bool) -> None:
    h = connected_fake(QPType.UD, "qkey_ignored", srq_sides=frozenset({"b"} if srq else ()))
    d = scenario_divergence(h, _wrong_then_right)
    assert (d.kind, d.rule_id, d.rule_kind) == ("completion", qkey.MISMATCH.id, "must")


@pytest.mark.parametrize("fault", [None, "qkey_ignored"], ids=["clean", "ignored-right-qkey"])
def test_right_and_wrong_qkeys_on_a_clean_fake_stay_clean(fault: str | None) -> None:
    """The correct fake drops the wrong one and delivers the right one into the receive it
    left; the faulted fake with right Q_Keys only is clean too (the near miss)."""
    h = connected_fake(QPType.UD, fault)
    if fault is None:
        _wrong_then_right(h)
    else:
        h.post.recv("b")
        h.post.send("a", Op.SEND)
    h.quiet(0.01)
    h.finish()
    assert not h.known
    assert h.model.qp("b").queues.recvs == []


def test_the_ud_traffic_machine_draws_a_wrong_qkey() -> None:
    def make(**kw) -> PairHarness:
        return PairHarness(FakePair(QPType.UD, "qkey_ignored", **kw), sink=None,
                           time_scale=0.01)

    d = machine_divergence(machine_for(QPType.UD, make, faults={"bad_qkey"}))
    assert (d.kind, d.rule_id) == ("completion", qkey.MISMATCH.id)
