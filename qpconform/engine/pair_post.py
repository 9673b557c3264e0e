"""Posting work requests on a connected pair: sends, receives, the SRQ, and bursts.

`Posting` is a part of `PairHarness` (qpconform/engine/pair.py). Each post goes through
the harness's step (`WireSteps.step`: compared, then the wire runs and the pair settles);
wr_ids are unique across the pair, so a completion can never be taken for another end's,
and the fields a WR's opcode does not use are filled as asked and remembered, so a
divergence they explain is filed under the rule that says they are ignored.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from models.enums import Attr
from models.operations import Op
from models.unused_fields import UNUSED_FIELDS
from models.wire import Fault

from . import unmasked, unused_wr
from .device import VerbResult

#: The bytes a pair's WR carries (the adapters' length): an inline one needs that much cap.
INLINE_LEN = 16
#: An inline WR one byte beyond the cap is posted only when those bytes fit in the end's
#: 4096-byte MR with room to spare (a device with a larger cap: the case is skipped).
OVER_CAP_LIMIT = 2048


class Posting:
    """The pair's post verbs: it posts on the harness's device and model and hands each
    step to the harness's wire steps."""

    def __init__(self, harness: Any) -> None:
        self.h = harness
        self._ids: Iterator[int] = itertools.count(1)
        #: WRs posted with their unused fields filled: wr_id -> (operation, values)
        self.filled: dict[int, tuple[Op, dict[str, int]]] = {}

    def next_wr_id(self) -> int:
        """Pair-unique WR ids, so a completion can never be mistaken for another end's."""
        return next(self._ids)

    def send(
        self,
        side: str,
        op: Op = Op.SEND,
        fault: Fault = Fault.NONE,
        signaled: bool = True,
        inline: bool = False,
        fence: bool = False,
        unused: str = unused_wr.PLAIN,
    ) -> int:
        """post_send of one WR (unsignaled: it completes only in error; `inline`: posted
        with IBV_SEND_INLINE, within the end's max_inline_data; `fence`: with
        IBV_SEND_FENCE, its data from the end's READ sink; `unused`: how the fields its
        opcode does not use are filled, unused_wr.CHOICES); returns its wr_id."""
        h = self.h
        wr_id = self.next_wr_id()
        h.shared.owns(h.ends[side], wr_id)
        exp = h.model.post_send(side, wr_id, op, fault, signaled, inline, fence)
        filled = unused_wr.values(op, h.dev.qp_type, unused)
        end = h.dev.end(side)
        how: dict[str, Any] = {"fence": True} if fence else {}
        if filled:  # only then: an end that predates fills is still called as it was
            how["unused"] = filled
            self.filled[wr_id] = (op, filled)
        res = end.post_send(wr_id, op, fault, signaled, inline, **how)
        step: dict[str, Any] = {"wr_id": wr_id, "op": str(op), "fault": str(fault)}
        if filled:
            step["unused"] = filled  # a reproducer sets them too
        if not signaled:
            step["signaled"] = False
        if inline:
            step["inline"] = True
        if fence:
            step["fence"] = True
        h.wire.step(side, exp, res, step, also=(UNUSED_FIELDS,) if filled else ())
        h.too_long.decide()  # a UC/UD message longer than the receive: the device's way
        return wr_id

    def max_inline(self, side: str) -> int:
        """The max_inline_data `side`'s QP reports (0: it posts nothing inline)."""
        return int(getattr(self.h.dev.end(side), "max_inline", 0))

    def can_inline(self, side: str, over_cap: bool = False) -> bool:
        """Can `side` post a WR inline: within its cap (INLINE_LEN bytes fit), or one byte
        beyond it (`over_cap`: the max_inline_data + 1 bytes fit in its MR)?"""
        cap = self.max_inline(side)
        return cap < OVER_CAP_LIMIT if over_cap else cap >= INLINE_LEN

    @contextmanager
    def back_to_back(self) -> Iterator[None]:
        """Posts in this block go to the device with no wait between them (each is still
        compared at once), so they are outstanding together: READs beyond the initiator
        depth meet it (pair.read.initiator_depth). The pair settles once, at the end."""
        h = self.h
        h.model.burst = {}
        known_before = len(h.known)
        try:
            yield
        finally:
            h.model.burst = None
        h.settle()
        h.log.flush_notes("known" if len(h.known) > known_before else "match")

    def recv(
        self, side: str, short: bool = False, bad_lkey: bool = False, read_only: bool = False
    ) -> int:
        """One receive WR where the end takes its receives from (its SRQ, if it has one,
        else its own receive queue); returns its wr_id. `short`: room for less than a SEND
        carries; `bad_lkey`: its SGE names no MR; `read_only`: its SGE lies in an MR
        without LOCAL_WRITE (all three: own receive queue only)."""
        if side in self.h.model.srq_sides:
            if short or bad_lkey or read_only:
                raise ValueError("a short, bad-lkey or read-only receive goes to the end's "
                                 "own queue")
            return self.srq_recv(side)
        return self.qp_recv(side, short, bad_lkey, read_only=read_only)

    def qp_recv(
        self, side: str, short: bool = False, bad_lkey: bool = False, isolated: bool = False,
        read_only: bool = False,
    ) -> int:
        """post_recv of one WR on the end's QP (refused when it has an SRQ); a `short` one
        has room for less than a SEND carries, a `bad_lkey` one names no MR; an `isolated`
        one is made in a child process (a provider that crashes on it: libsiw on an SRQ's
        QP), so a call that kills its process is a divergence, not the session's end."""
        h = self.h
        wr_id = self.next_wr_id()
        h.shared.owns(h.ends[side], wr_id)
        if short:
            h.too_long.seed()  # the run's choice for a too-long UC/UD message, if made
        exp = h.model.post_recv(side, wr_id, short, bad_lkey, read_only)
        end = h.dev.end(side)
        # only the flags asked are passed: an end that has neither (the remote executor's)
        # still takes a plain receive
        flags = {k: True for k, v in (("short", short), ("bad_lkey", bad_lkey),
                                      ("isolated", isolated), ("read_only", read_only)) if v}
        res = end.post_recv(wr_id, **flags)
        h.wire.step(side, exp, res, {"wr_id": wr_id, **flags})
        return wr_id

    def srq_recv(self, side: str) -> int:
        """post_srq_recv of one WR to the end's SRQ; returns its wr_id."""
        h = self.h
        wr_id = self.next_wr_id()
        h.shared.owns(h.ends[side], wr_id)
        exp = h.model.post_srq_recv(side, wr_id)
        res = h.dev.end(side).post_srq_recv(wr_id)
        h.wire.step(side, exp, res, {"wr_id": wr_id, "srq": True})
        return wr_id

    def arm_srq(self, side: str, limit: int) -> VerbResult:
        """modify_srq(IBV_SRQ_LIMIT = limit) on the end's SRQ."""
        h = self.h
        exp = h.model.arm_srq(side, limit)
        fill = h.fills(h.dev.qp_type, h.model.qp(side).state, Attr(0))
        max_wr = unmasked.srq_max_wr(fill)  # outside IBV_SRQ_LIMIT: must not matter
        step: dict[str, Any] = {"srq_limit": limit}
        if max_wr is None:
            res = h.dev.end(side).arm_srq(limit)
        else:
            step["unmasked"] = {unmasked.SRQ_FIELD: max_wr}
            res = h.dev.end(side).arm_srq(limit, max_wr)
        h.wire.step(side, exp, res, step)
        if res.accepted:
            h.srq_sizes.armed(side, limit)  # query_srq reads it back
        return res
