"""QPModel: the reference model of one Queue Pair.

Each verb method returns an `Expectation` without changing the model; the
caller then reports what the device did with `apply(expectation, accepted)`.
This two-step protocol keeps the model honest about "a failed verb changes
nothing" and lets the harness follow a device through an accepted (quirked)
divergence. Automatic events (transport errors, completions) are facts and
take effect at once.

A QPModel is made of parts with one job each: `queues` (models/work_queues.py) books its
WRs, `judge` (models/qp_modify.py) decides a modify and keeps the access flags it set,
`stored` (models/readback.py) is what query_qp must report; this module holds the verbs,
the automatic events, and `proposal` (models/proposal.py) keeps each verb's expectation
and effect until `apply`.

Under a connection-managed variant (`iwarp`, models/variant.py) modify and the posts follow
an iWARP RNIC's rules instead (`ModifyJudge`, `_post_iwarp`): RESET, INIT and RTR are all
IDLE (WRs stay queued across them), RTS is reached only through the connection
manager, IB-only attributes are left to the driver, nothing is read back but the
state, and where the iWARP drivers differ the expectation is "either".
"""

from collections.abc import Mapping
from dataclasses import replace

from models import rules
from models.attributes import DeviceCaps
from models.enums import QP_ERROR_EVENTS, Attr, EventType, QPState, QPType, WCOpcode, WCStatus
from models.outcomes import Expectation, ExpectedCompletion, Outcome, expect
from models.proposal import Effect, Proposal
from models.qp_modify import ModifyJudge, drain_events
from models.readback import Stored
from models.sources import Rule
from models.srq import (
    LAST_WQE_REACHED,
    SRQ_ARM,
    SRQ_KEEPS_RECEIVES,
    SRQ_LIMIT_REACHED,
    SRQ_POST_RECV,
    SRQ_QP_POST_RECV,
    SRQ_RECV_CONSUMED,
    SRQModel,
)
from models.table import TransitionTable
from models.variant import LINUX, Variant
from models.variant import variant as parse_variant
from models.work_queues import SendWR, WorkQueues

S = QPState
_SQE_TYPES = frozenset({QPType.UD, QPType.UC})
_NO_RQ_TYPES = frozenset({QPType.XRC_SEND, QPType.XRC_RECV})


