"""The ledger of one QP: what must appear, what must not, and the step and rule behind each.

The engine books every expectation of the model here (`expect`) and hands every
completion the device delivers to `match`, which classifies it once and for
all QPs, lone or paired: the head of its queue (right or wrong status, or right
status and a wrong opcode or immediate data), due but out of order, a WR that must
never run, a late one a quirk excused, a second completion of a WR, or unknown to
the ledger. An unsignaled WR that finished successfully is silent: no completion of
it may appear, except a flush while no later signaled completion has retired it.
Events are claimed against the required ones, then the allowed ones (each at most
once, never waited for), and looked up among the forbidden ones.

Attribution is the ledger's contract: each item keeps the rule and the step
(origin, an index into the QP's step log) of the expectation that booked it,
and a later expectation that speaks about the same event replaces the earlier
rule, so a divergence always names the step that made it due or forbidden.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum

from models import rules, srq
from models.enums import EventType, WCStatus
from models.operations import (
    COMPLETION_OPCODE,
    FENCE_AFTER_READS,
    IMM_DELIVERED,
    UD_WC_SRC_QP,
    UNSIGNALED_FLUSH_UNRETIRED,
    UNSIGNALED_SILENT,
    WC_WITH_IMM,
)
from models.outcomes import Expectation, ExpectedCompletion
from models.sources import Rule

from .device import Completion
from .text import completion_text

QUEUES = ("send", "recv")


@dataclass(frozen=True)
class Because:
    """The rule and the step (index in the QP's step log) behind an expectation."""

    rule: Rule
    origin: int


@dataclass
class Due:
    """A completion that must appear, and why."""

    completion: ExpectedCompletion
    rule: Rule
    origin: int
    tags: tuple[str, ...] = ()
    booked: float = field(default_factory=time.monotonic, compare=False)


@dataclass
class Required:
    """An event that must appear, and why."""

    event: EventType
    rule: Rule
    origin: int
    booked: float = field(default_factory=time.monotonic, compare=False)


class Found(Enum):
    """How one polled completion relates to the ledger."""

    MATCH = "match"  # the head of its queue, right status
    STATUS = "status"  # the head of its queue, wrong status
    FIELDS = "fields"  # the head of its queue, right status, wrong opcode or immediate data
    ORDER = "order"  # due, but not the head of its queue
    NEVER = "never"  # a WR that must never run (discarded, refused, destroyed)
    EXCUSED = "excused"  # late, after a quirk excused it missing
    UNRETIRED_FLUSH = "unretired_flush"  # a silent WR flushed before it was retired: allowed
    DUPLICATE = "duplicate"  # its WR already completed
    UNKNOWN = "unknown"  # nothing the ledger knows (the rule set decides)


@dataclass(frozen=True)
class Finding:
    """The ledger's verdict on one completion: what it was, the rule, the step, the due."""

    found: Found
    because: Because | None = None
    expected: str = ""
    due: Due | None = None


def completion_rule(exp: Expectation, c: ExpectedCompletion, wire: Rule | None = None) -> Rule:
    """The rule that really decides one due completion.

    A flush after a move to ERR is the flush rule; what the wire did to a send is
    the wire's rule; anything else is the rule of the verb that made it due.
    """
    if wire is not None and c.status != WCStatus.WR_FLUSH_ERR:
        return wire
    if c.status == WCStatus.WR_FLUSH_ERR:
        for flush in (rules.FLUSH_ON_ERROR, rules.IWARP_FLUSH_ON_ERROR):
            if flush in exp.checked:
                return flush
    return exp.rule


#: The rule an SRQ event is due by, whatever step made it due.
_SRQ_EVENT_RULES = {
    EventType.QP_LAST_WQE_REACHED: srq.LAST_WQE_REACHED,
    EventType.SRQ_LIMIT_REACHED: srq.SRQ_LIMIT_REACHED,
}


def event_rule(exp: Expectation, event: EventType) -> Rule:
    """The rule that decides whether an event may appear after `exp`."""
    if event == EventType.SQ_DRAINED:
        return rules.SQD_DRAINED_EVENT
    if event in _SRQ_EVENT_RULES:
        return _SRQ_EVENT_RULES[event]
    if exp.verb != "modify":
        return exp.rule
    if rules.IWARP_MODIFY_NO_EVENT in exp.checked:
        return rules.IWARP_MODIFY_NO_EVENT
    return rules.MODIFY_NO_EVENT


def never_rule(exp: Expectation) -> Rule:
    """The rule that forbids the WRs a verb left never-run (RESET, destroy, a refused post)."""
    return {"modify": rules.DISCARD_ON_RESET, "destroy": rules.DESTROY}.get(exp.verb, exp.rule)


@dataclass
class Ledger:
    """Due completions per queue, required and forbidden events, and the WR history of a QP."""

    due: dict[str, list[Due]] = field(default_factory=lambda: {q: [] for q in QUEUES})
    required: list[Required] = field(default_factory=list)
    allowed: list[Required] = field(default_factory=list)  # may appear once, never due
    forbidden: dict[EventType, Because] = field(default_factory=dict)
    never: dict[int, Because] = field(default_factory=dict)
    done: dict[int, Because] = field(default_factory=dict)
    excused: set[int] = field(default_factory=set)  # missing, a quirk allowed it: may come late
    silent: dict[int, Because] = field(default_factory=dict)  # unsignaled, done, not retired
    #: Receives a dropped message met (models/qkey.py KEEPS_RECEIVE): they stay posted, so
    #: a completion of one nothing made due is the drop's rule broken.
    kept: dict[int, Because] = field(default_factory=dict)

    # ------------------------------------------------------------------------- booking
    def expect(
        self,
        exp: Expectation,
        origin: int,
        wire: Rule | None = None,
        tags: tuple[str, ...] = (),
        skip: int = 0,
    ) -> None:
        """Book what an accepted `exp` makes due (its first `skip` completions already came).

        A modify states the complete list of events that must not follow it, so it
        replaces the forbidden set; any other expectation adds to it.
        """
        for c in exp.completions[skip:]:
            marks = tags if c.signaled else (*tags, "unsignaled")
            self.add_due(c, completion_rule(exp, c, wire), origin, marks)
        for wr in exp.silent:
            self.silent[wr] = Because(wire or exp.rule, origin)
        self.required.extend(Required(e, event_rule(exp, e), origin) for e in exp.events)
        self.allowed.extend(Required(e, exp.rule, origin) for e in exp.allowed_events)
        if exp.verb == "modify":
            self.forbidden = {}
        for e in exp.forbidden_events:
            self.forbidden[e] = Because(event_rule(exp, e), origin)

    def add_due(
        self, c: ExpectedCompletion, rule: Rule, origin: int, tags: tuple[str, ...] = ()
    ) -> None:
        """One completion that must appear (after the ones already due on its queue)."""
        self.due[c.queue].append(Due(c, rule, origin, tags))

    def forbid(self, events: tuple[EventType, ...], rule: Rule, origin: int) -> None:
        """These events must not appear from now on (the newest rule names them)."""
        for e in events:
            self.forbidden[e] = Because(rule, origin)

    def keep(self, wr_id: int, because: Because) -> None:
        """Receive `wr_id` must stay posted: a message `because` dropped met it."""
        self.kept[wr_id] = because

    def note_never_run(self, wr_ids: set[int], exp: Expectation, origin: int) -> None:
        """WRs the model now says never run; the first verb that said so is their reason."""
        for wr in wr_ids - self.never.keys():
            self.never[wr] = Because(never_rule(exp), origin)

    # ------------------------------------------------------------------------ matching
    def match(self, wc: Completion) -> Finding:
        """Classify one polled completion and take it off the books."""
        queue = self.due[wc.queue]
        if wc.wr_id in self.excused:
            self.excused.discard(wc.wr_id)
            return Finding(Found.EXCUSED)
        if wc.wr_id in self.never:
            return Finding(Found.NEVER, self.never[wc.wr_id],
                           f"no completion ever for wr {wc.wr_id}")
        if wc.wr_id in self.silent:
            return self._silent(wc)
        if wc.queue == "send":
            self._retire(wc.wr_id)
        if queue and queue[0].completion.wr_id == wc.wr_id:
            head = queue.pop(0)
            self.done[wc.wr_id] = Because(head.rule, head.origin)
            if not head.completion.allows_status(wc.status):
                return Finding(Found.STATUS, self.done[wc.wr_id],
                               completion_text(head.completion), head)
            wrong = _wrong_field(head.completion, wc)
            if wrong is not None:
                return Finding(Found.FIELDS, Because(wrong[0], head.origin), wrong[1], head)
            return Finding(Found.MATCH, self.done[wc.wr_id], due=head)
        hit = next((d for d in queue if d.completion.wr_id == wc.wr_id), None)
        if hit is not None:
            expected = "in order: " + ", ".join(completion_text(d.completion) for d in queue)
            queue.remove(hit)
            self.done[wc.wr_id] = Because(hit.rule, hit.origin)
            return Finding(Found.ORDER, self.done[wc.wr_id], expected, hit)
        if wc.wr_id in self.done:
            return Finding(Found.DUPLICATE, self.done[wc.wr_id], f"wr {wc.wr_id} completes once")
        if wc.queue == "recv" and wc.wr_id in self.kept:
            return Finding(Found.NEVER, self.kept.pop(wc.wr_id),
                           f"receive {wc.wr_id} stays posted: the message that met it was dropped")
        return Finding(Found.UNKNOWN, expected="due: " + (self.due_text() or "nothing"))

    def _silent(self, wc: Completion) -> Finding:
        """A completion of an unsignaled WR that finished silently: a flush before a later
        signaled completion retired it is allowed (the consumer cannot tell it finished);
        anything else is a completion that must not be."""
        because = self.silent.pop(wc.wr_id)
        self.done[wc.wr_id] = because
        if wc.status == WCStatus.WR_FLUSH_ERR:
            allowed = Because(UNSIGNALED_FLUSH_UNRETIRED, because.origin)
            return Finding(Found.UNRETIRED_FLUSH, allowed)
        rule = UNSIGNALED_SILENT if wc.status == WCStatus.SUCCESS else because.rule
        return Finding(Found.NEVER, Because(rule, because.origin),
                       f"no completion for unsignaled wr {wc.wr_id} (it succeeded)")

    def _retire(self, wr_id: int) -> None:
        """A send completion retires every silent WR posted before it: none of them may
        complete any more."""
        for wr in [w for w in self.silent if w < wr_id]:
            self.never[wr] = Because(UNSIGNALED_SILENT, self.silent.pop(wr).origin)

    def unrequire(self, event: EventType) -> None:
        """No `event` is owed any more (a known quirk: the device will not raise it)."""
        self.required = [r for r in self.required if r.event != event]

    def claim(self, event: EventType) -> tuple[Required | None, bool]:
        """Take one required `event` off the books, if it was required; else one allowed
        `event` (a "may" rule lets it appear once). Returns it (None: neither) and whether
        it was owed (required), not merely allowed."""
        for books in (self.required, self.allowed):
            for pending in books:
                if pending.event == event:
                    books.remove(pending)
                    return pending, books is self.required
        return None, False

    # ----------------------------------------------------------------------- questions
    def waiting(self) -> bool:
        """Is anything still due (a completion or a required event)?"""
        return bool(self.due["send"] or self.due["recv"] or self.required)

    def due_text(self) -> str:
        """Everything due, in words."""
        return ", ".join(completion_text(d.completion) for q in QUEUES for d in self.due[q])

    def take_missing(self) -> list[list[Due]]:
        """Everything still due, grouped by the step and rule that made it due (and cleared)."""
        groups: dict[tuple[int, str], list[Due]] = {}
        for q in QUEUES:
            for d in self.due[q]:
                groups.setdefault((d.origin, d.rule.id), []).append(d)
            self.due[q] = []
        return sorted(groups.values(), key=lambda g: g[0].origin)

    def take_required(self) -> list[Required]:
        """The required events still missing (and cleared)."""
        missing, self.required = self.required, []
        return missing


def _wrong_field(expected: ExpectedCompletion, wc: Completion) -> tuple[Rule, str] | None:
    """The rule a successful completion breaks beyond its status, and what was expected:
    its opcode, or (on a receive) the immediate data it carries or not."""
    if expected.opcode is None or wc.opcode is None or wc.status != WCStatus.SUCCESS:
        return None  # nothing to compare: not expected, not read, or an error's (undefined)
    if wc.opcode != expected.opcode:
        return COMPLETION_OPCODE, f"{completion_text(expected)} opcode {expected.opcode.name}"
    imm = "no immediate data" if expected.imm_data is None else f"imm 0x{expected.imm_data:08x}"
    if wc.queue == "recv" and wc.wc_flags is not None and (
        bool(wc.wc_flags & WC_WITH_IMM) != (expected.imm_data is not None)
    ):  # the flag is the truth: imm_data means nothing without it
        flag = "IBV_WC_WITH_IMM set" if expected.imm_data is not None else "no IBV_WC_WITH_IMM"
        return IMM_DELIVERED, f"{completion_text(expected)} with {flag} ({imm})"
    if wc.queue == "recv" and wc.imm_data != expected.imm_data:
        return IMM_DELIVERED, f"{completion_text(expected)} with {imm}"
    if expected.data is not None and wc.data is not None and wc.data != expected.data:
        rule = expected.data_rule or FENCE_AFTER_READS
        return rule, f"{completion_text(expected)} holding {expected.data} data"
    return _wrong_wc_field(expected, wc)


def _wrong_wc_field(expected: ExpectedCompletion, wc: Completion) -> tuple[Rule, str] | None:
    """A successful receive's byte_len and (UD) src_qp, where the model gave them and the
    adapter read them (docs/fields.md)."""
    if expected.byte_len is not None and wc.byte_len is not None:
        allowed, rule = expected.byte_len
        if wc.byte_len not in allowed:
            shown = " or ".join(str(v) for v in sorted(allowed, reverse=True))
            return rule, f"{completion_text(expected)} with byte_len {shown}"
    if expected.src_qp is not None and wc.src_qp is not None and wc.src_qp != expected.src_qp:
        return UD_WC_SRC_QP, f"{completion_text(expected)} from src_qp 0x{expected.src_qp:x}"
    return None
