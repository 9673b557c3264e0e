"""The fields a send WR's opcode does not use (models/unused_fields.py): which ones a fill
values, that the adapter writes them under the opcode's own, that a clean fake ignores
them, and that a planted fault reading them is caught and named
ibta.post_send.unused_fields_ignored (issue 53, the work-request half)."""

from __future__ import annotations

import py_compile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from models import unused_fields
from models.catalog import all_rules
from models.enums import QPType
from models.operations import Op, ops_for
from models.wire import Fault
from qpconform.adapters import pyverbs_pair
from qpconform.adapters.pyverbs_pair import PyverbsEnd
from qpconform.engine import unused_wr
from qpconform.engine.judge import DivergenceError
from qpconform.engine.pair import PairHarness
from qpconform.machines.pair import machine_for
from tests.fake_pair import FakePair, connected_fake, machine_divergence

RULE = unused_fields.UNUSED_FIELDS.id
ALL = [QPType.RC, QPType.UC, QPType.UD]


def test_the_rule_is_in_the_catalogue_as_a_provider_must() -> None:
    rule = unused_fields.UNUSED_FIELDS
    assert rule.id in all_rules()
    assert (rule.kind, rule.layer) == ("must", "provider")


@pytest.mark.parametrize(
    ("op", "qp_type", "fields"),
    [
        (Op.SEND, QPType.RC, ("imm_data", *unused_fields.UNION)),  # no member of the union
        (Op.SEND_WITH_IMM, QPType.UD, unused_fields.UNION),  # ud under the fill
        (Op.RDMA_WRITE, QPType.UC, ("imm_data", *unused_fields.UNION)),  # rdma under it
        (Op.WRITE_WITH_IMM, QPType.RC, unused_fields.UNION),
        (Op.COMP_SWAP, QPType.RC, ("imm_data",)),  # the atomic member is all of the union
    ],
)
def test_which_fields_a_fill_values(op: Op, qp_type: QPType, fields: tuple[str, ...]) -> None:
    assert unused_fields.unused(op, qp_type) == fields
    assert unused_wr.values(op, qp_type, unused_wr.PLAIN) == {}
    assert set(unused_wr.values(op, qp_type, unused_wr.WILD)) == set(fields)
    assert all(v for v in unused_wr.values(op, qp_type, unused_wr.OTHER).values())


def test_an_unknown_fill_is_refused() -> None:
    with pytest.raises(ValueError):
        unused_wr.values(Op.SEND, QPType.RC, "zero")


class _WR:
    """A SendWR stand-in recording every field set, in order."""

    def __init__(self, **kwargs: Any) -> None:
        self.calls: list[tuple[str, Any]] = [("init", kwargs["opcode"])]

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "imm_data":
            self.calls.append(("imm_data", value))
        object.__setattr__(self, name, value)

    def set_wr_atomic(self, *args: int) -> None:
        self.calls.append(("atomic", args))

    def set_wr_rdma(self, *args: int) -> None:
        self.calls.append(("rdma", args))


def _posting_end(posted: list[_WR]) -> PyverbsEnd:
    """A pair end whose QP records the WR it is handed (no device)."""
    class _Err(Exception):
        pass

    pv = SimpleNamespace(wr=SimpleNamespace(SGE=lambda *a: a, SendWR=_WR),
                         RDMAError=_Err, Error=_Err)
    mr = SimpleNamespace(buf=0x1000, lkey=7, rkey=8)
    end = object.__new__(PyverbsEnd)
    end.device, end.qp_type, end.max_inline = SimpleNamespace(pv=pv), QPType.RC, 0
    end.rmr = mr
    qp = SimpleNamespace(post_send=lambda wr, bad: posted.append(wr))
    end.handle = SimpleNamespace(mr=mr, qp=qp)
    end.peer = SimpleNamespace(rmr=SimpleNamespace(buf=0x9000, rkey=0x42))
    return end


def test_the_adapter_writes_the_fill_first_and_the_opcodes_own_fields_on_top(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pyverbs_pair, "const", lambda name: 0)  # no pyverbs on the host
    posted: list[_WR] = []
    end = _posting_end(posted)
    fill = unused_wr.values(Op.RDMA_WRITE, QPType.RC, unused_wr.WILD)
    assert end.post_send(5, Op.RDMA_WRITE, Fault.NONE, unused=fill).accepted
    kinds = [name for name, _ in posted[0].calls]
    assert kinds == ["init", "imm_data", "atomic", "rdma"]  # rdma last: the WRITE's own
    assert posted[0].calls[-1][1] == (0x42, 0x9000)
    end.post_send(6, Op.SEND, Fault.NONE)  # plain: nothing but the opcode's own
    assert [name for name, _ in posted[1].calls] == ["init"]


