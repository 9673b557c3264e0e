"""A connected pair served by the guest's executor (qpconform/adapters/executor.py builds a
PyverbsPair there: loopback, or with its peer device an iWARP pair connected through
rdma_cm): the PairDevice protocol for the pair engine on the host.

Its ends and bystanders are RemoteQPs of the session's RemoteDevice: every reply shows
what they showed, and the engine's reads after a step cost no round trip, as for lone QPs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from models.enums import QPType
from models.operations import Op
from models.wire import SIDES, Fault, WireSettings
from qpconform.adapters import wire
from qpconform.adapters.remote_device import RemoteDevice, RemoteQP
from qpconform.engine.device import AsyncEvent, Completion, SrqCreated, VerbResult


class RemoteBystander(RemoteQP):
    """A QP on an end's CQs: its completions come with the end's poll, its events on the
    end's Context (the executor's bystander reads nothing of its own)."""

    def poll(self) -> list[Completion]:
        return []

    def events(self, timeout: float) -> list[AsyncEvent]:
        return []

    def destroy(self) -> None:
        """Nothing to send: the executor destroys a bystander with its end."""
        if not self.closed:
            self.closed = True
            self.device.forget(self)


class RemoteEnd(RemoteQP):
    """One end of a pair in the executor (a PairEnd)."""

    def __init__(self, device: RemoteDevice, qp_type: QPType, info: list[Any]) -> None:
        qid, qp_num, self.max_inline, bystander = info
        super().__init__(device, qid, qp_type, qp_num, {})
        self.bystander: RemoteBystander | None = None
        if bystander is not None:
            self.bystander = RemoteBystander(device, bystander[0], qp_type, bystander[1], {})
            device.serve(self.bystander)
        device.serve(self)

    def post_send(  # type: ignore[override]  # a pair end's send says what it carries
        self, wr_id: int, op: Op = Op.SEND, fault: Fault = Fault.NONE, signaled: bool = True,
        inline: bool = False, fence: bool = False, unused: Mapping[str, int] | None = None,
    ) -> VerbResult:
        how = [dict(unused)] if unused else []  # only then: an older executor takes the rest
        return self._post("post_send", wr_id, str(op), str(fault), signaled, inline, fence, *how)

    def post_recv(
        self, wr_id: int, short: bool = False, bad_lkey: bool = False, isolated: bool = False,
        read_only: bool = False,
    ) -> VerbResult:
        """`isolated`: the executor makes the post in a child of its own (a provider that
        crashes on it kills that child, reported as VerbResult.killed); `read_only` only
        when set (an older executor takes the rest)."""
        how = [True] if read_only else []
        return self._post("post_recv", wr_id, short, bad_lkey, isolated, *how)

    def targets(self) -> dict[str, bytes]:
        """The bytes of the end's target MRs in the executor (the guard bands' check)."""
        if self.closed:
            return {}
        return {str(k): bytes(v) for k, v in self._call("targets").items()}

    def post_srq_recv(self, wr_id: int) -> VerbResult:
        if self.closed:
            return VerbResult(False, None, "destroyed")
        return wire.to_verb_result(self._call("post_srq_recv", wr_id))

    def arm_srq(self, limit: int, max_wr: int | None = None) -> VerbResult:
        if self.closed:
            return VerbResult(False, None, "destroyed")
        return wire.to_verb_result(self._call("arm_srq", limit, max_wr))

    def srq_created(self) -> SrqCreated | None:
        found = None if self.closed else self._call("srq_created")
        return None if found is None else SrqCreated(dict(found[0]), dict(found[1]))

    def query_srq(self) -> dict[str, int] | None:
        found = None if self.closed else self._call("query_srq")
        return None if found is None else {str(k): int(v) for k, v in found.items()}

    def resize_srq(self, max_wr: int) -> VerbResult:
        if self.closed:
            return VerbResult(False, None, "destroyed")
        return wire.to_verb_result(self._call("resize_srq", max_wr))

    def destroy(self) -> None:
        """Deferred like a lone QP's; the executor destroys the bystander with it."""
        if self.bystander is not None:
            self.bystander.destroy()
        super().destroy()


class RemotePair:
    """Two QPs of `qp_type` connected to each other in the guest (on its device, or iWARP:
    across the executor's two devices)."""

    def __init__(
        self, device: RemoteDevice, qp_type: QPType, settings: WireSettings,
        srq_sides: frozenset[str] = frozenset(), shared_cq_sides: frozenset[str] = frozenset(),
    ) -> None:
        self.device, self.qp_type, self.settings = device, QPType(qp_type), settings
        self.srq_sides, self.shared_cq_sides = frozenset(srq_sides), frozenset(shared_cq_sides)
        self.closed = False
        self.pid, self.atomics, identity, ends = device.call(
            ["pair", int(self.qp_type), asdict(settings), sorted(self.srq_sides),
             sorted(self.shared_cq_sides)])
        self.identity: dict[str, str] = {**identity, **device.identity()}
        self._ends = {side: RemoteEnd(device, self.qp_type, ends[side]) for side in SIDES}

    def end(self, side: str) -> RemoteEnd:
        return self._ends[side]

    def values(self, side: str) -> dict[str, int]:
        """Valid attrs to connect `side` to its peer (the executor's, with the pair's timers)."""
        return dict(self.device.call(["pair_values", self.pid, side]))

    def establish(self) -> None:
        """iWARP: the executor connects the two idle ends through rdma_cm (both enter RTS);
        a failed connection is an error naming the step."""
        self.device.call(["pair_establish", self.pid])

    def recreate(self, side: str) -> None:
        """A fresh end (RESET) replaces `side`'s."""
        self._ends[side].destroy()
        info = self.device.call(["pair_recreate", self.pid, side])
        self._ends[side] = RemoteEnd(self.device, self.qp_type, info)

    def close(self) -> None:
        """Destroy both ends (in the executor, with what they own); idempotent."""
        if self.closed:
            return
        self.closed = True
        for end in self._ends.values():
            for qp in (end, end.bystander):
                if qp is not None and not qp.closed:  # closed by pair_close, not one by one
                    qp.closed = True
                    self.device.forget(qp)
        self.device.call(["pair_close", self.pid])
