"""A UC/UD message longer than the receive: the device's choice, learnt and then held.

`pair.unreliable.recv_too_short` (models/pair_rules.py) is a "may" rule with two outcomes: the
responder drops the message (the receive stays posted, nothing completes) or completes
the receive with LOC_LEN_ERR and enters ERR. The model cannot know beforehand which one a
device takes, so until it has seen one it expects the drop and keeps the receives such a
message met `undecided`:

- a completion of one of them that is neither SUCCESS nor a flush is the device
  choosing the error: the model follows (`PairModel.too_long_completed`), the completion
  is matched again against what that outcome makes due (a status other than LOC_LEN_ERR
  is then a divergence of the rule), the QP's move to ERR is compared as any;
- a flush of a WR outstanding on that end, while the receive is first in line, is that
  choice too, seen first: the engine polls the send CQ first and a device's two CQs are not
  ordered, so an end holding sends (SQD) shows their flush before the receive's error; the
  model follows the same way and the receive's LOC_LEN_ERR is then due;
- a quiet window after the post with no such completion is the device choosing the drop.

From then on the pair's model expects that choice, so the other one is a divergence of
the rule; and the run's recorder holds the first choice across pairs (and processes):
a later pair of the process starts from it (`seed`), and a pair that chose
otherwise is an "inconsistent" divergence (qpconform/engine/choices.py, the same book
the value rules use; merged run records list the choices of every process).
`TooLongChoice` is a part of `PairHarness` (qpconform/engine/pair.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from models.enums import WCStatus
from models.pair_rules import TOO_LONG_DROPPED, TOO_LONG_ERROR, UNRELIABLE_RECV_TOO_SHORT

from .ledger import Because

if TYPE_CHECKING:
    from .device import Completion
    from .track import Track

#: The situation the run's choice book keys the choice by (with the QP type).
SITUATION = "SEND longer than the receive"


class TooLongChoice:
    """Learning and holding the device's choice: it reads the harness's model, ends and
    step log, and judges and observes through its engine."""

    def __init__(self, harness: Any) -> None:
        self.h = harness

    def explain(self, track: Track, wc: Completion) -> bool:
        """Is `wc` a receive a too-long message met, completed in error, or a flush that
        error caused? Undecided: the device chose the error, the model follows and `wc` is
        matched again (True). Once the device chose the drop: an inconsistent choice (a
        divergence; True)."""
        side = track.side
        met = (side, wc.wr_id)
        if self.h.retrying:
            return False
        if wc.status == WCStatus.WR_FLUSH_ERR:
            return self._flushed_by_too_long(track, wc)
        if wc.queue != "recv":
            return False
        if wc.status == WCStatus.SUCCESS:
            if met not in self.h.model.undecided | self.h.model.met_dropped:
                return False
            d = self.h.divergence(
                track, "completion", UNRELIABLE_RECV_TOO_SHORT, track.last(),
                f"receive {wc.wr_id} dropped or completed LOC_LEN_ERR: the message was "
                "longer than its buffer",
                f"completion wr={wc.wr_id} SUCCESS", ["status=SUCCESS", "queue=recv"],
            )
            self.h.diverge(track, d)
            return True
        if met in self.h.model.met_dropped and wc.wr_id in track.model.queues.recvs:
            d = self.h.divergence(
                track, "inconsistent", UNRELIABLE_RECV_TOO_SHORT, track.last(),
                f"no completion of receive {wc.wr_id}: the device dropped a message too long "
                "for the receive before (may rule: one choice per run)",
                f"completion wr={wc.wr_id} {wc.status.name}", [f"choice={TOO_LONG_ERROR}"],
            )
            self.h.diverge(track, d)
            return True
        qp = track.model
        recvs = qp.queues.recvs
        if met not in self.h.model.undecided or not recvs or recvs[0] != wc.wr_id:
            return False
        self._follow_error(track, wc)
        return True

    def _flushed_by_too_long(self, track: Track, wc: Completion) -> bool:
        """A flush of a WR outstanding on an end whose oldest receive a too-long message met
        while the choice is open: the device chose the error, and this flush is its
        consequence, seen first (the engine polls the send CQ first, and a device's two CQs
        are not ordered: an end in SQD holds its sends, and their flushes can come before
        the receive's LOC_LEN_ERR). The model follows as for that completion, which is
        then due (missing, or after the receive's flushes: a divergence); `wc` is matched
        again. Once the device chose the drop, such a flush right after a too-long message
        met the receive is the other choice: an inconsistent divergence of the rule."""
        qp = track.model
        outstanding = wc.wr_id in qp.queues.recvs or wc.wr_id in qp.queues.outstanding_sends
        if not outstanding or not qp.queues.recvs:
            return False
        head = (track.side, qp.queues.recvs[0])
        if head in self.h.model.undecided:
            self._follow_error(track, wc)
            return True
        if head not in self.h.model.met_dropped or not self._met_since_last_verb(track.side):
            return False
        d = self.h.divergence(
            track, "inconsistent", UNRELIABLE_RECV_TOO_SHORT, track.last(),
            f"no completion of receive {head[1]}, no flush: the device dropped a message too "
            "long for the receive before (may rule: one choice per run)",
            f"completion wr={wc.wr_id} {wc.status.name}: the QP left its state as a too-long "
            "message met the receive", [f"choice={TOO_LONG_ERROR}"],
        )
        self.h.diverge(track, d)
        return True

    def _met_since_last_verb(self, side: str) -> bool:
        """Did a too-long message meet `side`'s first receive since the last verb (the log's
        tail holds only wire steps and settles, one of them that message)?"""
        peer = self.h.model.peer_of(side)
        for step in reversed(self.h.steps):
            if step.get("verb") == "wire":
                if step.get("expected") == UNRELIABLE_RECV_TOO_SHORT.id and (
                    step.get("side") == peer
                ):
                    return True
            elif step.get("verb") != "settle":
                return False
        return False

    def _follow_error(self, track: Track, wc: Completion) -> None:
        """The device chose TOO_LONG_ERROR for the oldest receive of `track`'s end (the one
        a too-long message met): the model follows, the ledger books what that makes due,
        the choice is recorded, and `wc` is matched again."""
        side, qp = track.side, track.model
        head = qp.queues.recvs[0]
        origin = track.last()
        exp = self.h.model.too_long_completed(side, head)
        self.h.log.note(track, exp, UNRELIABLE_RECV_TOO_SHORT)
        track.ledger.expect(exp, origin, UNRELIABLE_RECV_TOO_SHORT, (f"recv_wr={head}",))
        self.h.end_state[side].state_because = Because(exp.rule, origin)
        track.moved(exp.state_before, qp.state, origin)
        self._chose(track, TOO_LONG_ERROR, origin)
        self.h.retrying = True
        try:
            self.h.match.completion(track, wc)
        finally:
            self.h.retrying = False

    def decide(self, watched: bool = False) -> None:
        """After a step that sent a too-long message while the choice is open: a quiet
        window for the receive's error completion (`watched`: the caller's window just
        passed); none came: the device dropped it."""
        model = self.h.model
        if not model.undecided or self.h.shared.unpolled_now or model.burst is not None:
            return
        if not watched:
            self.h.watch.observe(self.h.quiet_window, 0.0)
        if not self.h.model.undecided:  # it came: explain followed the device
            return
        side = sorted(self.h.model.undecided)[0][0]
        self.h.model.too_long_dropped()
        track = self.h.ends[side]
        self._chose(track, TOO_LONG_DROPPED, track.last())

    def seed(self) -> None:
        """Before a short receive: a choice this run's earlier pairs of the QP type made
        (the recorder's book) is the model's from the start, so this pair is held to it at
        once and spends no window learning it."""
        book = getattr(self.h.judge.recorder, "situations", None)
        if self.h.model.too_long is not None or book is None:
            return
        key = f"{self.h.dev.qp_type.name} {SITUATION}"
        chosen = book.seen.get(UNRELIABLE_RECV_TOO_SHORT.id, {}).get(key, {})
        if len(chosen) == 1:
            self.h.model.too_long = next(iter(chosen))

    def _chose(self, track: Track, chosen: str, origin: int) -> None:
        """Record the device's choice; one other than the run's first in this situation is
        an "inconsistent" divergence."""
        recorder = self.h.judge.recorder
        if recorder is None:
            return
        key = f"{track.qp_type.name} {SITUATION}"
        where = f"{self.h.judge.test or 'this run'}, step {origin + 1}"
        earlier = recorder.choice(UNRELIABLE_RECV_TOO_SHORT.id, chosen, key, where)
        if earlier is None:
            return
        before, at = earlier
        d = self.h.divergence(
            track, "inconsistent", UNRELIABLE_RECV_TOO_SHORT, origin,
            f"the same choice as before in this situation (may rule): {before} (first at {at})",
            chosen, [f"choice={chosen}"],
        )
        d.context["situation"] = key
        self.h.diverge(track, d)
