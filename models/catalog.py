"""Which rules exist: the model's own answer, so nobody scans module globals for it.

`variant_rules` is every rule one variant's model can consult (a report's
catalogue and coverage, reports/qualification.py); `all_rules` is every rule a
divergence record can name (the check of the quirk files' rule globs,
qpconform/engine/quirks.py). Both are built from the `RULES` tuple each model
module declares, the transition table, the value rules and what the model says
about every post.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from models import iwarp_pair, pair, pair_checks, readback, rules, uverbs
from models.attributes import PSN_MASKED
from models.enums import STATES, QPState, QPType
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
    for module in (rules, pair, readback):
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
