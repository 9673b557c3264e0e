"""QPModel: the reference model of one Queue Pair.

Each verb method returns an `Expectation` without changing the model; the
caller then reports what the device did with `apply(expectation, accepted)`.
This two-step protocol keeps the model honest about "a failed verb changes
nothing" and lets the harness follow a device through an accepted (quirked)
divergence. Automatic events (transport errors, completions) are facts and
take effect at once.

Under a connection-managed variant (`iwarp`, models/variant.py) modify and the posts follow
an iWARP RNIC's rules instead (`_modify_iwarp`, `_post_iwarp`): RESET, INIT and RTR are all
IDLE (WRs stay queued across them), RTS is reached only through the connection
manager, IB-only attributes are left to the driver, nothing is read back but the
state, and where the iWARP drivers differ the expectation is "either".
"""

import errno
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from models import rules, uverbs
from models.attributes import DeviceCaps, ValueRule, broken_value_rules, rules_for
from models.enums import STANDARD_BITS, Attr, EventType, QPState, QPType, WCStatus
from models.outcomes import Expectation, ExpectedCompletion, Outcome
from models.readback import Stored
from models.sources import MAY, Rule
from models.table import CUR_STATE_ALLOWED_FROM, Transition, TransitionTable
from models.variant import LINUX, Variant
from models.variant import variant as parse_variant

S = QPState
_ERROR_EVENTS = (EventType.QP_FATAL, EventType.QP_REQ_ERR, EventType.QP_ACCESS_ERR)
_SQE_TYPES = frozenset({QPType.UD, QPType.UC})
_NO_RQ_TYPES = frozenset({QPType.XRC_SEND, QPType.XRC_RECV})
_EINVAL = frozenset({errno.EINVAL})


@dataclass
class _SendWR:
    wr_id: int
    started: bool  # False while held in SQD: posted but not yet handed to the transport


