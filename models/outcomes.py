"""What the model expects of one verb: the oracle a device's observation is compared with."""

from dataclasses import dataclass, field
from enum import Enum

from models.enums import EventType, QPState, WCOpcode, WCStatus
from models.sources import Rule


class Outcome(Enum):
    """Whether a verb must succeed, must fail, or may do either (behaviour left to the device)."""

    ACCEPT = "accept"
    REFUSE = "refuse"
    EITHER = "either"


@dataclass(frozen=True)
class ExpectedCompletion:
    """A work completion that must appear on the queue's CQ.

    `opcode` and `imm_data` are checked when `opcode` is given and the completion is
    successful (an error completion's other fields are undefined). `signaled` is
    False for an unsignaled send WR (its error completion has a rule of its own).
    """

    wr_id: int
    queue: str  # "send" or "recv"
    status: WCStatus
    # What a completion says beyond its status; not part of its identity (==), which is
    # the WR, the queue and the status: the engine checks them on their own (their rules).
    opcode: WCOpcode | None = field(default=None, compare=False)
    imm_data: int | None = field(default=None, compare=False)  # None: it carries none
    signaled: bool = field(default=True, compare=False)
    # A receive's data, as the adapter names the bytes (models.operations.SINK_*): None,
    # not compared.
    data: str | None = field(default=None, compare=False)
    # The rule whose promise `data` is (None: pair.fence.after_reads, the first to compare).
    data_rule: Rule | None = field(default=None, compare=False)
    # A successful receive's byte_len: the values allowed and the rule that allows them
    # (models.operations.recv_byte_len); None: not compared.
    byte_len: tuple[frozenset[int], Rule] | None = field(default=None, compare=False)
    # A successful UD receive's src_qp: the sender's QP number (the engine knows it, not
    # the model: qpconform/engine/pair.py); None: not compared.
    src_qp: int | None = field(default=None, compare=False)
    # Other statuses a "may" rule lets the device complete it with instead of `status`, and
    # that rule (models/access.py RC_QP_RIGHTS): the engine holds the device to one choice
    # for the whole run (qpconform/engine/choices.py); None: `status` only.
    statuses: tuple[frozenset[WCStatus], Rule] | None = field(default=None, compare=False)

    def allows_status(self, status: WCStatus) -> bool:
        """Is `status` this completion's, or one its "may" rule allows instead?"""
        return status == self.status or (
            self.statuses is not None and status in self.statuses[0])


@dataclass(frozen=True)
class Expectation:
    """The model's verdict on one verb, and the rule that decided it.

    `completions` are due because of this step and must appear, per queue in
    this order, within a bounded wait. `never_run` lists WRs that must never
    produce a completion at all. `events` must appear; `forbidden_events` must not;
    `allowed_events` may appear once each, or not at all (a "may" rule, e.g. COMM_EST).
    `may_land` are other states an accepted modify may leave the QP in (a "may" rule of
    the iwarp table: drivers differ on whether the move happens). `silent` are unsignaled
    send WRs that completed successfully: they produce no completion.
    """

    verb: str
    outcome: Outcome
    rule: Rule
    state_before: QPState
    state_if_accepted: QPState
    errnos: frozenset[int] | None = None  # acceptable errnos when refused; None: any
    completions: tuple[ExpectedCompletion, ...] = ()
    events: tuple[EventType, ...] = ()
    forbidden_events: tuple[EventType, ...] = ()
    never_run: frozenset[int] = frozenset()
    checked: tuple[Rule, ...] = field(default=(), compare=False)
    allowed_events: tuple[EventType, ...] = ()
    may_land: frozenset[QPState] = frozenset()
    silent: frozenset[int] = frozenset()

    def state_after(self, accepted: bool) -> QPState:
        """The state the QP must be in once the verb returned; a failed verb changes nothing."""
        return self.state_if_accepted if accepted else self.state_before

    def allows(self, accepted: bool, errno: int | None = None) -> bool:
        """Does an observed result (accepted, or refused with errno) satisfy this expectation?"""
        if self.outcome is Outcome.EITHER:
            return accepted or self.errnos is None or errno in self.errnos
        if accepted:
            return self.outcome is Outcome.ACCEPT
        if self.outcome is not Outcome.REFUSE:
            return False
        return self.errnos is None or errno in self.errnos


def expect(
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
    """The expectation of one verb or event on a QP in `before`, decided by `rule`: it stays
    there unless `after` says where it goes; `checked` defaults to the rule alone."""
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
