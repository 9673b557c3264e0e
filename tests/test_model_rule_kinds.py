"""Every rule the model can name has an explicit kind and layer (models/sources.py).

A report sorts divergences by them (a "must" broken is a bug, a "may" never
diverges, an "optional" one may mean a missing feature), so a rule that leaves
either undecided would be misfiled without anyone noticing. Rules are collected
the way a run meets them: the report's catalogue, and every expectation the
model produces over all QP types, states, masks and out-of-range values.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from models import rules as model_rules_module
from models.attributes import VALUE_RULES, DeviceCaps
from models.enums import STATES, Attr, EventType, QPState, QPType, WCStatus
from models.operations import Op
from models.outcomes import Expectation, Outcome
from models.pair import PairModel
from models.qp import QPModel
from models.sources import KINDS, LAYERS, MAY, SPEC, Rule, Source
from models.variant import VARIANTS, variant
from models.wire import Fault
from qpconform.engine import pair as engine_pair
from qpconform.engine import pair_follow, pair_judgement, pair_life, pair_wire
from reports.qualification import model_rules
from tests.sequences import VALID_ATTRS

S = QPState
VALID = VALID_ATTRS
#: One out-of-range value per field a value rule reads (0 and huge cover both ends).
BAD_VALUES = {
    "port_num": (0, 9), "ah_port_num": (0, 9), "ah_sgid_index": (300, 3), "pkey_index": (70000,),
    "path_mtu": (0, 9), "timeout": (32,), "retry_cnt": (8,), "rnr_retry": (8,),
    "min_rnr_timer": (32,), "sq_psn": (1 << 24,), "rq_psn": (1 << 24,),
    "dest_qp_num": (1 << 24,), "max_rd_atomic": (999,), "max_dest_rd_atomic": (999,),
    "qp_access_flags": (16, 1 << 30), "alt_port_num": (9,), "alt_ah_port_num": (9,),
    "path_mig_state": (2,), "qkey": (0x80000000,),
}
CAPS = (
    DeviceCaps(empty_gids=frozenset({3})),
    DeviceCaps(link_layer="infiniband", phys_port_cnt=2, privileged_qkey=False),
)


def _model(qp_type: QPType, state: QPState, var: str, caps: DeviceCaps) -> QPModel:
    model = QPModel(qp_type, var, caps)
    model.state = state
    model.port = 1
    return model


def _expectations(var: str) -> Iterator[Expectation]:
    """Every kind of expectation the lone model gives, over all types and states: each
    table entry with its exact, optional, missing and extra masks, out-of-range values
    where the entry takes them, the invalid pairs, and the posts."""
    table = variant(var).table
    for caps in CAPS:
        for qp_type in QPType:
            for cur in STATES:

                def modify(
                    nxt: QPState, mask: Attr, *, t: QPType = qp_type, c: QPState = cur,
                    k: DeviceCaps = caps, **values: int,
                ) -> Expectation:
                    attrs = {**VALID, "qp_state": int(nxt), "cur_qp_state": int(c), **values}
                    return _model(t, c, var, k).modify(attrs, mask)

                for nxt in STATES:
                    t = table.lookup(qp_type, cur, nxt)
                    if t is None:
                        yield modify(nxt, Attr.STATE)
                        continue
                    full = Attr.STATE | t.required
                    for mask in (full, full | Attr.CAP, full | Attr.CUR_STATE, t.optional):
                        yield modify(nxt, mask)
                    for bit in t.required:
                        yield modify(nxt, full & ~Attr(bit))
                    for field, bad in BAD_VALUES.items():
                        for value in bad:
                            yield modify(nxt, full | t.optional, **{field: value})
                for mask in (Attr(1 << 21), Attr.STATE | Attr.CUR_STATE):
                    yield modify(S.UNKNOWN, mask)
                yield _model(qp_type, cur, var, caps).post_send(1)
                yield _model(qp_type, cur, var, caps).post_recv(1)
                yield _model(qp_type, cur, var, caps).query()
                yield _model(qp_type, cur, var, caps).destroy()


def _pair_rules() -> Iterator[Rule]:
    """What the wire and the automatic transitions can decide."""
    for qp_type in (QPType.RC, QPType.UC, QPType.UD):
        for peer_state in STATES:
            for op in (Op.SEND, Op.RDMA_WRITE):
                for fault in Fault:
                    if op is Op.SEND and (fault is Fault.BAD_RKEY or fault.targeted):
                        continue
                    if fault is Fault.SINK_READ_ONLY:
                        continue  # a READ's or atomic's sink: below
                    if fault is Fault.MISALIGNED:
                        continue  # (a misaligned atomic: below)
                    if fault is Fault.BAD_QKEY and (op, qp_type) != (Op.SEND, QPType.UD):
                        continue  # a wrong Q_Key: a UD SEND's
                    if op is Op.RDMA_WRITE and qp_type == QPType.UD:
                        continue
                    for with_recv in (False, True):
                        pair = PairModel(qp_type)
                        pair.qp("a").state = S.RTS
                        pair.qp("b").state = peer_state
                        if with_recv:
                            pair.qp("b").queues.recvs.append(99)
                        exp = pair.post_send("a", 1, op, fault)
                        pair.apply("a", exp, True)
                        for step in pair.progress():
                            yield step.rule
                            yield step.forbidden_rule
                            for _, effect in step.effects:
                                yield from (effect.rule, *effect.checked)
        if qp_type is QPType.RC:  # a READ whose sink the requester may not write
            pair = PairModel(qp_type)
            pair.qp("a").state = pair.qp("b").state = S.RTS
            pair.apply("a", pair.post_send("a", 1, Op.RDMA_READ, Fault.SINK_READ_ONLY), True)
            for step in pair.progress():
                yield step.rule
                for _, effect in step.effects:
                    yield from (effect.rule, *effect.checked)
        if qp_type is QPType.RC:  # an atomic off alignment: posted, then NAKed
            pair = PairModel(qp_type)
            pair.qp("a").state = pair.qp("b").state = S.RTS
            exp = pair.post_send("a", 1, Op.FETCH_ADD, Fault.MISALIGNED)
            yield exp.rule
            pair.apply("a", exp, True)
            for step in pair.progress():
                yield step.rule
                for _, effect in step.effects:
                    yield from (effect.rule, *effect.checked)
        model = QPModel(qp_type)
        model.state = S.RTS
        model.queues.recvs.append(1)
        yield model.recv_completed(WCStatus.LOC_LEN_ERR).rule
        yield model.async_error(EventType.QP_FATAL).rule


def _all_rules() -> dict[str, Rule]:
    found: dict[str, Rule] = {}
    for var in VARIANTS:
        found.update(model_rules(var))
        for exp in _expectations(var):
            for rule in (exp.rule, *exp.checked):
                found.setdefault(rule.id, rule)
    for rule in _pair_rules():
        found.setdefault(rule.id, rule)
    pair_parts = (pair_follow, pair_judgement, pair_life, pair_wire)
    for module in (model_rules_module, engine_pair, *pair_parts):
        for value in vars(module).values():
            if isinstance(value, Rule):
                found.setdefault(value.id, value)
    return found


ALL_RULES = _all_rules()


def test_the_sweep_reaches_the_rules_it_must() -> None:
    ids = set(ALL_RULES)
    assert len(ids) > 300
    assert {vr.rule.id for vr in VALUE_RULES} <= ids
    assert "linux.transition.RC.INIT->RTR.required" in ids
    assert "linux.transition.RC.RTS->RTS.extra" in ids
    assert "pair.rc.bad_rkey" in ids


@pytest.mark.parametrize("rule_id", sorted(ALL_RULES))
def test_every_rule_has_an_explicit_kind_and_layer(rule_id: str) -> None:
    rule = ALL_RULES[rule_id]
    assert rule.kind in KINDS, f"{rule_id}: kind not decided"
    assert rule.layer in LAYERS, f"{rule_id}: layer not decided"


def test_an_undecided_rule_is_caught() -> None:
    """The check above is not vacuous: a rule built without a decision has none."""
    bare = Rule("x.y", "z", Source("d", "l"))
    assert bare.kind is None and bare.layer is None
    with pytest.raises(ValueError, match="kind"):
        Rule("x.y", "z", Source("d", "l"), kind="should", layer=SPEC)
    with pytest.raises(ValueError, match="layer"):
        Rule("x.y", "z", Source("d", "l"), kind=MAY, layer="kernel")


def test_no_linux_rule_is_enforced_by_the_spec_alone() -> None:
    """Layer "spec" means no Linux layer enforces the rule: only the ibta variant has those."""
    linux = model_rules("linux")
    assert not [r.id for r in linux.values() if r.layer == SPEC]
    ibta = model_rules("ibta")
    assert [r.id for r in ibta.values() if r.layer == SPEC]


@pytest.mark.parametrize("var", VARIANTS)
def test_a_may_rule_never_demands_one_outcome(var: str) -> None:
    """A "may" rule that decides a verb leaves the outcome to the device."""
    for exp in _expectations(var):
        if exp.rule.kind == MAY:
            assert exp.outcome is Outcome.EITHER, exp.rule.id