class QPModel:
    """Expected behaviour of one QP of a given type under a table variant."""

    def __init__(
        self,
        qp_type: QPType,
        variant: Variant | str = LINUX,
        caps: DeviceCaps | None = None,
    ) -> None:
        self.qp_type = QPType(qp_type)
        self.variant = parse_variant(variant)
        self.caps = caps or DeviceCaps()
        self.state = S.RESET
        self.sends: list[_SendWR] = []
        self.recvs: list[int] = []
        self.never_run: set[int] = set()
        self.notify_requested = False
        self.draining = False
        self.destroyed = False
        self.port: int | None = None  # the port bound by RESET->INIT (uverbs checks AV against it)
        self.awaiting_first_packet = False  # in RTR, nothing received yet (COMM_EST may come)
        self.stored = Stored()  # the attributes query_qp must report (models/readback.py)
        self._modify_mask = Attr(0)  # the mask of the last modify proposed
        self._proposed: tuple[Expectation, Callable[[], None] | None, int | None] | None = None

    # ----------------------------------------------------------------- queries of the model
    @property
    def table(self) -> TransitionTable:
        """The variant's transition table."""
        return self.variant.table

    @property
    def outstanding_sends(self) -> list[int]:
        """Send WRs posted and not yet completed, in posting order."""
        return [w.wr_id for w in self.sends]

    @property
    def in_flight(self) -> list[int]:
        """Send WRs handed to the transport and not yet completed."""
        return [w.wr_id for w in self.sends if w.started]

    def snapshot(self) -> tuple:
        """Everything a verb may change, for 'a refused verb changes nothing' checks."""
        return (
            self.state,
            tuple((w.wr_id, w.started) for w in self.sends),
            tuple(self.recvs),
            frozenset(self.never_run),
            self.notify_requested,
            self.draining,
            self.destroyed,
            self.stored.snapshot(),
        )

    # ----------------------------------------------------------------------------- verbs
    def modify(self, attrs: Mapping[str, int], mask: Attr | int) -> Expectation:
        """modify_qp(attr, mask): accepted or refused, and what follows."""
        mask = Attr(int(mask))
        self._modify_mask = mask
        # what query_qp is compared with after it (iwarp: the state only)
        checked: list[Rule] = self.stored.rules(mask) if self.variant.reads_back_attributes else []
        refuse = self._refuser(attrs, mask, checked)
        refusal = self._abi_refusal(attrs, mask, checked)
        if refusal is not None:
            return refuse(*refusal)
        if self.variant.connection_managed:
            return self._modify_iwarp(attrs, mask, checked, refuse)
        return self._modify_ib(attrs, mask, checked, refuse)

    def query(self) -> Expectation:
        """query_qp: always accepted, reports the current state (under one of the names
        `reported()` allows)."""
        rule = self.variant.query_rule
        return self._propose(
            self._exp(
                "query", Outcome.ACCEPT, rule, self.state, checked=[rule, *self.stored.rules()]
            ),
            None,
        )

    def reported(self, state: QPState | None = None) -> frozenset[QPState]:
        """The states query_qp may report for a QP in `state` (default: the model's).

        Only the iwarp variant has more than one: IDLE entered as RESET or RTR may read
        back as INIT, and a closing QP may already read back as where the close ends."""
        return self.table.reported(self.state if state is None else state)

    def post_send(self, wr_id: int) -> Expectation:
        """post_send of one signaled WR."""
        st = self.state
        if self.variant.connection_managed:
            return self._post_iwarp("send", wr_id)
        if self.qp_type == QPType.XRC_RECV:  # no send queue at all: any errno
            exp = self._exp("post_send", Outcome.REFUSE, rules.XRC_RECV_NO_SQ, st)
            return self._propose_post(exp, wr_id)
        if st in (S.RESET, S.INIT, S.RTR):
            rule = rules.post_rule("send", st.name, False, "refused, the WR must never run")
            return self._propose_post(self._exp("post_send", Outcome.REFUSE, rule, st), wr_id)
        if st in (S.SQE, S.ERR):
            rule = rules.post_rule("send", st.name, True, "accepted and completed with flush error")
            flush = (ExpectedCompletion(wr_id, "send", WCStatus.WR_FLUSH_ERR),)
            exp = self._exp("post_send", Outcome.ACCEPT, rule, st, completions=flush)
            return self._propose(exp, None, wr_id)
        started = st == S.RTS
        rule = (
            rules.post_rule("send", st.name, True, "accepted and started")
            if started
            else rules.SQD_HOLDS_NEW_SENDS
        )
        exp = self._exp("post_send", Outcome.ACCEPT, rule, st)
        return self._propose(exp, lambda: self.sends.append(_SendWR(wr_id, started)), wr_id)

    def post_recv(self, wr_id: int) -> Expectation:
        """post_recv of one WR."""
        st = self.state
        if self.variant.connection_managed:
            return self._post_iwarp("recv", wr_id)
        if self.qp_type in _NO_RQ_TYPES:  # no receive queue at all: any errno
            exp = self._exp("post_recv", Outcome.REFUSE, rules.XRC_NO_RQ, st)
            return self._propose_post(exp, wr_id)
        if st == S.RESET:
            rule = rules.post_rule("recv", st.name, False, "refused, the WR must never run")
            return self._propose_post(self._exp("post_recv", Outcome.REFUSE, rule, st), wr_id)
        if st == S.ERR:
            rule = rules.post_rule("recv", st.name, True, "accepted and completed with flush error")
            flush = (ExpectedCompletion(wr_id, "recv", WCStatus.WR_FLUSH_ERR),)
            return self._propose(
                self._exp("post_recv", Outcome.ACCEPT, rule, st, completions=flush), None, wr_id
            )
        rule = rules.post_rule("recv", st.name, True, "accepted and queued")
        exp = self._exp("post_recv", Outcome.ACCEPT, rule, st)
        return self._propose(exp, lambda: self.recvs.append(wr_id), wr_id)

    def destroy(self) -> Expectation:
        """destroy_qp: accepted; outstanding WRs are discarded and never run."""
        gone = frozenset(self.outstanding_sends) | frozenset(self.recvs)
        exp = self._exp("destroy", Outcome.ACCEPT, rules.DESTROY, self.state, never_run=gone)

        def effect() -> None:
            self._discard_all()
            self.destroyed = True

        return self._propose(exp, effect)

    def apply(self, exp: Expectation, accepted: bool) -> None:
        """Record what the device did with the last proposed verb (follows the device)."""
        if self._proposed is None or self._proposed[0] is not exp:
            raise RuntimeError("apply() must follow the verb that produced this expectation")
        _, effect, wr_id = self._proposed
        self._proposed = None
        if accepted:
            if exp.outcome is Outcome.REFUSE:  # a divergence the run goes on with (a quirk)
                self._follow_refused_accept(exp)
            elif effect is not None:
                effect()
        elif exp.verb.startswith("post_"):
            self.never_run.update(exp.never_run)
            if wr_id is not None:  # whoever refused it, a refused WR must never run
                self.never_run.add(wr_id)

    # ------------------------------------------------------------------- automatic events
    def send_completed(self, status: WCStatus = WCStatus.SUCCESS) -> Expectation:
        """The oldest in-flight send WR completed on the wire with `status`."""
        if not self.in_flight:
            raise RuntimeError("no send WR is in flight")
        head = next(w for w in self.sends if w.started)
        before = self.state
        if status == WCStatus.SUCCESS:
            self.sends.remove(head)
            done = (ExpectedCompletion(head.wr_id, "send", WCStatus.SUCCESS),)
            events, forbidden = self._drain_progress()
            return self._exp(
                "send_completion",
                Outcome.ACCEPT,
                rules.SEND_DONE,
                before,
                completions=done,
                events=events,
                forbidden_events=forbidden,
            )
        first = (ExpectedCompletion(head.wr_id, "send", WCStatus(status)),)
        self.sends.remove(head)
        if self.qp_type in _SQE_TYPES:
            flushed = self._flush_sends()
            self._enter(S.SQE)
            return self._exp(
                "send_completion",
                Outcome.ACCEPT,
                rules.SQE_ON_SEND_ERROR,
                before,
                completions=first + flushed,
                forbidden_events=(EventType.SQ_DRAINED,),
            )
        flushed = self._flush_all()
        self._enter(S.ERR)
        return self._exp(
            "send_completion",
            Outcome.ACCEPT,
            rules.ERR_ON_SEND_ERROR,
            before,
            completions=first + flushed,
            forbidden_events=(EventType.SQ_DRAINED,),
        )

    def recv_completed(self, status: WCStatus = WCStatus.SUCCESS) -> Expectation:
        """An incoming message consumed the oldest receive WR with `status`."""
        if not self.recvs:
            raise RuntimeError("no receive WR is outstanding")
        wr_id = self.recvs.pop(0)
        before = self.state
        done = (ExpectedCompletion(wr_id, "recv", WCStatus(status)),)
        if status == WCStatus.SUCCESS:
            return self._exp(
                "recv_completion", Outcome.ACCEPT, rules.RECV_DONE, before, completions=done
            )
        flushed = self._flush_all()
        self._enter(S.ERR)
        return self._exp(
            "recv_completion",
            Outcome.ACCEPT,
            rules.ERR_ON_RECV_ERROR,
            before,
            completions=done + flushed,
        )

    def async_error(self, event: EventType) -> Expectation:
        """An affiliated error the device detected outside any WR: ERR, flush, the event."""
        if event not in _ERROR_EVENTS:
            raise ValueError(f"{event!r} is not an affiliated QP error event")
        before = self.state
        flushed = self._flush_all()
        self._enter(S.ERR)
        return self._exp(
            "async_error",
            Outcome.ACCEPT,
            rules.ERR_ON_ASYNC_ERROR,
            before,
            completions=flushed,
            events=(event,),
        )

    # ------------------------------------------------------------------------ modify_qp
    def _refuser(
        self, attrs: Mapping[str, int], mask: Attr, checked: list[Rule]
    ) -> Callable[..., Expectation]:
        """refuse(rule, errnos=EINVAL): this modify refused by `rule`, the QP left where it is
        (a device that wrongly accepts it is followed to the state it asked for)."""
        asked = attrs.get("qp_state", S.UNKNOWN) if Attr.STATE in mask else self.state
        requested = S(asked) if asked <= S.ERR else self.state
        # RATE_LIMIT travels only in the extended command: providers using the legacy one
        # (ibv_cmd_modify_qp) refuse it with EOPNOTSUPP before any other check.
        legacy = frozenset({errno.EOPNOTSUPP}) if Attr.RATE_LIMIT in mask else frozenset()

        def refuse(rule: Rule, errnos: frozenset[int] = _EINVAL) -> Expectation:
            checked.append(rule)
            return self._propose(
                self._exp(
                    "modify", Outcome.REFUSE, rule, self.state, requested, errnos=errnos | legacy,
                    checked=checked,
                ),
                None,
            )

        return refuse

    @staticmethod
    def _abi_refusal(
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

    def _through_uverbs(
        self, attrs: Mapping[str, int], mask: Attr, checked: list[Rule]
    ) -> tuple[Attr, Mapping[str, int], tuple[Rule, frozenset[int]] | None]:
        """The mask and attributes uverbs hands the driver (models/uverbs.py), and its
        refusal with the errnos (None: it lets the modify through)."""
        mask, rewritten, refusal, consulted = uverbs.rewrite(
            self.qp_type, attrs, mask, self.port, self.caps.privileged_qkey
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
        refuse: Callable[..., Expectation],
    ) -> Expectation:
        """modify_qp on an InfiniBand or RoCE QP, after the checks every device gets: uverbs
        (under the Linux ABI), the table, the attribute values, then the transition."""
        if self.variant.enforces_linux_abi:
            mask, attrs, refusal = self._through_uverbs(attrs, mask, checked)
            if refusal is not None:
                return refuse(*refusal)
        cur = S(attrs["cur_qp_state"]) if Attr.CUR_STATE in mask else self.state
        nxt = S(attrs["qp_state"]) if Attr.STATE in mask else cur
        entry = self._table_entry(cur, nxt, mask, checked)
        if isinstance(entry, Rule):
            return refuse(entry)
        checked.extend(rules_for(mask, self.variant))
        broken = broken_value_rules(attrs, mask, self.caps, self.variant)
        strict = [vr for vr in broken if vr.rule.kind != MAY]
        if strict:
            return refuse(strict[0].rule, strict[0].errnos)
        outcome, rule, errnos = self._table_verdict(entry, broken, cur, mask, checked)
        exp, effect = self._transition(nxt, attrs, mask, outcome, rule, checked)
        if errnos is not None:
            exp = replace(exp, errnos=errnos)
        return self._propose(exp, effect)

    def _table_entry(
        self, cur: QPState, nxt: QPState, mask: Attr, checked: list[Rule]
    ) -> Transition | Rule:
        """The table's entry for cur -> nxt under this mask, or the rule that refuses it:
        CUR_STATE given where it may not be, no entry, a required bit missing, or a bit the
        entry does not allow (ib_modify_qp_is_ok(): the variant refuses extra bits)."""
        if Attr.CUR_STATE in mask:
            checked.append(rules.CUR_STATE_ALLOWED)
            if cur not in CUR_STATE_ALLOWED_FROM:
                return rules.CUR_STATE_ALLOWED
        entry = self.table.lookup(self.qp_type, cur, nxt)
        if entry is None:
            return self.table.invalid_rule(cur, nxt)
        checked.append(entry.rule)
        if mask & entry.required != entry.required:
            missing = "|".join(Attr(entry.required & ~int(mask)).names())
            return self._variant_of(entry.rule, rules.REQUIRED_MISSING, f"misses {missing}")
        extra = int(mask) & ~int(entry.allowed)
        if extra:
            extra_names = "|".join(Attr(extra).names())
            return self._variant_of(entry.rule, rules.EXTRA_BITS, f"adds {extra_names}")
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
        if broken:
            return Outcome.EITHER, broken[0].rule, broken[0].errnos
        if Attr.CUR_STATE in mask and cur != self.state:
            checked.append(rules.CUR_STATE_ASSUMED)
            return Outcome.EITHER, rules.CUR_STATE_ASSUMED, None
        return Outcome.ACCEPT, entry.rule, None

    # ------------------------------------------------------------------------------ iWARP
    def _modify_iwarp(
        self,
        attrs: Mapping[str, int],
        mask: Attr,
        checked: list[Rule],
        refuse: Callable[..., Expectation],
    ) -> Expectation:
        """modify_qp on an iWARP QP, after the uverbs mask and state checks every device gets.

        In Linux's order: uverbs rewrites and checks the mask and values (port, AV, Q_Key),
        the core checks GIDs and bans alternate paths (APM is IB only), then the driver:
        RATE_LIMIT refused, the iwarp table from the QP's own state (CUR_STATE is not
        checked), a "may" entry or an IB-only attribute lets the driver refuse.
        """
        if self.qp_type not in self.variant.qp_types:
            exp = self._exp("modify", Outcome.REFUSE, rules.IWARP_RC_ONLY, self.state)
            return self._propose(exp, None)
        if Attr.RATE_LIMIT in mask:
            checked.append(rules.IWARP_RATE_LIMIT)
            return refuse(rules.IWARP_RATE_LIMIT, frozenset({errno.EOPNOTSUPP}))
        mask, attrs, refusal = self._through_uverbs(attrs, mask, checked)
        if refusal is not None:
            return refuse(*refusal)
        checked.extend(rules_for(mask, self.variant))
        broken = broken_value_rules(attrs, mask, self.caps, self.variant)
        strict = [vr for vr in broken if vr.rule.kind != MAY]
        if strict:  # uverbs and core: before any driver
            return refuse(strict[0].rule, strict[0].errnos)

        cur = self.state
        nxt = S(attrs["qp_state"]) if Attr.STATE in mask else cur
        entry = self.table.lookup(self.qp_type, cur, nxt)
        if entry is None:
            return refuse(self.table.invalid_rule(cur, nxt, self.qp_type))
        checked.append(entry.rule)
        outcome, rule, errnos = self._iwarp_verdict(entry, attrs, mask, broken, checked)
        exp, effect = self._transition_iwarp(
            entry.after, entry.may_land, mask, attrs, outcome, rule, checked
        )
        if errnos is not None:
            exp = replace(exp, errnos=errnos)
        return self._propose(exp, effect)

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
        cur = self.state
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
        cur = self.state
        idle = (S.RESET, S.INIT, S.RTR)
        flush = (after == S.ERR and cur != S.ERR) or (cur == S.RTS and after in (S.SQD, S.SQE))
        completions: tuple[ExpectedCompletion, ...] = ()
        forbidden: tuple[EventType, ...] = ()
        if flush:
            checked.append(rules.IWARP_FLUSH_ON_ERROR)
            completions = self._flushes()
        elif cur in idle and after in idle:
            checked.append(rules.IWARP_IDLE_KEEPS_WRS)
        if cur in (*idle, S.ERR):
            checked.append(rules.IWARP_MODIFY_NO_EVENT)
            forbidden = (*_ERROR_EVENTS, EventType.SQ_DRAINED)

        def effect() -> None:
            if flush:
                self._flush_all()
            if Attr.PORT in mask:
                self.port = attrs["port_num"]
            self._enter(after)

        exp = self._exp(
            "modify",
            outcome,
            rule,
            cur,
            after,
            completions=completions,
            forbidden_events=forbidden,
            checked=checked,
        )
        return replace(exp, may_land=may_land), effect

    def _post_iwarp(self, queue: str, wr_id: int) -> Expectation:
        """post_send/post_recv on an iWARP QP: accepted in IDLE (receives) and RTS; elsewhere
        the provider may refuse, and an accepted WR is held (a send in IDLE) or flushed."""
        st, verb = self.state, f"post_{queue}"
        if self.qp_type not in self.variant.qp_types:  # no such QP: any errno
            return self._propose_post(
                self._exp(verb, Outcome.REFUSE, rules.IWARP_RC_ONLY, st), wr_id
            )
        if st == S.RTS or (queue == "recv" and st in (S.RESET, S.INIT, S.RTR)):
            rule = (
                rules.IWARP_SEND_RTS
                if queue == "send"
                else (rules.IWARP_RECV_RTS if st == S.RTS else rules.IWARP_RECV_IDLE[st.name])
            )
            started = queue == "send"

            def effect() -> None:
                if started:
                    self.sends.append(_SendWR(wr_id, True))
                else:
                    self.recvs.append(wr_id)

            return self._propose(self._exp(verb, Outcome.ACCEPT, rule, st), effect, wr_id)
        if queue == "send" and st in (S.RESET, S.INIT, S.RTR):
            exp = self._exp(verb, Outcome.EITHER, rules.IWARP_SEND_IDLE[st.name], st)
            return self._propose(exp, lambda: self.sends.append(_SendWR(wr_id, False)), wr_id)
        closed = rules.IWARP_SEND_CLOSED if queue == "send" else rules.IWARP_RECV_CLOSED
        flush = (ExpectedCompletion(wr_id, queue, WCStatus.WR_FLUSH_ERR),)
        exp = self._exp(verb, Outcome.EITHER, closed[st.name], st, completions=flush)
        return self._propose(exp, None, wr_id)

    # ------------------------------------------------------------------------- internals
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
        cur = self.state
        completions: tuple[ExpectedCompletion, ...] = ()
        events: tuple[EventType, ...] = ()
        forbidden: tuple[EventType, ...] = _ERROR_EVENTS
        never_run: frozenset[int] = frozenset()
        notify = Attr.EN_SQD_ASYNC_NOTIFY in mask and bool(attrs.get("en_sqd_async_notify", 0))

        if nxt == S.ERR and cur != S.ERR:
            checked.append(rules.FLUSH_ON_ERROR)
            completions = self._flushes()
        elif nxt == S.RESET:
            checked.append(rules.DISCARD_ON_RESET)
            never_run = frozenset(self.outstanding_sends) | frozenset(self.recvs)
        elif cur == S.RTS and nxt == S.SQD:
            checked.append(rules.SQD_DRAINED_EVENT)
            if not self.in_flight:
                events, forbidden = self._drain_events(notify)
        if nxt != S.SQD or cur != S.RTS:
            forbidden = (*forbidden, EventType.SQ_DRAINED) if not self.draining else forbidden

        def effect() -> None:
            if nxt == S.ERR and cur != S.ERR:
                self._flush_all()
            elif nxt == S.RESET:
                self._discard_all()
            elif cur == S.RTS and nxt == S.SQD:
                self.notify_requested, self.draining = notify, bool(self.in_flight)
            elif nxt == S.RTS:
                for w in self.sends:
                    w.started = True
            if Attr.PORT in mask:
                self.port = attrs["port_num"]
            if nxt == S.RESET:
                self.stored.forget()
            else:
                self.stored.store(attrs, mask)
            self._enter(nxt)

        exp = self._exp(
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

    def _drain_progress(self) -> tuple[tuple[EventType, ...], tuple[EventType, ...]]:
        """After a send completed: has an SQD drain just ended?"""
        if self.state == S.SQD and self.draining and not self.in_flight:
            self.draining = False
            return self._drain_events(self.notify_requested)
        return (), ()

    @staticmethod
    def _drain_events(notify: bool) -> tuple[tuple[EventType, ...], tuple[EventType, ...]]:
        if notify:
            return (EventType.SQ_DRAINED,), _ERROR_EVENTS
        return (), (*_ERROR_EVENTS, EventType.SQ_DRAINED)

    def _flushes(self) -> tuple[ExpectedCompletion, ...]:
        """Flush completions of everything outstanding, sends then receives, each in order."""
        return tuple(
            [ExpectedCompletion(w, "send", WCStatus.WR_FLUSH_ERR) for w in self.outstanding_sends]
            + [ExpectedCompletion(w, "recv", WCStatus.WR_FLUSH_ERR) for w in self.recvs]
        )

    def _flush_sends(self) -> tuple[ExpectedCompletion, ...]:
        done = tuple(
            ExpectedCompletion(w, "send", WCStatus.WR_FLUSH_ERR) for w in self.outstanding_sends
        )
        self.sends.clear()
        return done

    def _flush_all(self) -> tuple[ExpectedCompletion, ...]:
        done = self._flushes()
        self.sends.clear()
        self.recvs.clear()
        return done

    def _discard_all(self) -> None:
        self.never_run.update(self.outstanding_sends)
        self.never_run.update(self.recvs)
        self.sends.clear()
        self.recvs.clear()

    def _enter(self, state: QPState) -> None:
        if state != self.state:
            self.awaiting_first_packet = state == S.RTR
        self.state = state
        if state != S.SQD:
            self.draining = False
            self.notify_requested = False

    def follow(self, state: QPState) -> tuple[ExpectedCompletion, ...]:
        """The device is in `state` though the model did not predict it (a known quirk):
        go on from there.

        Entering ERR flushes what is outstanding, as every move to ERR does: the flush
        completions are returned (the device now owes them). Any other state is taken over.
        """
        flushed: tuple[ExpectedCompletion, ...] = ()
        if state == S.ERR and self.state != S.ERR:
            flushed = self._flush_all()
        if state == S.RESET:
            self.stored.forget()
        self._enter(state)
        return flushed

    def _follow_refused_accept(self, exp: Expectation) -> None:
        """The device accepted what the model refused: follow it to the requested state."""
        if exp.verb != "modify":
            return
        self.stored.forget(None if exp.state_if_accepted == S.RESET else self._modify_mask)
        if exp.state_if_accepted != self.state:
            self._enter(exp.state_if_accepted)

    @staticmethod
    def _variant_of(rule: Rule, suffix: str, detail: str) -> Rule:
        summary = f"{rule.summary}; this mask {detail}"
        return replace(rule, id=f"{rule.id}.{suffix}", summary=summary)

    def _propose(
        self, exp: Expectation, effect: Callable[[], None] | None, wr_id: int | None = None
    ) -> Expectation:
        if self.destroyed:
            raise RuntimeError("the QP was destroyed: no verb can be modelled on it")
        self._proposed = (exp, effect, wr_id)
        return exp

    def _propose_post(self, exp: Expectation, wr_id: int) -> Expectation:
        exp = Expectation(**{**exp.__dict__, "never_run": frozenset({wr_id})})
        return self._propose(exp, None, wr_id)

    def _exp(
        self,
        verb: str,
        outcome: Outcome,
        rule: Rule,
        before: QPState,
        after: QPState | None = None,
        *,
        errnos: frozenset[int] | None = None,
        completions: tuple[ExpectedCompletion, ...] = (),
        events: tuple[EventType, ...] = (),
        forbidden_events: tuple[EventType, ...] = (),
        never_run: frozenset[int] = frozenset(),
        checked: list[Rule] | None = None,
    ) -> Expectation:
        return Expectation(
            verb=verb,
            outcome=outcome,
            rule=rule,
            state_before=before,
            state_if_accepted=before if after is None else after,
            errnos=errnos,
            completions=completions,
            events=events,
            forbidden_events=forbidden_events,
            never_run=never_run,
            checked=tuple(checked or (rule,)),
        )
