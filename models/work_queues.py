"""WorkQueues: the work requests one QP holds, and the ones that must never run.

Every verb and automatic event books WRs the same few ways (queued, started, held,
flushed on ERR, discarded on RESET or destroy); keeping those ways in one place is what lets
QPModel (models/qp.py) and its modify checks (models/qp_modify.py) agree on them. A QP whose
receives come from an SRQ still posts nothing here: the SRQ's own bookkeeping is models/srq.py.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from models.enums import WCStatus
from models.outcomes import ExpectedCompletion


@dataclass
class SendWR:
    """One send WR in the send queue."""

    wr_id: int
    started: bool  # False while held in SQD: posted but not yet handed to the transport
    signaled: bool = True  # False: no completion unless it ends in error


class WorkQueues:
    """A QP's send queue and own receive queue, oldest first, and the WRs that must never run
    (refused at post, or discarded by RESET or destroy)."""

    def __init__(self) -> None:
        self.sends: list[SendWR] = []
        self.recvs: list[int] = []
        self.never_run: set[int] = set()

    @property
    def outstanding_sends(self) -> list[int]:
        """Send WRs posted and not yet completed, in posting order."""
        return [w.wr_id for w in self.sends]

    @property
    def in_flight(self) -> list[int]:
        """Send WRs handed to the transport and not yet completed."""
        return [w.wr_id for w in self.sends if w.started]

    def start_waiting(self) -> list[int]:
        """Hand every send still held to the transport, in posting order; returns them."""
        waiting = [w for w in self.sends if not w.started]
        for w in waiting:
            w.started = True
        return [w.wr_id for w in waiting]

    def hold(self, wr_ids: Iterable[int]) -> None:
        """These sends are not started after all: they wait until `start_waiting`."""
        held = set(wr_ids)
        for w in self.sends:
            if w.wr_id in held:
                w.started = False

    def flushes(self) -> tuple[ExpectedCompletion, ...]:
        """Flush completions of everything outstanding, sends then receives, each in order."""
        return self._send_flushes() + tuple(
            ExpectedCompletion(w, "recv", WCStatus.WR_FLUSH_ERR) for w in self.recvs
        )

    def _send_flushes(self) -> tuple[ExpectedCompletion, ...]:
        """Every outstanding send completes with flush error, signaled or not."""
        return tuple(
            ExpectedCompletion(w.wr_id, "send", WCStatus.WR_FLUSH_ERR, signaled=w.signaled)
            for w in self.sends
        )

    def flush_sends(self) -> tuple[ExpectedCompletion, ...]:
        """Empty the send queue; returns the flush completions it owes."""
        done = self._send_flushes()
        self.sends.clear()
        return done

    def flush_all(self) -> tuple[ExpectedCompletion, ...]:
        """Empty both queues; returns the flush completions they owe."""
        done = self.flushes()
        self.sends.clear()
        self.recvs.clear()
        return done

    def discard_all(self) -> None:
        """Empty both queues without completions: those WRs must never run."""
        self.never_run.update(self.outstanding_sends)
        self.never_run.update(self.recvs)
        self.sends.clear()
        self.recvs.clear()

    def snapshot(self) -> tuple:
        """The queues' contents, for 'a refused verb changes nothing' checks."""
        return (
            tuple((w.wr_id, w.started) for w in self.sends),
            tuple(self.recvs),
            frozenset(self.never_run),
        )
