"""What a pair's wire is made of: its two sides, the fault a send WR may carry, the
transport settings that decide how a failed send ends, and the step the wire took for one
send. PairModel (models/pair.py) decides the steps; the engine and the adapters speak of
sides, faults and settings too."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from models import access, qkey
from models.enums import EventType, QPType
from models.local_access import local_ops
from models.operations import Op
from models.outcomes import Expectation
from models.pair_rules import NO_EVENT_ON_COMPLETION_ERROR
from models.sources import Rule

SIDES = ("a", "b")


class Fault(StrEnum):
    """A fault planted in one send WR."""

    NONE = "none"
    BAD_LKEY = "bad_lkey"  # the local SGE names a key that is not ours
    BAD_RKEY = "bad_rkey"  # an RDMA WRITE or READ names a remote key the responder lacks
    BAD_QKEY = "bad_qkey"  # a UD SEND names a Q_Key not the responder QP's (models/qkey.py)
    INLINE_OVER_CAP = "inline_over_cap"  # posted inline, one byte more than max_inline_data
    MISALIGNED = "misaligned"  # an atomic to a remote address 4 bytes off 8-byte alignment
    # A valid rkey of one of the responder's target MRs (models/access.py window_of):
    GRANTED = "granted"  # mid-target, every right: not a fault (the near miss)
    AT_END = "at_end"  # ending at the target's last byte: granted too
    PAST_END = "past_end"  # across the target's end (an atomic: just past it)
    NO_RIGHT = "no_right"  # in a target registered without the right the operation needs
    OTHER_PD = "other_pd"  # in a target of another PD than the responder QP's
    # The local SGE in one of the requester's own target MRs (models/local_access.py):
    LOCAL_PAST_END = "local_past_end"  # across the MR's end
    LOCAL_OTHER_PD = "local_other_pd"  # an MR of another PD than the requester QP's
    SINK_READ_ONLY = "sink_read_only"  # a READ's or atomic's sink without LOCAL_WRITE

    @property
    def targeted(self) -> bool:
        """Does the WR name one of the responder's target MRs (models/access.py)?"""
        return self in _TARGETED

    @property
    def local(self) -> bool:
        """Does the requester itself refuse the WR's local SGE (nothing leaves)?"""
        return self in (Fault.BAD_LKEY, Fault.LOCAL_PAST_END, Fault.LOCAL_OTHER_PD)

    @property
    def local_sge(self) -> bool:
        """Does the WR's SGE lie in one of the requester's own target MRs, against a check
        of its own (models/local_access.py)?"""
        return self in (Fault.LOCAL_PAST_END, Fault.LOCAL_OTHER_PD, Fault.SINK_READ_ONLY)

    @property
    def touches_targets(self) -> bool:
        """Does the WR name a target MR of either end (the guard bands then read them)?"""
        return self.targeted or self.local_sge

    @property
    def refused(self) -> bool:
        """Does the responder refuse the memory access it asks for?"""
        return self in (Fault.PAST_END, Fault.NO_RIGHT, Fault.OTHER_PD)


_TARGETED = frozenset({Fault.GRANTED, Fault.AT_END, Fault.PAST_END, Fault.NO_RIGHT,
                       Fault.OTHER_PD})


def check_plantable(op: Op, fault: Fault, inline: bool, qp_type: QPType | None = None) -> None:
    """Raise ValueError for a WR the model cannot judge: `fault` planted on an operation (or
    QP type) it does not apply to, or an `inline` post of an operation that carries no data
    out."""
    if fault is Fault.BAD_QKEY:
        qkey.check_plantable(qp_type, op, inline)
    if fault is Fault.BAD_RKEY and (not op.remote or op.consumes_recv):
        # With immediate data a bad rkey may meet an empty receive queue too: which error
        # wins is the responder's order of checks (rxe: the receive first, RNR), which
        # the spec does not fix. The model plants bad rkeys on WRITE and READ only.
        raise ValueError("the model plants a bad rkey on RDMA WRITE or READ only")
    if fault is Fault.MISALIGNED and not op.atomic:
        raise ValueError("the model misaligns the remote address of an atomic only")
    if fault.targeted and op not in access.TARGETED_OPS:
        raise ValueError("the model names a target MR with RDMA WRITE, READ or an atomic")
    if fault.local_sge and (inline or op not in local_ops(fault)):
        raise ValueError("the model plants a local SGE fault on a SEND or WRITE (a sink's: "
                         "on a READ or atomic), not inline")
    if (inline or fault is Fault.INLINE_OVER_CAP) and not op.inlinable:
        raise ValueError(f"{op.name} carries no data out: it cannot be posted inline")


@dataclass(frozen=True)
class WireStep:
    """What the wire did to one send: the rule, each side's automatic expectation, and the
    events that must not follow it (an error reported in a completion is not also an event)."""

    requester: str
    wr_id: int
    rule: Rule
    effects: tuple[tuple[str, Expectation], ...]
    forbidden: Mapping[str, tuple[EventType, ...]] = field(default_factory=dict)
    forbidden_rule: Rule = NO_EVENT_ON_COMPLETION_ERROR  # why `forbidden` must not appear
    #: The bytes it placed in a target MR (a granted RDMA WRITE): (responder, window, data).
    placed: tuple[tuple[str, access.Window, bytes], ...] = ()


@dataclass(frozen=True)
class WireSettings:
    """Transport attributes that decide how failed sends end (and how long it takes)."""

    timeout: int = 10  # local ACK timeout exponent: 4.096 us * 2**timeout
    retry_cnt: int = 1
    rnr_retry: int = 1
    min_rnr_timer: int = 1
    max_rd_atomic: int = 1  # the requester's initiator depth (and the responder's resources)

    def bound(self) -> float:
        """Seconds within which an automatic error must have been reported (generous)."""
        ack = 4.096e-6 * (1 << self.timeout)
        return max(0.5, 4 * ack * (self.retry_cnt + 1) + 0.05 * (self.rnr_retry + 1))
