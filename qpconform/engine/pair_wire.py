"""One compared step of a connected pair, and what the wire did after it.

`WireSteps` is a part of `PairHarness` (qpconform/engine/pair.py). A verb's step is
noted and concluded by the engine; then `PairModel.progress()` says what happened to
every started send, and each wire step is booked: into the shared step log, and its
completions and events (and the events that must not follow an error completion) into
the ends' ledgers, under the wire's rule and step. Unless a burst or an unpolled block
is open, the pair then settles.
"""

from __future__ import annotations

from typing import Any

from models import iwarp_pair, qkey
from models.enums import QPType
from models.operations import with_src_qp
from models.outcomes import Expectation, Outcome
from models.pair_rules import RC_RNR_WAITING
from models.sources import Rule
from models.wire import WireStep

from .device import VerbResult
from .ledger import Because

#: Rules of wire-caused state changes (the harness follows them like a verb's).
_AUTOMATIC_TRANSITIONS = ("ibta.sqe.", "ibta.err.", *iwarp_pair.AUTOMATIC)


class WireSteps:
    """Concluding a verb's step and booking the wire's: it writes the harness's step log
    and the ends' ledgers, and notes through its engine."""

    def __init__(self, harness: Any) -> None:
        self.h = harness
        self._waiting: set[tuple[str, int]] = set()  # sends noted waiting for a receive

    def step(
        self,
        side: str,
        exp: Expectation,
        res: VerbResult,
        step: dict[str, Any],
        resumed: set[int] | None = None,
        also: tuple[Rule, ...] = (),
    ) -> None:
        """Conclude a verb on `side` (`resumed`: the held sends a modify may start), run
        the wire, then settle the pair (not inside a burst or an unpolled block)."""
        h = self.h
        track = h.ends[side]
        h.log.note(track, exp, also=also)  # `also`: rules the step checks beyond exp's
        known_before = len(h.known)
        idx, _ = h.verdict.conclude(track, exp, res, step)
        if res.accepted:
            if exp.state_if_accepted != exp.state_before:
                h.end_state[side].state_because = Because(exp.rule, idx)
            if exp.verb == "modify" and resumed:
                started = resumed & set(h.model.qp(side).queues.in_flight)
                h.end_state[side].resumed |= started
                if started:
                    h.follow.mark_rewind_point(side)
            if exp.verb == "post_send":
                h.follow.ring_doorbell(side)
        self.run()
        if h.model.burst is not None or h.shared.unpolled_now:  # the block's end settles
            return
        try:
            h.settle()
        finally:
            h.follow.rewind = None
        h.log.flush_notes("known" if len(h.known) > known_before else "match")

    def run(self) -> None:
        """Book what the wire did to every send it could finish, under its rule and step;
        note each send that now waits for a receive (RNR, infinite retry) once."""
        h = self.h
        self.book(h.model.progress())
        for side, wr_id in h.model.blocked():
            if (side, wr_id) in self._waiting or h.model.decide(side)[0] is not RC_RNR_WAITING:
                continue
            self._waiting.add((side, wr_id))
            state = h.model.qp(side).state
            waits = Expectation("wire", Outcome.ACCEPT, RC_RNR_WAITING, state, state,
                                checked=(RC_RNR_WAITING,))
            h.log.note(h.ends[side], waits)

    def _with_source(self, side: str, requester: str, exp: Expectation) -> Expectation:
        """A UD receive's expectation naming the sender's QP number, which its completion
        must carry in src_qp (the model knows no QP numbers; the tracks do)."""
        sender = self.h.ends[requester].qp_num
        if side == requester or self.h.dev.qp_type is not QPType.UD or sender is None:
            return exp
        return with_src_qp(exp, sender)

    def book(self, wire_steps: list[WireStep]) -> None:
        """Each wire step into the log; its effects into the ends' ledgers."""
        h = self.h
        for ws in wire_steps:
            h.steps.append(
                {
                    "verb": "wire",
                    "side": ws.requester,
                    "wr_id": ws.wr_id,
                    "expected": ws.rule.id,
                    "observed": "-",
                }
            )
            origin = len(h.steps) - 1
            resumed = ws.wr_id in h.end_state[ws.requester].resumed
            h.end_state[ws.requester].resumed.discard(ws.wr_id)
            tags = (f"send_wr={ws.wr_id}",) + (("resumed_by_rts",) if resumed else ())
            for side, exp in ws.effects:
                exp = self._with_source(side, ws.requester, exp)
                also = (ws.forbidden_rule,) if side in ws.forbidden else ()
                h.log.note(h.ends[side], exp, ws.rule, also)
                h.ends[side].ledger.expect(exp, origin, ws.rule, tags)
                if resumed and h.follow.rewind is not None:
                    h.follow.rewind.booked |= {(side, c.wr_id) for c in exp.completions}
                if exp.rule.id.startswith(_AUTOMATIC_TRANSITIONS):  # automatic: SQE or ERR
                    h.end_state[side].state_because = Because(exp.rule, origin)
                    h.ends[side].moved(exp.state_before, h.model.qp(side).state, origin)
            for side, events in ws.forbidden.items():
                h.ends[side].ledger.forbid(events, ws.forbidden_rule, origin)
            self._keep_met(ws, origin)

    def _keep_met(self, ws: WireStep, origin: int) -> None:
        """A message dropped by a rule that leaves the receive it met posted (a wrong Q_Key):
        that receive, the peer's oldest, must not complete by it."""
        peer = self.h.model.peer_of(ws.requester)
        if ws.rule.id not in qkey.KEEPS_RECEIVE or peer in self.h.model.gone:
            return
        receives = self.h.model.qp(peer).receives()
        if receives:
            self.h.ends[peer].ledger.keep(receives[0], Because(ws.rule, origin))