class QPModel:
    """Expected behaviour of one QP of a given type under a table variant."""

    def __init__(
        self,
        qp_type: QPType,
        variant: Variant | str = LINUX,
        caps: DeviceCaps | None = None,
        srq: SRQModel | None = None,
    ) -> None:
        self.qp_type = QPType(qp_type)
        self.variant = parse_variant(variant)
        self.caps = caps or DeviceCaps()
        self.srq = srq  # its receives come from this SRQ (models/srq.py); None: its own RQ
        self.state = S.RESET
        self.queues = WorkQueues()
        self.notify_requested = False
        self.draining = False
        self.destroyed = False
        self.port: int | None = None  # the port bound by RESET->INIT (uverbs checks AV against it)
        self.awaiting_first_packet = False  # in RTR, nothing received yet (COMM_EST may come)
        self.stored = Stored()  # the attributes query_qp must report (models/readback.py)
        self.judge = ModifyJudge(self)
        self.proposal = Proposal()  # the verb proposed, until `apply`

    # ----------------------------------------------------------------- queries of the model
    @property
    def table(self) -> TransitionTable:
        """The variant's transition table."""
        return self.variant.table

    def receives(self) -> list[int]:
        """The receives an incoming message may take, oldest first: the SRQ's, or the
        QP's own."""
        return self.srq.recvs if self.srq is not None else self.queues.recvs

    def snapshot(self) -> tuple:
        """Everything a verb may change, for 'a refused verb changes nothing' checks."""
        return (
            self.state,
            *self.queues.snapshot(),
            self.notify_requested,
            self.draining,
            self.destroyed,
            self.stored.snapshot(),
            self.srq.snapshot() if self.srq is not None else None,
        )

    # ----------------------------------------------------------------------------- verbs
    def modify(self, attrs: Mapping[str, int], mask: Attr | int) -> Expectation:
        """modify_qp(attr, mask): accepted or refused, and what follows."""
        return self._propose(*self.judge.verdict(attrs, mask))

    def query(self) -> Expectation:
        """query_qp: always accepted, reports the current state (under one of the names
        `reported()` allows)."""
        rule = self.variant.query_rule
        return self._propose(
            expect(
                "query", Outcome.ACCEPT, rule, self.state, checked=[rule, *self.stored.rules()]
            ),
            None,
        )

    def reported(self, state: QPState | None = None) -> frozenset[QPState]:
        """The states query_qp may report for a QP in `state` (default: the model's).

        Only the iwarp variant has more than one: IDLE entered as RESET or RTR may read
        back as INIT, and a closing QP may already read back as where the close ends."""
        return self.table.reported(self.state if state is None else state)

    def post_send(self, wr_id: int, signaled: bool = True) -> Expectation:
        """post_send of one WR (unsignaled: it completes only if it ends in error)."""
        st = self.state
        if self.variant.connection_managed:
            return self._post_iwarp("send", wr_id, signaled)
        if self.qp_type == QPType.XRC_RECV:  # no send queue at all: any errno
            exp = expect("post_send", Outcome.REFUSE, rules.XRC_RECV_NO_SQ, st)
            return self._propose_post(exp, wr_id)
        if st in (S.RESET, S.INIT, S.RTR):
            rule = rules.post_rule("send", st.name, False, "refused, the WR must never run")
            return self._propose_post(expect("post_send", Outcome.REFUSE, rule, st), wr_id)
        if st in (S.SQE, S.ERR):
            rule = rules.post_rule("send", st.name, True, "accepted and completed with flush error")
            flush = (ExpectedCompletion(wr_id, "send", WCStatus.WR_FLUSH_ERR, signaled=signaled),)
            exp = expect("post_send", Outcome.ACCEPT, rule, st, completions=flush)
            return self._propose(exp, None, wr_id)
        started = st == S.RTS
        rule = (
            rules.post_rule("send", st.name, True, "accepted and started")
            if started
            else rules.SQD_HOLDS_NEW_SENDS
        )
        exp = expect("post_send", Outcome.ACCEPT, rule, st)
        return self._propose(
            exp, lambda: self.queues.sends.append(SendWR(wr_id, started, signaled)), wr_id
        )

    def post_recv(self, wr_id: int) -> Expectation:
        """post_recv of one WR."""
        st = self.state
        if self.srq is not None:  # no receive queue of its own: any errno
            return self._propose_post(expect("post_recv", Outcome.REFUSE, SRQ_QP_POST_RECV, st),
                                      wr_id)
        if self.variant.connection_managed:
            return self._post_iwarp("recv", wr_id)
        if self.qp_type in _NO_RQ_TYPES:  # no receive queue at all: any errno
            exp = expect("post_recv", Outcome.REFUSE, rules.XRC_NO_RQ, st)
            return self._propose_post(exp, wr_id)
        if st == S.RESET:
            rule = rules.post_rule("recv", st.name, False, "refused, the WR must never run")
            return self._propose_post(expect("post_recv", Outcome.REFUSE, rule, st), wr_id)
        if st == S.ERR:
            rule = rules.post_rule("recv", st.name, True, "accepted and completed with flush error")
            flush = (ExpectedCompletion(wr_id, "recv", WCStatus.WR_FLUSH_ERR),)
            return self._propose(
                expect("post_recv", Outcome.ACCEPT, rule, st, completions=flush), None, wr_id
            )
        rule = rules.post_rule("recv", st.name, True, "accepted and queued")
        exp = expect("post_recv", Outcome.ACCEPT, rule, st)
        return self._propose(exp, lambda: self.queues.recvs.append(wr_id), wr_id)

    def post_srq_recv(self, wr_id: int) -> Expectation:
        """post_srq_recv of one WR to this QP's SRQ: accepted in any state of the QP."""
        srq = self._own_srq()
        exp = expect("post_srq_recv", Outcome.ACCEPT, SRQ_POST_RECV, self.state)
        return self._propose(exp, lambda: srq.recvs.append(wr_id), wr_id)

    def arm_srq(self, limit: int) -> Expectation:
        """modify_srq(IBV_SRQ_LIMIT = limit) on this QP's SRQ: accepted (a limit below its
        size), armed until a receive taken leaves fewer than `limit`."""
        srq = self._own_srq()

        def effect() -> None:
            srq.limit = limit

        return self._propose(expect("modify_srq", Outcome.ACCEPT, SRQ_ARM, self.state), effect)

    def _own_srq(self) -> SRQModel:
        if self.srq is None:
            raise ValueError("this QP has no SRQ: post to its own receive queue")
        return self.srq

    def destroy(self) -> Expectation:
        """destroy_qp: accepted; outstanding WRs are discarded and never run (an SRQ's
        too: the harness' SRQ serves one QP and is destroyed with it)."""
        gone = frozenset(self.queues.outstanding_sends) | frozenset(self.queues.recvs)
        if self.srq is not None:
            gone |= frozenset(self.srq.recvs)
        exp = expect("destroy", Outcome.ACCEPT, rules.DESTROY, self.state, never_run=gone)

        def effect() -> None:
            self.queues.discard_all()
            if self.srq is not None:
                self.srq.recvs.clear()
            self.destroyed = True

        return self._propose(exp, effect)

    def apply(self, exp: Expectation, accepted: bool) -> None:
        """Record what the device did with the last proposed verb (follows the device)."""
        effect, wr_id = self.proposal.take(exp)
        if accepted:
            if exp.outcome is Outcome.REFUSE:  # a divergence the run goes on with (a quirk)
                if exp.verb == "modify":
                    self.judge.follow_refused(exp)
            elif effect is not None:
                effect()
            if exp.verb == "modify":
                self.judge.take_flags()
        elif exp.verb.startswith("post_"):
            self.queues.never_run.update(exp.never_run)
            if wr_id is not None:  # whoever refused it, a refused WR must never run
                self.queues.never_run.add(wr_id)

    # ------------------------------------------------------------------- automatic events
    def send_completed(
        self, status: WCStatus = WCStatus.SUCCESS, opcode: WCOpcode | None = None
    ) -> Expectation:
        """The oldest in-flight send WR completed on the wire with `status` (and, when
        given, the `opcode` its completion must name). An unsignaled success is silent."""
        if not self.queues.in_flight:
            raise RuntimeError("no send WR is in flight")
        head = next(w for w in self.queues.sends if w.started)
        before = self.state
        if status == WCStatus.SUCCESS:
            self.queues.sends.remove(head)
            done = (ExpectedCompletion(head.wr_id, "send", WCStatus.SUCCESS, opcode),)
            events, forbidden = self._drain_progress()
            exp = expect(
                "send_completion",
                Outcome.ACCEPT,
                rules.SEND_DONE,
                before,
                completions=done if head.signaled else (),
                events=events,
                forbidden_events=forbidden,
            )
            if head.signaled:
                return exp
            return replace(exp, silent=frozenset({head.wr_id}))
        first = (ExpectedCompletion(head.wr_id, "send", WCStatus(status), signaled=head.signaled),)
        self.queues.sends.remove(head)
        if self.qp_type in _SQE_TYPES:
            flushed = self.queues.flush_sends()
            self.enter(S.SQE)
            return expect(
                "send_completion",
                Outcome.ACCEPT,
                rules.SQE_ON_SEND_ERROR,
                before,
                completions=first + flushed,
                forbidden_events=(EventType.SQ_DRAINED,),
            )
        flushed = self.queues.flush_all()
        events = self.err_events(before)
        self.enter(S.ERR)
        return expect(
            "send_completion",
            Outcome.ACCEPT,
            rules.ERR_ON_SEND_ERROR,
            before,
            completions=first + flushed,
            events=events,
            forbidden_events=(EventType.SQ_DRAINED,),
            checked=[rules.ERR_ON_SEND_ERROR, *self.err_checked(before)],
        )

    def recv_completed(
        self,
        status: WCStatus = WCStatus.SUCCESS,
        opcode: WCOpcode | None = None,
        imm_data: int | None = None,
    ) -> Expectation:
        """An incoming message consumed the oldest receive WR with `status` (its completion
        names `opcode` and carries `imm_data`, when the opcode is given)."""
        if not self.receives():
            raise RuntimeError("no receive WR is outstanding")
        limit: tuple[EventType, ...] = ()
        if self.srq is not None:
            wr_id, limit = self.srq.take()
        else:
            wr_id = self.queues.recvs.pop(0)
        before = self.state
        done = (ExpectedCompletion(wr_id, "recv", WCStatus(status), opcode, imm_data),)
        if status == WCStatus.SUCCESS:
            rule = rules.RECV_DONE if self.srq is None else SRQ_RECV_CONSUMED
            return expect(
                "recv_completion", Outcome.ACCEPT, rule, before, completions=done, events=limit,
                checked=[rule, SRQ_LIMIT_REACHED] if limit else None,
            )
        flushed = self.queues.flush_all()
        events = (*limit, *self.err_events(before))
        self.enter(S.ERR)
        return expect(
            "recv_completion",
            Outcome.ACCEPT,
            rules.ERR_ON_RECV_ERROR,
            before,
            completions=done + flushed,
            events=events,
            checked=[rules.ERR_ON_RECV_ERROR, *self.err_checked(before)],
        )

    def async_error(self, event: EventType) -> Expectation:
        """An affiliated error the device detected outside any WR: ERR, flush, the event."""
        if event not in QP_ERROR_EVENTS:
            raise ValueError(f"{event!r} is not an affiliated QP error event")
        return self._error_entered((event,))

    def invalid_request(self) -> Expectation:
        """The responder NAKed a request no receive WQE saw (a misaligned atomic, IBTA's
        class C): ERR, its WRs flushed; the affiliated event, if any, is the driver's
        (QP_REQ_ERR, QP_ACCESS_ERR or QP_FATAL; models/operations.py RC_ATOMIC_MISALIGNED)."""
        return self._error_entered((), allowed=tuple(sorted(QP_ERROR_EVENTS)))

    def access_refused(self) -> Expectation:
        """The responder refused a request's memory access (IBTA class C, Remote Access
        Error NAK): ERR, its WRs flushed; QP_ACCESS_ERR may come (models/access.py)."""
        return self._error_entered((), allowed=(EventType.QP_ACCESS_ERR,))

    def _error_entered(
        self, events: tuple[EventType, ...], allowed: tuple[EventType, ...] = ()
    ) -> Expectation:
        """The device moved the QP to ERR on its own: every WR flushed, `events` due (with
        what entering ERR raises), `allowed` ones may come."""
        before = self.state
        flushed = self.queues.flush_all()
        due = (*events, *self.err_events(before))
        self.enter(S.ERR)
        exp = expect(
            "async_error",
            Outcome.ACCEPT,
            rules.ERR_ON_ASYNC_ERROR,
            before,
            completions=flushed,
            events=due,
            checked=[rules.ERR_ON_ASYNC_ERROR, *self.err_checked(before)],
        )
        return replace(exp, allowed_events=allowed) if allowed else exp

    # ------------------------------------------------------------------------ iWARP posts
    def _post_iwarp(self, queue: str, wr_id: int, signaled: bool = True) -> Expectation:
        """post_send/post_recv on an iWARP QP: accepted in IDLE (receives) and RTS; elsewhere
        the provider may refuse, and an accepted WR is held (a send in IDLE) or flushed."""
        st, verb = self.state, f"post_{queue}"
        if self.qp_type not in self.variant.qp_types:  # no such QP: any errno
            return self._propose_post(
                expect(verb, Outcome.REFUSE, rules.IWARP_RC_ONLY, st), wr_id
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
                    self.queues.sends.append(SendWR(wr_id, True, signaled))
                else:
                    self.queues.recvs.append(wr_id)

            return self._propose(expect(verb, Outcome.ACCEPT, rule, st), effect, wr_id)
        if queue == "send" and st in (S.RESET, S.INIT, S.RTR):
            exp = expect(verb, Outcome.EITHER, rules.IWARP_SEND_IDLE[st.name], st)
            return self._propose(
                exp, lambda: self.queues.sends.append(SendWR(wr_id, False, signaled)), wr_id
            )
        closed = rules.IWARP_SEND_CLOSED if queue == "send" else rules.IWARP_RECV_CLOSED
        flush = (ExpectedCompletion(wr_id, queue, WCStatus.WR_FLUSH_ERR, signaled=signaled),)
        exp = expect(verb, Outcome.EITHER, closed[st.name], st, completions=flush)
        return self._propose(exp, None, wr_id)

    # ------------------------------------------------------------------------- internals
    def err_events(self, before: QPState) -> tuple[EventType, ...]:
        """The event entering ERR from `before` owes: Last WQE Reached, for an SRQ's QP."""
        if self.srq is not None and before != S.ERR:
            return (EventType.QP_LAST_WQE_REACHED,)
        return ()

    def err_checked(self, before: QPState) -> list[Rule]:
        """What a move into ERR from `before` checks beyond its own rule: for an SRQ's QP,
        the event and the SRQ's receives left posted."""
        if self.srq is None or before == S.ERR:
            return []
        return [LAST_WQE_REACHED, SRQ_KEEPS_RECEIVES]

    def _drain_progress(self) -> tuple[tuple[EventType, ...], tuple[EventType, ...]]:
        """After a send completed: has an SQD drain just ended?"""
        if self.state == S.SQD and self.draining and not self.queues.in_flight:
            self.draining = False
            return drain_events(self.notify_requested)
        return (), ()

    def enter(self, state: QPState) -> None:
        """The QP is now in `state`: a new RTR awaits its first packet; out of SQD no drain
        runs."""
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
            flushed = self.queues.flush_all()
        if state == S.RESET:
            self.stored.forget()
        self.enter(state)
        return flushed

    def _propose(self, exp: Expectation, effect: Effect, wr_id: int | None = None) -> Expectation:
        """Hold `exp` until `apply`: a destroyed QP has no verb left to model."""
        if self.destroyed:
            raise RuntimeError("the QP was destroyed: no verb can be modelled on it")
        return self.proposal.hold(exp, effect, wr_id)

    def _propose_post(self, exp: Expectation, wr_id: int) -> Expectation:
        """Hold a refused post: its WR must never run."""
        exp = Expectation(**{**exp.__dict__, "never_run": frozenset({wr_id})})
        return self._propose(exp, None, wr_id)