def _everything_filled(h: PairHarness, choice: str) -> None:
    for op in h.ops:
        peer = h.model.peer_of("a")
        h.post.recv(peer)
        h.post.send("a", op, unused=choice)
    h.quiet(0.01)


@pytest.mark.parametrize("choice", [unused_wr.OTHER, unused_wr.WILD])
@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_a_clean_fake_ignores_every_fill(qp_type: QPType, choice: str) -> None:
    """The near miss: every operation of the type, its unused fields filled, conforms; the
    step log carries the values (the reproducer's)."""
    h = connected_fake(qp_type)
    _everything_filled(h, choice)
    assert h.known == []
    posts = [s for s in h.steps if s.get("verb") == "post_send"]
    assert len(posts) == len(ops_for(qp_type)) and all(s["unused"] for s in posts)


@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_imm_read_from_an_unused_field_is_caught_under_the_rule(qp_type: QPType) -> None:
    h = connected_fake(qp_type, "imm_from_unused")
    h.post.recv("b")
    with pytest.raises(DivergenceError) as caught:
        h.post.send("a", Op.SEND, unused=unused_wr.OTHER)
        h.quiet(0.01)
    record = caught.value.record
    assert (record.kind, record.rule_id) == ("fields", RULE)
    assert record.context["judged_by"] == "pair.imm.delivered"
    assert record.rule_kind == "must"


def test_the_plain_fill_hides_the_planted_fault() -> None:
    """Near miss: the same faulty device, a WR with nothing in its unused fields."""
    h = connected_fake(QPType.RC, "imm_from_unused")
    _everything_filled(h, unused_wr.PLAIN)
    assert h.known == []


def test_a_divergence_on_a_plain_wr_keeps_its_rule() -> None:
    """Only a WR that carried a fill is named after it: imm_lost on a plain SEND WITH IMM
    stays pair.imm.delivered, even after filled WRs."""
    h = connected_fake(QPType.RC, "imm_lost")
    h.post.recv("b")
    h.post.send("a", Op.SEND, unused=unused_wr.WILD)  # no immediate: nothing to lose
    h.post.recv("b")
    with pytest.raises(DivergenceError) as caught:
        h.post.send("a", Op.SEND_WITH_IMM)
        h.quiet(0.01)
    assert caught.value.record.rule_id == "pair.imm.delivered"


def test_a_divergence_the_fill_does_not_show_keeps_its_rule() -> None:
    """imm_lost on a filled WRITE WITH IMM (the union filled under its rdma member): what
    the device did does not show the fill, so the record stays pair.imm.delivered."""
    h = connected_fake(QPType.RC, "imm_lost")
    h.post.recv("b")
    with pytest.raises(DivergenceError) as caught:
        h.post.send("a", Op.WRITE_WITH_IMM, unused=unused_wr.OTHER)
        h.quiet(0.01)
    assert caught.value.record.rule_id == "pair.imm.delivered"


def test_the_traffic_machine_catches_the_planted_fault() -> None:
    """The machine draws each post's fill (plain, other, wild) and finds the fault (fixed
    seed, as the other planted-fault machines)."""

    def make() -> PairHarness:
        return PairHarness(FakePair(QPType.RC, "imm_from_unused"), sink=None, time_scale=0.01)

    record = machine_divergence(machine_for(QPType.RC, make, faults=()))
    assert record.rule_id == RULE


def test_the_reproducer_carries_the_fill(tmp_path: Path) -> None:
    """The record's post step holds the values; the script keeps them and sets them."""
    from reports.reproducer import write_reproducer

    h = connected_fake(QPType.RC, "imm_from_unused")
    h.post.recv("b")
    with pytest.raises(DivergenceError) as caught:
        h.post.send("a", Op.SEND, unused=unused_wr.WILD)
        h.quiet(0.01)
    record = caught.value.record
    (post,) = [s for s in record.steps if s["verb"] == "post_send"]
    assert post["unused"] == unused_wr.values(Op.SEND, QPType.RC, unused_wr.WILD)
    path = write_reproducer(record, tmp_path)
    py_compile.compile(str(path), doraise=True)
    text = path.read_text()
    assert "'unused': {'imm_data': 4294967295," in text
    assert "wr.set_wr_atomic(unused[\"rkey\"]" in text
