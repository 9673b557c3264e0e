"""What the expectations of a wire step also promise: the rules a completion's opcode, data
and silence check, the guard bands around a target MR, and the statuses and events a "may"
rule leaves to the device (models/pair.py and models/iwarp_pair.py build their steps with
these)."""

from dataclasses import replace

from models import access
from models.enums import EventType, WCStatus
from models.operations import COMPLETION_OPCODE, FENCE_AFTER_READS, UNSIGNALED_SILENT
from models.outcomes import Expectation
from models.sources import Rule
from models.wire import Fault

#: The affiliated error events a requester's error completion must not also raise, and the
#: ones a responder's error outcome may raise when the driver picks it.
ERROR_EVENTS = (EventType.QP_FATAL, EventType.QP_REQ_ERR, EventType.QP_ACCESS_ERR)


def checking(exp: Expectation) -> Expectation:
    """A wire step's expectation `exp`, naming the rules its completions (or their absence)
    also check: a successful completion's opcode and immediate data, an unsignaled WR's
    silence."""
    extra: tuple[Rule, ...] = ()
    if any(c.opcode is not None and c.status == WCStatus.SUCCESS for c in exp.completions):
        extra += (COMPLETION_OPCODE,)
    if exp.silent:
        extra += (UNSIGNALED_SILENT,)
    return replace(exp, checked=exp.checked + extra) if extra else exp


def either_status(exp: Expectation, statuses: tuple[WCStatus, ...], rule: Rule) -> Expectation:
    """The requester's expectation whose first completion (the refused WR's) may carry any
    of `statuses`, as the "may" `rule` allows (the first is the one it names)."""
    if not exp.completions:
        return exp
    first, *rest = exp.completions
    others = frozenset(statuses) - {first.status}
    return replace(exp, completions=(replace(first, statuses=(others, rule)), *rest))


def may_raise(exp: Expectation) -> Expectation:
    """A responder's error outcome whose affiliated error event is the driver's: any one of
    them may come with it, once, or none (UNRELIABLE_RECV_TOO_SHORT: irdma raises QP_FATAL
    with its LOC_LEN_ERR flush, rxe and hns none)."""
    return replace(exp, allowed_events=(*exp.allowed_events, *ERROR_EVENTS))


def guarded(exp: Expectation, fault: Fault, placed: tuple[object, ...]) -> Expectation:
    """The requester's expectation of a WR naming a target MR (a local SGE fault's too: its
    own), naming the rules the guard bands check after it (qpconform/engine/memory.py): no
    stray byte; its bytes placed."""
    if not fault.touches_targets:
        return exp
    extra = (access.GUARD, access.WRITE_PLACED) if placed else (access.GUARD,)
    return replace(exp, checked=(*exp.checked, *extra))


def with_data(exp: Expectation, data: str | None, rule: Rule = FENCE_AFTER_READS) -> Expectation:
    """A receive's expectation whose (first) completion must hold `data` (the label the
    adapter gives the bytes received; None: not compared), as `rule` says."""
    if data is None or not exp.completions:
        return exp
    first, *rest = exp.completions
    return replace(exp, completions=(replace(first, data=data, data_rule=rule), *rest),
                   checked=(*exp.checked, rule))
