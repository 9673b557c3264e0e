"""Which QP types and optional features each rule concerns (models/catalog.py `rule_scope`),
and why a run exercised a rule zero times (`why_not`): the report's coverage says it."""

from __future__ import annotations

import pytest

from models import catalog, pair_rules, rules, uverbs
from models.capabilities import FEATURES, Capabilities
from models.catalog import (
    FEATURE_MISSING,
    NOT_REACHED,
    TYPE_UNSUPPORTED,
    RuleScope,
    rule_scope,
    why_not,
)
from models.enums import QPType
from models.variant import LINUX

T = QPType
ALL = frozenset(QPType)


def _scope(rule_id: str) -> tuple[set[str], set[str]]:
    s = rule_scope(rule_id)
    return {t.name for t in s.qp_types}, set(s.features)


@pytest.mark.parametrize(
    ("rule_id", "types", "features"),
    [
        ("linux.transition.RC.RESET->INIT", {"RC"}, set()),
        ("linux.transition.RC.RTS->SQD", {"RC"}, {"SQD"}),
        ("linux.transition.UD.SQE->RTS", {"UD"}, {"SQE"}),
        ("linux.transition.XRC_SEND.SQD->RTS.extra", {"XRC_SEND"}, {"XRC", "SQD"}),
        ("linux.transition.XRC_RECV.RESET->INIT.required", {"XRC_RECV"}, {"XRC"}),
        ("linux.transition.RAW_PACKET.INIT->RTR", {"RAW_PACKET"}, {"RAW_PACKET"}),
        ("ibta.transition.RC.RESET->ERR", {"RC"}, set()),  # a pair only the spec has
        # an invalid pair: from its current state; requesting SQD/SQE needs no feature
        ("linux.transition.invalid.RESET->ERR", {t.name for t in ALL}, set()),
        ("linux.transition.invalid.SQD->INIT", {t.name for t in ALL}, {"SQD"}),
        ("linux.transition.invalid.INIT->SQD", {t.name for t in ALL}, set()),
        ("iwarp.transition.invalid.RESET->RTS", {"RC"}, set()),
        # posts: the types whose post the rule decides, the feature of the state
        ("ibta.post_recv.SQD", {"RC", "UC", "UD", "RAW_PACKET"}, {"SQD"}),
        ("ibta.post_send.RTS", {"RC", "UC", "UD", "RAW_PACKET", "XRC_SEND"}, set()),
        ("ibta.sqd.hold", {"RC", "UC", "UD", "RAW_PACKET", "XRC_SEND"}, {"SQD"}),
        ("xrc.post_send.no_sq", {"XRC_RECV"}, {"XRC"}),
        ("xrc.post_recv.no_rq", {"XRC_SEND", "XRC_RECV"}, {"XRC"}),
        # named rules
        (rules.SQD_DRAINED_ONCE.id, {t.name for t in ALL}, {"SQD"}),
        (rules.SQE_ON_SEND_ERROR.id, {"UC", "UD"}, {"SQE"}),
        (uverbs.XRC_STRIP.id, {"XRC_SEND", "XRC_RECV"}, {"XRC"}),
        (uverbs.QKEY_PRIVILEGED.id, {"UD"}, set()),
        (pair_rules.RC_RETRY_EXHAUSTED.id, {"RC"}, set()),
        (pair_rules.UNRELIABLE_DROPPED.id, {"UC", "UD"}, set()),
        # value rules: the types whose modify carries the bit
        ("attr.max_rd_atomic.range", {"RC", "XRC_SEND"}, set()),
        ("attr.alt_path.roce", {"RC", "UC", "XRC_SEND", "XRC_RECV"}, set()),  # a refusal
        # any QP, no feature
        (rules.UNKNOWN_MASK_BITS.id, {t.name for t in ALL}, set()),
    ],
)
def test_rule_scope(rule_id: str, types: set[str], features: set[str]) -> None:
    assert _scope(rule_id) == (types, features)


def test_every_rule_has_a_scope_the_catalogue_can_use() -> None:
    for rule in catalog.all_rules().values():
        scope = rule_scope(rule)
        assert scope.qp_types and scope.features <= set(FEATURES), rule.id
    with pytest.raises(ValueError):
        RuleScope(features=frozenset({"TELEPORT"}))


def test_why_not_says_type_then_feature_then_not_reached() -> None:
    no_sqd = Capabilities.of(LINUX, ["SQD"])
    full = Capabilities.of(LINUX)
    sqd = "linux.transition.RC.RTS->SQD"
    assert why_not(sqd, ["RC", "UD"], full) == NOT_REACHED
    assert why_not(sqd, [T.RC], no_sqd) == FEATURE_MISSING
    assert why_not(sqd, ["UD"], full) == TYPE_UNSUPPORTED  # RC refused or not selected
    # a type the device refused outranks a feature it lacks
    assert why_not("linux.transition.XRC_SEND.RTS->SQD", ["RC"], no_sqd) == TYPE_UNSUPPORTED
    # a rule of several types applies while one of them is available
    assert why_not(pair_rules.UNRELIABLE_DROPPED.id, ["UD"], full) == NOT_REACHED
    assert why_not(pair_rules.UNRELIABLE_DROPPED.id, ["RC"], full) == TYPE_UNSUPPORTED
    assert why_not("linux.transition.invalid.RESET->ERR", ["RC"], no_sqd) == NOT_REACHED
    assert why_not("linux.transition.invalid.SQD->INIT", ["RC"], no_sqd) == FEATURE_MISSING
    assert why_not(rules.SQE_ON_SEND_ERROR.id, ["UC"], Capabilities.of(LINUX, ["SQE"])) == (
        FEATURE_MISSING)
    assert why_not("linux.transition.UC.INIT->RTR", [], full) == TYPE_UNSUPPORTED
