"""A connected pair's QPs from creation to destruction: bring-up, connection, reset, resync.

`Lifecycle` is a part of `PairHarness` (qpconform/engine/pair.py). Every move it makes
is a modify through the harness (compared, then the pair settles); it also makes each
end's track anew when the end gets a new QP or its books are cleared, and brings a pair
a known divergence left desynced back to a clean start (both ends through RESET; iWARP:
new QPs and a new connection, an iWARP QP is never reused).
"""

from __future__ import annotations

import time
from typing import Any, cast

from models import iwarp_pair
from models.enums import QPState
from models.pair_checks import STATE_RULE
from models.wire import SIDES

from .device import ConnectedPairDevice, VerbResult
from .judge import DivergenceError
from .ledger import Ledger
from .pair_follow import EndState
from .track import Track

S = QPState


class Lifecycle:
    """The pair's QP lifecycle: it drives the harness's device and model through the
    harness's modify and settle."""

    def __init__(self, harness: Any) -> None:
        self.h = harness

    def fresh(self, side: str) -> None:
        """A new track for `side` (new QP, or its books cleared)."""
        h = self.h
        end = h.dev.end(side)
        h.ends[side] = Track(
            end, h.model.qp(side), h.dev.qp_type, getattr(end, "qp_num", None),
            h.steps, side=side, ledger=Ledger(),
        )
        h.end_state[side] = EndState()

    def destroy(self, side: str) -> None:
        """destroy_qp on one end ("the peer is gone"). Its CQs go with it: nothing it
        delivers later can be seen, so the end is first observed for the completion window
        (widened by the run's tail) since the pair's last step or delivery.

        That stretch is not noted as a window that ended an observation: under load it is
        shorter than the run's slowest pair delivery (a bookworm run with another VM beside
        it: 35 of 314 such windows, 151-370 ms against a 412 ms completion), and every such
        run would read "timing unsure". The sound end is to keep the destroyed end's CQs
        observed like a parked pair's (the adapters destroy them with the QP): not done."""
        h = self.h
        window = h.delivery.window(h.windows.kind("completion"), h.quiet_window)
        left = window - (time.monotonic() - h.active_at)
        h.watch.wait(max(0.0, left), 0.0)  # polls at least once: nothing may be lost
        track = h.ends[side]
        exp = h.model.destroy(side)
        h.dev.end(side).destroy()  # its bystander, if any, with it
        h.model.apply(side, exp, True)
        h.log.step(track, exp, VerbResult(True), {})
        h.log.note(track, exp)
        h.shared.bystanders.pop(side, None)
        self.fresh(side)
        h.wire.run()
        h.log.flush_notes("match")

    def recreate(self, side: str) -> None:
        """A new QP for a destroyed end, in RESET."""
        h = self.h
        h.dev.recreate(side)
        h.model.recreate(side)
        self.fresh(side)
        h.shared.fresh(side)
        h.srq_sizes.forget(side)  # a new SRQ with it, if it has one
        h.steps.append(
            {"verb": "create", "side": side, "expected": "RESET", "observed": "created"}
        )

    def resync(self) -> None:
        """Both ends to RESET and back to RTS: nothing a known divergence left stays behind.

        iWARP: new QPs on both ends and a new connection (an iWARP QP is never reused: siw
        ignores RESET, and a connection ends for good)."""
        h = self.h
        if h.variant.connection_managed:
            self.reconnect()
            return
        for side in SIDES:
            if side in h.model.gone:
                self.recreate(side)
            elif h.model.qp(side).state != S.RESET:
                self.reset(side)
            by = h.shared.bystanders.get(side)
            if by is not None and by.model.state != S.RESET:
                h.shared.modify(side, S.RESET)
        self._start_over()

    def reset(self, side: str) -> None:
        """Bring one end to RESET. A refusal a quirk knows (rxe refuses to leave SQD while
        its drain runs) leaves it where it was: then through ERR, which every state may
        enter, to RESET."""
        h = self.h
        if not h.modify(side, S.RESET).accepted and h.model.qp(side).state != S.RESET:
            h.modify(side, S.ERR)
            h.modify(side, S.RESET)

    def bring_up(self, side: str, to: QPState = S.RTS) -> None:
        """RESET/INIT/... -> `to` along INIT, RTR, RTS, with PSNs synced to the peer."""
        h = self.h
        order = [S.RESET, S.INIT, S.RTR, S.RTS]
        psns = self.peer_psns(side)
        while h.model.qp(side).state != to:
            cur = h.model.qp(side).state
            if cur not in order[: order.index(to)]:
                raise ValueError(f"bring_up({side!r}): {cur.name} is not on the way to "
                                 f"{to.name}; reset() the end first")
            nxt = order[order.index(cur) + 1]
            res = h.modify(side, nxt, psns)
            if not res.accepted:
                track = h.ends[side]
                raise DivergenceError(
                    h.divergence(
                        track, "outcome", STATE_RULE, track.last(),
                        f"bring-up {cur.name}->{nxt.name} accepted",
                        f"refused errno={res.errno} {res.detail}", ["refused"], verb="modify",
                    )
                )

    def connect(self) -> None:
        """Both ends to RTS (INIT, RTR, RTS on each; iWARP: INIT, then the connection)."""
        h = self.h
        if h.variant.connection_managed:
            for side in SIDES:
                self.bring_up(side, S.INIT)
            cast(ConnectedPairDevice, h.dev).establish()
            assert isinstance(h.model, iwarp_pair.IwarpPairModel)
            h.wire.book(h.model.establish())
            h.settle()
            h.log.flush_notes("match")
            return
        for st in (S.INIT, S.RTR, S.RTS):
            for side in SIDES:
                self.bring_up(side, st)

    def reconnect(self) -> None:
        """iWARP: destroy what is left of both ends, make two new QPs, connect them."""
        for side in SIDES:
            if side not in self.h.model.gone:
                self.destroy(side)
        for side in SIDES:
            self.recreate(side)
        self._start_over()

    def _start_over(self) -> None:
        """Fresh books on both ends (nothing excused, nothing out of sync), then connect."""
        for track in self.h.tracks():
            track.ledger.excused.clear()
        self.h.desynced = False
        self.connect()

    def peer_psns(self, side: str) -> dict[str, int]:
        """rq_psn/sq_psn that match the peer's current send/expected PSNs (after a reset)."""
        h = self.h
        peer = h.model.peer_of(side)
        if peer in h.model.gone or h.model.qp(peer).state in (S.RESET, S.INIT):
            return {}
        got = h.dev.end(peer).query().attrs
        return {"rq_psn": got.get("sq_psn", 0), "sq_psn": got.get("rq_psn", 0)}
