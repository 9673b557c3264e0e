"""Which rules exist: the model's own answer, so nobody scans module globals for it.

`variant_rules` is every rule one variant's model can consult (a report's
catalogue and coverage, reports/qualification.py); `all_rules` is every rule a
divergence record can name (the check of the quirk files' rule globs,
tests/test_quirk_profiles.py). Both are built from the `RULES` tuple each model
module declares, the transition table, the value rules and what the model says
about every post.

`rule_scope` says which QP types a rule concerns and which optional features it needs,
and `why_not` why a run exercised a rule zero times (a type the device refused or the
run did not select, a feature the device lacks, or simply not reached): the report's
coverage (reports/qualification.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cache

from models import (
    access,
    iwarp_pair,
    local_access,
    operations,
    outside_mask,
    pair_checks,
    pair_rules,
    qkey,
    readback,
    returned,
    rules,
    shared_cq,
    srq,
    srq_sizes,
    unused_fields,
    uverbs,
)
from models.attributes import PSN_MASKED, VALUE_RULES
from models.capabilities import FEATURES, Capabilities
from models.enums import STATES, Attr, QPState, QPType
from models.outcomes import Expectation
from models.qp import QPModel
from models.sources import Rule
from models.variant import VARIANTS, Variant
from models.variant import variant as parse_variant

POST_VERBS = ("post_send", "post_recv")


def post_expectation(
    qp_type: QPType, verb: str, state: QPState, variant: Variant | str
) -> Expectation:
    """What a post in `state` must do (the model put straight into that state)."""
    model = QPModel(qp_type, variant)
    model.state = state
    return model.post_send(1) if verb == "post_send" else model.post_recv(1)


def variant_rules(
    variant: Variant | str, qp_types: Iterable[str] | None = None
) -> dict[str, Rule]:
    """Every rule of one model variant that a run on these QP types can exercise (a type
    the variant does not know, e.g. UD under iwarp, brings only the rule that says so)."""
    variant = parse_variant(variant)
    table = variant.table
    asked = [QPType[t] for t in qp_types] if qp_types else list(QPType)
    types = [t for t in asked if t in table.qp_types]
    found: dict[str, Rule] = {}

    def add(rule: Rule) -> None:
        found.setdefault(rule.id, rule)

    unknown = [t for t in asked if t not in table.qp_types]
    if unknown:
        add(table.invalid_rule(QPState.RESET, QPState.INIT, unknown[0]))

    for t in table:
        if t.qp_type not in types:
            continue
        add(t.rule)
        if t.required:
            add(
                replace(
                    t.rule,
                    id=f"{t.rule.id}.{rules.REQUIRED_MISSING}",
                    summary=f"{t.rule.summary}; refused when a required bit is missing",
                )
            )
        if variant.refuses_extra_bits:  # iwarp leaves them to the driver (IWARP_IB_ATTRIBUTES)
            add(
                replace(
                    t.rule,
                    id=f"{t.rule.id}.{rules.EXTRA_BITS}",
                    summary=f"{t.rule.summary}; refused when the mask adds other bits",
                )
            )
    for cur in STATES:
        for nxt in STATES:
            if any(table.lookup(q, cur, nxt) is None for q in types):
                add(table.invalid_rule(cur, nxt))
    for vr in variant.value_rules:
        add(vr.rule)
    if variant.masks_psn:
        add(PSN_MASKED)
    if variant.enforces_linux_abi:  # the uverbs layer is every Linux device's
        for rule in uverbs.RULES:
            add(rule)
    for module in (rules, pair_rules, operations, readback, srq, shared_cq, access, qkey,
                   local_access, outside_mask, unused_fields, returned, srq_sizes):
        for rule in module.RULES:
            if variant.consults(rule, readback_rule=module is readback):
                add(rule)
    for q in types:
        for verb in POST_VERBS:
            for state in STATES:
                add(post_expectation(q, verb, state, variant).rule)
    return found


def all_rules() -> dict[str, Rule]:
    """Every rule a divergence record can name: the rules of every variant over all QP
    types, the pair harness's own checks (models/pair_checks.py) and the iWARP wire's
    (models/iwarp_pair.py)."""
    found: dict[str, Rule] = {}
    for name in VARIANTS:
        for rule_id, rule in variant_rules(name).items():
            found.setdefault(rule_id, rule)
    for rule in (*pair_checks.RULES, *iwarp_pair.RULES):
        found.setdefault(rule.id, rule)
    return found


# --------------------------------------------------------------------------- rule scopes
#: The optional states: each is a feature of its own (models/capabilities.py FEATURES).
STATE_FEATURES: dict[QPState, str] = {QPState.SQD: "SQD", QPState.SQE: "SQE"}
#: The optional QP types: a device may lack them as a feature too.
TYPE_FEATURES: dict[QPType, str] = {
    QPType.XRC_SEND: "XRC", QPType.XRC_RECV: "XRC", QPType.RAW_PACKET: "RAW_PACKET"}
_XRC = frozenset({QPType.XRC_SEND, QPType.XRC_RECV})
#: The QP types the pair harness connects (suites/test_drain.py, test_error_handling.py).
PAIR_TYPES = frozenset({QPType.RC, QPType.UC, QPType.UD})


@dataclass(frozen=True)
class RuleScope:
    """Where a rule can be exercised: on a QP of one of `qp_types`, on a device with every
    feature in `features` (FEATURES names)."""

    qp_types: frozenset[QPType] = frozenset(QPType)
    features: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        unknown = self.features - set(FEATURES)
        if unknown or not self.qp_types:
            raise ValueError(f"bad scope: types {sorted(self.qp_types)}, features {unknown}")


def _srq_features(rule: Rule) -> frozenset[str]:
    """An SRQ rule needs SRQs; a resize's, the device's IBV_DEVICE_SRQ_RESIZE too."""
    resize = rule in (srq_sizes.RESIZE, srq_sizes.RESIZE_BELOW_HELD, srq_sizes.FAILED_UNCHANGED)
    return frozenset({"SRQ", "SRQ_RESIZE"} if resize else {"SRQ"})


def _features(qp_type: QPType | None, *states: QPState) -> frozenset[str]:
    found = {STATE_FEATURES[s] for s in states if s in STATE_FEATURES}
    if qp_type in TYPE_FEATURES:
        found.add(TYPE_FEATURES[qp_type])
    return frozenset(found)


def _bit_types(*bits: Attr) -> frozenset[QPType]:
    """The QP types whose table entries (any variant) require or allow one of `bits`."""
    mask = Attr(0)
    for bit in bits:
        mask |= bit
    return frozenset(
        t.qp_type
        for name in VARIANTS
        for t in parse_variant(name).table
        if (t.required | t.optional) & mask
    )


def _named_scopes() -> dict[str, RuleScope]:
    """The rules whose scope their id does not carry: what each concerns, said once."""
    sqd = RuleScope(features=frozenset({"SQD"}))
    rc = RuleScope(frozenset({QPType.RC}))
    scopes = {
        rules.SQD_DRAINED_EVENT.id: sqd,
        rules.SQD_DRAINED_UNASKED.id: sqd,
        rules.SQD_DRAINED_OUTSIDE_SQD.id: sqd,
        rules.SQD_DRAINED_ONCE.id: sqd,
        rules.SQD_HOLDS_NEW_SENDS.id: sqd,
        pair_checks.SQ_DRAINING.id: sqd,
        rules.SQE_ON_SEND_ERROR.id: RuleScope(
            frozenset({QPType.UC, QPType.UD}), frozenset({"SQE"})),
        rules.ERR_ON_SEND_ERROR.id: RuleScope(frozenset({QPType.RC, QPType.XRC_SEND})),
        uverbs.XRC_STRIP.id: RuleScope(_XRC, frozenset({"XRC"})),
        uverbs.AV_PORT_AT_RTR.id: RuleScope(_bit_types(Attr.AV)),
        uverbs.AV_IMPLIES_PORT.id: RuleScope(_bit_types(Attr.AV)),
        uverbs.PORT_MATCHES_AV.id: RuleScope(_bit_types(Attr.AV)),
        uverbs.QKEY_PRIVILEGED.id: RuleScope(_bit_types(Attr.QKEY)),
        readback.READBACK_ROUNDED.id: RuleScope(
            _bit_types(Attr.MAX_QP_RD_ATOMIC, Attr.MAX_DEST_RD_ATOMIC)),
        PSN_MASKED.id: RuleScope(_bit_types(Attr.SQ_PSN, Attr.RQ_PSN)),
        pair_rules.SEND_DELIVERED.id: RuleScope(PAIR_TYPES),
        pair_rules.WRITE_DELIVERED.id: RuleScope(frozenset({QPType.RC, QPType.UC})),
        pair_rules.RC_RNR_EXHAUSTED.id: rc,
        pair_rules.RC_RNR_WAITING.id: rc,
        pair_rules.RC_RETRY_EXHAUSTED.id: rc,
        pair_rules.RC_BAD_RKEY.id: rc,
        pair_rules.UC_BAD_RKEY.id: RuleScope(frozenset({QPType.UC})),
        pair_rules.UNRELIABLE_DROPPED.id: RuleScope(frozenset({QPType.UC, QPType.UD})),
        pair_rules.BAD_LKEY.id: RuleScope(PAIR_TYPES),
        pair_rules.NO_EVENT_ON_COMPLETION_ERROR.id: RuleScope(PAIR_TYPES),
        pair_rules.COMM_EST_ON_FIRST_PACKET.id: RuleScope(frozenset({QPType.RC, QPType.UC})),
        operations.READ_DELIVERED.id: rc,
        operations.ATOMIC_DELIVERED.id: RuleScope(
            frozenset({QPType.RC}), frozenset({"ATOMICS"})),
        operations.ATOMIC_MISALIGNED_POST.id: RuleScope(
            frozenset({QPType.RC}), frozenset({"ATOMICS"})),
        operations.RC_ATOMIC_MISALIGNED.id: RuleScope(
            frozenset({QPType.RC}), frozenset({"ATOMICS"})),
        operations.OP_NOT_OF_TYPE.id: RuleScope(frozenset({QPType.UC, QPType.UD})),
        operations.WC_BYTE_LEN.id: RuleScope(frozenset({QPType.RC, QPType.UC})),
        operations.WC_BYTE_LEN_WRITE_IMM.id: RuleScope(frozenset({QPType.RC, QPType.UC})),
        operations.UD_WC_BYTE_LEN.id: RuleScope(frozenset({QPType.UD})),
        operations.UD_WC_SRC_QP.id: RuleScope(frozenset({QPType.UD})),
        operations.READ_DEPTH.id: rc,
        access.RC_MR_RIGHTS.id: rc,
        access.RC_BOUNDS.id: rc,
        access.RC_OTHER_PD.id: rc,
        access.ACCESS_EVENT.id: rc,
        access.UC_REFUSED.id: RuleScope(frozenset({QPType.UC})),
        access.RC_QP_RIGHTS.id: rc,
        access.UC_QP_RIGHTS.id: RuleScope(frozenset({QPType.UC})),
        access.GUARD.id: RuleScope(PAIR_TYPES),  # UD: a local SGE in a target (a SEND's)
        local_access.LOCAL_BOUNDS.id: RuleScope(PAIR_TYPES),
        local_access.LOCAL_OTHER_PD.id: RuleScope(PAIR_TYPES),
        local_access.SINK_RIGHTS.id: rc,
        local_access.RECV_RIGHTS.id: rc,
        access.WRITE_PLACED.id: RuleScope(frozenset({QPType.RC, QPType.UC})),
        qkey.MISMATCH.id: RuleScope(frozenset({QPType.UD})),
    }
    for rule in (*srq.RULES, *srq_sizes.RULES):  # an SRQ's QP: every connected type, on a
        # device with SRQs
        if rule is not srq.NO_LAST_WQE_WITHOUT_SRQ:  # that one: any QP, any device
            scopes.setdefault(rule.id, RuleScope(PAIR_TYPES, _srq_features(rule)))
    for rule in shared_cq.RULES:  # a pair's CQs (an end's shared with its bystander)
        scopes.setdefault(rule.id, RuleScope(PAIR_TYPES))
    for rule in operations.RULES:  # the rest concern every connected type
        scopes.setdefault(rule.id, RuleScope(PAIR_TYPES))
    for vr in VALUE_RULES:  # a value is checked on the types whose modify carries its bit
        scopes.setdefault(vr.rule.id, RuleScope(_bit_types(vr.bit)))
    return scopes


@cache
def _scopes() -> dict[str, RuleScope]:
    """Every rule's scope, from where the model consults it: a transition rule on its QP
    type, in its two states; an invalid pair on the types whose table lacks it, from its
    current state; a post rule on each (type, state) whose post the model decides by it.
    A rule consulted in several situations needs the features all of them need."""
    situations: dict[str, list[tuple[QPType, frozenset[str]]]] = {}

    def seen(rule_id: str, qp_type: QPType, features: frozenset[str]) -> None:
        situations.setdefault(rule_id, []).append((qp_type, features))

    for name in VARIANTS:
        v = parse_variant(name)
        table = v.table
        for t in table:
            feats = _features(t.qp_type, t.cur, t.nxt)
            for suffix in ("", f".{rules.REQUIRED_MISSING}", f".{rules.EXTRA_BITS}"):
                seen(t.rule.id + suffix, t.qp_type, feats)
        for cur in STATES:
            for nxt in STATES:
                for q in table.qp_types:
                    if table.lookup(q, cur, nxt) is None:  # requesting nxt needs no feature
                        seen(table.invalid_rule(cur, nxt).id, q, _features(q, cur))
        for q in table.qp_types:
            for verb in POST_VERBS:
                for state in STATES:
                    seen(post_expectation(q, verb, state, v).rule.id, q, _features(q, state))
    scopes = {
        rule_id: RuleScope(
            frozenset(q for q, _ in found), frozenset.intersection(*(f for _, f in found)))
        for rule_id, found in situations.items()
    }
    for rule_id, scope in _named_scopes().items():  # where the model does not say it
        scopes.setdefault(rule_id, scope)
    return scopes


def rule_scope(rule: Rule | str) -> RuleScope:
    """The QP types a rule concerns and the optional features it needs (a rule the model
    consults on any QP, e.g. a uverbs mask check: every type, no feature)."""
    rule_id = rule if isinstance(rule, str) else rule.id
    return _scopes().get(rule_id, RuleScope())


#: Why a rule of the catalogue was exercised zero times (the report's `why_not`).
TYPE_UNSUPPORTED = "type_unsupported"  #: every type it concerns: refused or not selected
FEATURE_MISSING = "feature_missing"  #: it needs an optional feature the device lacks
NOT_REACHED = "not_reached"  #: it applies to the device; no test of the run reached it
DEVICE_CHOSE = "device_chose"  #: only a "may" choice the device never made leads to it
WHY_NOT = (NOT_REACHED, TYPE_UNSUPPORTED, FEATURE_MISSING, DEVICE_CHOSE)

#: Rules only one outcome of a "may" rule leads to: rule -> (that "may" rule, the choice).
#: A device that always chose otherwise never takes the path: rdma-core's rxe provider
#: refuses every misaligned atomic at post, so no NAK of one is ever seen on rxe.
GATED_BY_CHOICE: dict[str, tuple[str, str]] = {
    operations.RC_ATOMIC_MISALIGNED.id: (operations.ATOMIC_MISALIGNED_POST.id, "accepted"),
}


def why_not(
    rule: Rule | str,
    available: Iterable[QPType | str],
    capabilities: Capabilities,
    choices: Mapping[str, Mapping[str, int]] | None = None,
) -> str:
    """Why a rule a run never exercised was not: `available` are the QP types the run
    selected and the device could create, `capabilities` the device's features, `choices`
    what the device chose under each "may" rule (rule id -> choice -> count)."""
    scope = rule_scope(rule)
    have = {QPType[t] if isinstance(t, str) else QPType(t) for t in available}
    if not scope.qp_types & have:
        return TYPE_UNSUPPORTED
    if any(not capabilities.has(f) for f in scope.features):
        return FEATURE_MISSING
    gate = GATED_BY_CHOICE.get(rule if isinstance(rule, str) else rule.id)
    if gate is not None and (choices or {}).get(gate[0]) and gate[1] not in choices[gate[0]]:
        return DEVICE_CHOSE
    return NOT_REACHED
