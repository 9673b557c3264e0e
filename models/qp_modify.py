"""ModifyJudge: how one QP judges modify_qp, and what the modifies it judged left in force.

The checks in Linux's order (uverbs' ABI checks, the table, the attribute values: the value
rules of models/attributes.py that the mask brings into play), then the transition an
accepted modify makes; under a connection-managed variant (`iwarp`, models/variant.py) an
iWARP RNIC's rules instead. QPModel (models/qp.py) proposes the verdict and, once the
device answered, lets the judge book the access flags in force.
"""

import errno
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import lru_cache
from typing import Protocol

from models import outside_mask, rules, uverbs
from models.attributes import PSN_MASKED, DeviceCaps, ValueRule, VariantFacts
from models.enums import QP_ERROR_EVENTS, STANDARD_BITS, Attr, EventType, QPState, QPType
from models.outcomes import Expectation, ExpectedCompletion, Outcome, expect
from models.proposal import Effect
from models.readback import Stored
from models.sources import MAY, Rule
from models.srq import SRQ_KEEPS_RECEIVES, SRQModel
from models.table import CUR_STATE_ALLOWED_FROM, Transition
from models.variant import Variant
from models.work_queues import WorkQueues

S = QPState
_EINVAL = frozenset({errno.EINVAL})

#: A verdict: the expectation, and what accepting it does.
Verdict = tuple[Expectation, Effect]


class ModifiedQP(Protocol):
    """What judging a modify reads and changes of its QP (models/qp.py's QPModel)."""

    qp_type: QPType
    variant: Variant
    caps: DeviceCaps
    srq: SRQModel | None
    state: QPState
    port: int | None
    draining: bool
    notify_requested: bool
    queues: WorkQueues
    stored: Stored

    def enter(self, state: QPState) -> None:
        """The QP is now in `state`."""

    def err_events(self, before: QPState) -> tuple[EventType, ...]:
        """The events entering ERR from `before` owes."""
        return ()

    def err_checked(self, before: QPState) -> list[Rule]:
        """What entering ERR from `before` checks beyond its own rule."""
        return []


def broken_value_rules(
    attrs: Mapping[str, int], mask: Attr, caps: DeviceCaps, variant: VariantFacts
) -> list[ValueRule]:
    """The value rules of `variant` broken by the attributes a mask selects (fields absent:
    not checked)."""
    broken = []
    for vr in _selected(variant, int(mask)):
        try:
            ok = vr.valid(attrs, caps)
        except KeyError:
            continue  # the field was not given: nothing to check
        if not ok:
            broken.append(vr)
    return broken


@lru_cache(maxsize=4096)  # variants and their rules never change; a mask recurs every step
def _selected(variant: VariantFacts, mask: int) -> tuple[ValueRule, ...]:
    """The value rules of `variant` that a mask brings into play, in their order."""
    return tuple(vr for vr in variant.value_rules if mask & int(vr.bit))


def rules_for(mask: Attr, variant: VariantFacts) -> list[Rule]:
    """Every value rule of `variant` that a mask brings into play (for coverage)."""
    found = [vr.rule for vr in _selected(variant, int(mask))]
    if variant.masks_psn and mask & (Attr.SQ_PSN | Attr.RQ_PSN):
        found.append(PSN_MASKED)
    return found


def drain_events(notify: bool) -> tuple[tuple[EventType, ...], tuple[EventType, ...]]:
    """The events an SQD drain that just ended owes, and those it forbids (SQ_DRAINED is
    due only when the move to SQD asked for it)."""
    if notify:
        return (EventType.SQ_DRAINED,), QP_ERROR_EVENTS
    return (), (*QP_ERROR_EVENTS, EventType.SQ_DRAINED)


def abi_refusal(
    attrs: Mapping[str, int], mask: Attr, checked: list[Rule]
) -> tuple[Rule, frozenset[int]] | None:
    """What uverbs refuses of any modify on any device, with its errnos: a mask bit the
    ABI does not define, a state out of range. None: neither."""
    checked.append(rules.UNKNOWN_MASK_BITS)
    if int(mask) & ~(int(STANDARD_BITS) | int(Attr.RATE_LIMIT)):
        return rules.UNKNOWN_MASK_BITS, frozenset({errno.EOPNOTSUPP})
    checked.append(rules.STATE_RANGE)
    if (Attr.STATE in mask and attrs["qp_state"] > S.ERR) or (
        Attr.CUR_STATE in mask and attrs["cur_qp_state"] > S.ERR
    ):
        return rules.STATE_RANGE, _EINVAL
    return None


def _variant_of(rule: Rule, suffix: str, detail: str) -> Rule:
    summary = f"{rule.summary}; this mask {detail}"
    return replace(rule, id=f"{rule.id}.{suffix}", summary=summary)


class ModifyJudge:
    """One QP's modify_qp checks and transitions, and the access flags the modifies it
    judged left in force."""

    def __init__(self, qp: ModifiedQP) -> None:
        self.qp = qp
        self._mask = Attr(0)  # the mask of the last modify proposed
        self._flags: int | None = None  # its qp_access_flags, when the mask has them
        #: The qp_access_flags in force, as the last accepted modify with IBV_QP_ACCESS_FLAGS
        #: set them (None: none since RESET; nothing is judged by them: models/access.py).
        self.access_flags: int | None = None

    def verdict(self, attrs: Mapping[str, int], mask: Attr | int) -> Verdict:
        """modify_qp(attr, mask): accepted or refused, and what follows."""
        qp = self.qp
        mask = Attr(int(mask))
        self._mask = mask
        self._flags = (int(attrs["qp_access_flags"]) if Attr.ACCESS_FLAGS in mask
                       and "qp_access_flags" in attrs else None)
        # what query_qp is compared with after it (iwarp: the state only)
        checked: list[Rule] = (
            qp.stored.rules(mask, attrs) if qp.variant.reads_back_attributes else []
        )
        if not Attr.STATE & mask:  # qp_state left out: the outcome must not read it
            checked.append(outside_mask.OUTSIDE_MASK)
        refuse = self._refuser(attrs, mask, checked)
        refusal = abi_refusal(attrs, mask, checked)
        if refusal is not None:
            return refuse(*refusal)
        if qp.variant.connection_managed:
            return self._modify_iwarp(attrs, mask, checked, refuse)
        return self._modify_ib(attrs, mask, checked, refuse)

    def take_flags(self) -> None:
        """The device accepted the modify last judged: the access flags it set are in force
        (RESET: none)."""
        if self._flags is not None:
            self.access_flags = self._flags
        if self.qp.state == S.RESET:
            self.access_flags = None

    def follow_refused(self, exp: Expectation) -> None:
        """The device accepted the modify the model refused: follow it to the requested
        state, forgetting what it may have stored."""
        qp = self.qp
        qp.stored.forget(None if exp.state_if_accepted == S.RESET else self._mask)
        if exp.state_if_accepted != qp.state:
            qp.enter(exp.state_if_accepted)

    def _refuser(
        self, attrs: Mapping[str, int], mask: Attr, checked: list[Rule]
    ) -> Callable[..., Verdict]:
        """refuse(rule, errnos=EINVAL): this modify refused by `rule`, the QP left where it is
        (a device that wrongly accepts it is followed to the state it asked for)."""
        qp = self.qp
        asked = attrs.get("qp_state", S.UNKNOWN) if Attr.STATE in mask else qp.state
        requested = S(asked) if asked <= S.ERR else qp.state
        # RATE_LIMIT travels only in the extended command: providers using the legacy one
        # (ibv_cmd_modify_qp) refuse it with EOPNOTSUPP before any other check.
        legacy = frozenset({errno.EOPNOTSUPP}) if Attr.RATE_LIMIT in mask else frozenset()

        def refuse(rule: Rule, errnos: frozenset[int] = _EINVAL) -> Verdict:
            checked.append(rule)
            return expect(
                "modify", Outcome.REFUSE, rule, qp.state, requested, errnos=errnos | legacy,
                checked=checked,
            ), None

        return refuse

    def _through_uverbs(
        self, attrs: Mapping[str, int], mask: Attr, checked: list[Rule]
    ) -> tuple[Attr, Mapping[str, int], tuple[Rule, frozenset[int]] | None]:
        """The mask and attributes uverbs hands the driver (models/uverbs.py), and its
        refusal with the errnos (None: it lets the modify through)."""
        qp = self.qp
        mask, rewritten, refusal, consulted = uverbs.rewrite(
            qp.qp_type, attrs, mask, qp.port, qp.caps.privileged_qkey
        )
        checked.extend(consulted)
        if refusal is None:
            return mask, rewritten, None
        return mask, rewritten, (refusal, uverbs.REFUSAL_ERRNOS.get(refusal.id, _EINVAL))

    def _modify_ib(
        self,
        attrs: Mapping[str, int],
        mask: Attr,
        checked: list[Rule],
        refuse: Callable[..., Verdict],
    ) -> Verdict:
        """modify_qp on an InfiniBand or RoCE QP, after the checks every device gets: uverbs
        (under the Linux ABI), the table, the attribute values, then the transition."""
        qp = self.qp
        if qp.variant.enforces_linux_abi:
            mask, attrs, refusal = self._through_uverbs(attrs, mask, checked)
            if refusal is not None:
                return refuse(*refusal)
        cur = S(attrs["cur_qp_state"]) if Attr.CUR_STATE in mask else qp.state
        nxt = S(attrs["qp_state"]) if Attr.STATE in mask else cur
        entry = self._table_entry(cur, nxt, mask, checked)
        if isinstance(entry, Rule):
            return refuse(entry)
        checked.extend(rules_for(mask, qp.variant))
        broken = broken_value_rules(attrs, mask, qp.caps, qp.variant)
        strict = [vr for vr in broken if vr.rule.kind != MAY]
        if strict:
            return refuse(strict[0].rule, strict[0].errnos)
        outcome, rule, errnos = self._table_verdict(entry, broken, cur, mask, checked)
        exp, effect = self._transition(nxt, attrs, mask, outcome, rule, checked)
        if errnos is not None:
            exp = replace(exp, errnos=errnos)
        return exp, effect

    def _table_entry(
        self, cur: QPState, nxt: QPState, mask: Attr, checked: list[Rule]
    ) -> Transition | Rule:
        """The table's entry for cur -> nxt under this mask, or the rule that refuses it:
        CUR_STATE given where it may not be, no entry, a required bit missing, or a bit the
        entry does not allow (ib_modify_qp_is_ok(): the variant refuses extra bits)."""
        qp = self.qp
        if Attr.CUR_STATE in mask:
            checked.append(rules.CUR_STATE_ALLOWED)
            if cur not in CUR_STATE_ALLOWED_FROM:
                return rules.CUR_STATE_ALLOWED
        entry = qp.variant.table.lookup(qp.qp_type, cur, nxt)
        if entry is None:
            return qp.variant.table.invalid_rule(cur, nxt)
        checked.append(entry.rule)
        if mask & entry.required != entry.required:
            missing = "|".join(Attr(entry.required & ~int(mask)).names())
            return _variant_of(entry.rule, rules.REQUIRED_MISSING, f"misses {missing}")
        extra = int(mask) & ~int(entry.allowed)
        if extra:
            extra_names = "|".join(Attr(extra).names())
            return _variant_of(entry.rule, rules.EXTRA_BITS, f"adds {extra_names}")
        return entry

    def _table_verdict(
        self,
        entry: Transition,
        broken: list[ValueRule],
        cur: QPState,
        mask: Attr,
        checked: list[Rule],
    ) -> tuple[Outcome, Rule, frozenset[int] | None]:
        """A modify the table allows: accepted by its entry, unless a "may" value rule is
        broken (the driver refuses the value or stores it masked) or CUR_STATE names another
        state than the QP's (the driver may trust it or not): then either."""
        qp = self.qp
        if broken:
            return Outcome.EITHER, broken[0].rule, broken[0].errnos
        if Attr.CUR_STATE in mask and cur != qp.state:
            checked.append(rules.CUR_STATE_ASSUMED)
            return Outcome.EITHER, rules.CUR_STATE_ASSUMED, None
        return Outcome.ACCEPT, entry.rule, None

    def _transition(
        self,
        nxt: QPState,
        attrs: Mapping[str, int],
        mask: Attr,
        outcome: Outcome,
        rule: Rule,
        checked: list[Rule],
    ) -> tuple[Expectation, Callable[[], None]]:
        """Expectation and effect of an accepted modify to nxt."""
        qp = self.qp
        cur = qp.state
        completions: tuple[ExpectedCompletion, ...] = ()
        events: tuple[EventType, ...] = ()
        forbidden: tuple[EventType, ...] = QP_ERROR_EVENTS
        never_run: frozenset[int] = frozenset()
        notify = Attr.EN_SQD_ASYNC_NOTIFY in mask and bool(attrs.get("en_sqd_async_notify", 0))

        if nxt == S.ERR and cur != S.ERR:
            checked.append(rules.FLUSH_ON_ERROR)
            completions = qp.queues.flushes()
            events = qp.err_events(cur)
            checked.extend(qp.err_checked(cur))
        elif nxt == S.RESET:
            checked.append(rules.DISCARD_ON_RESET)
            never_run = frozenset(qp.queues.outstanding_sends) | frozenset(qp.queues.recvs)
            if qp.srq is not None:  # RESET discards the QP's WRs, not its SRQ's
                checked.append(SRQ_KEEPS_RECEIVES)
        elif cur == S.RTS and nxt == S.SQD:
            checked.append(rules.SQD_DRAINED_EVENT)
            if not qp.queues.in_flight:
                events, forbidden = drain_events(notify)
        if nxt != S.SQD or cur != S.RTS:
            forbidden = (*forbidden, EventType.SQ_DRAINED) if not qp.draining else forbidden

        def effect() -> None:
            if nxt == S.ERR and cur != S.ERR:
                qp.queues.flush_all()
            elif nxt == S.RESET:
                qp.queues.discard_all()
            elif cur == S.RTS and nxt == S.SQD:
                qp.notify_requested, qp.draining = notify, bool(qp.queues.in_flight)
            elif nxt == S.RTS:
                qp.queues.start_waiting()
            if Attr.PORT in mask:
                qp.port = attrs["port_num"]
            if nxt == S.RESET:
                qp.stored.forget()
            else:
                qp.stored.store(attrs, mask)
            qp.enter(nxt)

        exp = expect(
            "modify",
            outcome,
            rule,
            cur,
            nxt,
            completions=completions,
            events=events,
            forbidden_events=forbidden,
            never_run=never_run,
            checked=checked,
        )
        return exp, effect

    # ------------------------------------------------------------------------------ iWARP
    def _modify_iwarp(
        self,
        attrs: Mapping[str, int],
        mask: Attr,
        checked: list[Rule],
        refuse: Callable[..., Verdict],
    ) -> Verdict:
        """modify_qp on an iWARP QP, after the uverbs mask and state checks every device gets.

        In Linux's order: uverbs rewrites and checks the mask and values (port, AV, Q_Key),
        the core checks GIDs and bans alternate paths (APM is IB only), then the driver:
        RATE_LIMIT refused, the iwarp table from the QP's own state (CUR_STATE is not
        checked), a "may" entry or an IB-only attribute lets the driver refuse.
        """
        qp = self.qp
        if qp.qp_type not in qp.variant.qp_types:
            exp = expect("modify", Outcome.REFUSE, rules.IWARP_RC_ONLY, qp.state)
            return exp, None
        if Attr.RATE_LIMIT in mask:
            checked.append(rules.IWARP_RATE_LIMIT)
            return refuse(rules.IWARP_RATE_LIMIT, frozenset({errno.EOPNOTSUPP}))
        mask, attrs, refusal = self._through_uverbs(attrs, mask, checked)
        if refusal is not None:
            return refuse(*refusal)
        checked.extend(rules_for(mask, qp.variant))
        broken = broken_value_rules(attrs, mask, qp.caps, qp.variant)
        strict = [vr for vr in broken if vr.rule.kind != MAY]
        if strict:  # uverbs and core: before any driver
            return refuse(strict[0].rule, strict[0].errnos)

        cur = qp.state
        nxt = S(attrs["qp_state"]) if Attr.STATE in mask else cur
        entry = qp.variant.table.lookup(qp.qp_type, cur, nxt)
        if entry is None:
            return refuse(qp.variant.table.invalid_rule(cur, nxt, qp.qp_type))
        checked.append(entry.rule)
        outcome, rule, errnos = self._iwarp_verdict(entry, attrs, mask, broken, checked)
        exp, effect = self._transition_iwarp(
            entry.after, entry.may_land, mask, attrs, outcome, rule, checked
        )
        if errnos is not None:
            exp = replace(exp, errnos=errnos)
        return exp, effect

    def _iwarp_verdict(
        self,
        entry: Transition,
        attrs: Mapping[str, int],
        mask: Attr,
        broken: list[ValueRule],
        checked: list[Rule],
    ) -> tuple[Outcome, Rule, frozenset[int] | None]:
        """A modify the iwarp table has an entry for: accepted, or either when the drivers
        differ on it (a "may" entry), the mask holds IB-only bits, CUR_STATE names another
        state (not checked), or a "may" value rule is broken; the first reason names it."""
        qp = self.qp
        cur = qp.state
        outcome, rule, errnos = Outcome.ACCEPT, entry.rule, None
        if entry.rule.kind == MAY:
            outcome = Outcome.EITHER
        if int(mask) & ~int(entry.allowed | Attr.CUR_STATE):
            checked.append(rules.IWARP_IB_ATTRIBUTES)
            if outcome is Outcome.ACCEPT:
                outcome, rule = Outcome.EITHER, rules.IWARP_IB_ATTRIBUTES
        if Attr.CUR_STATE in mask:
            checked.append(rules.IWARP_CUR_STATE)
            if attrs["cur_qp_state"] != cur and outcome is Outcome.ACCEPT:
                outcome, rule = Outcome.EITHER, rules.IWARP_CUR_STATE
        if broken and outcome is Outcome.ACCEPT:  # only "may" value rules are left
            outcome, rule, errnos = Outcome.EITHER, broken[0].rule, broken[0].errnos
        return outcome, rule, errnos

    def _transition_iwarp(
        self,
        after: QPState,
        may_land: frozenset[QPState],
        mask: Attr,
        attrs: Mapping[str, int],
        outcome: Outcome,
        rule: Rule,
        checked: list[Rule],
    ) -> tuple[Expectation, Callable[[], None]]:
        """Expectation and effect of an accepted iWARP modify that leaves the QP in `after`.

        Entering ERR, or closing the connection (RTS->SQD/SQE), flushes every outstanding
        WR; IDLE to IDLE keeps them queued; a QP without a connection raises no event (one
        with a connection may: the close is the connection manager's, not modelled yet).
        """
        qp = self.qp
        cur = qp.state
        idle = (S.RESET, S.INIT, S.RTR)
        flush = (after == S.ERR and cur != S.ERR) or (cur == S.RTS and after in (S.SQD, S.SQE))
        completions: tuple[ExpectedCompletion, ...] = ()
        forbidden: tuple[EventType, ...] = ()
        events: tuple[EventType, ...] = ()
        if flush:
            checked.append(rules.IWARP_FLUSH_ON_ERROR)
            completions = qp.queues.flushes()
        if after == S.ERR and cur != S.ERR:
            events = qp.err_events(cur)
            checked.extend(qp.err_checked(cur))
        elif cur in idle and after in idle:
            checked.append(rules.IWARP_IDLE_KEEPS_WRS)
        if cur in (*idle, S.ERR):
            checked.append(rules.IWARP_MODIFY_NO_EVENT)
            forbidden = (*QP_ERROR_EVENTS, EventType.SQ_DRAINED)

        def effect() -> None:
            if flush:
                qp.queues.flush_all()
            if Attr.PORT in mask:
                qp.port = attrs["port_num"]
            qp.enter(after)

        exp = expect(
            "modify",
            outcome,
            rule,
            cur,
            after,
            completions=completions,
            events=events,
            forbidden_events=forbidden,
            checked=checked,
        )
        return replace(exp, may_land=may_land), effect
