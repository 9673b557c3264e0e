"""A bystander QP: one on another QP's Context, PD and CQs (a pair end's
engine.device.Bystander)."""

from __future__ import annotations

from qpconform.adapters import pyverbs_compat as pc
from qpconform.adapters.pyverbs_qp import PyverbsQP
from qpconform.adapters.pyverbs_sets import MR_SIZE
from qpconform.engine.device import AsyncEvent, Completion


class SharedCQQP(PyverbsQP):
    """A QP on another QP's Context, PD, send and receive CQs: a pair end's bystander
    (engine.device.Bystander). It has an MR of its own for its receive buffers; it polls
    nothing and reads no event (the owner's poll and async fd carry both); it is
    destroyed before its owner's CQs (PyverbsEnd pushes it on its own stack)."""

    def __init__(self, owner: PyverbsQP) -> None:
        self.owner = owner
        super().__init__(owner.device, owner.qp_type, serial=0)
        self.label = f"{owner.label}:bystander"

    def _create(self) -> None:
        pv, st, owner = self._pv, self._stack, self.owner
        self.ctx, self.async_fd, self.event_fd = owner.ctx, None, None
        self.pd = owner.pd
        self.mr = st.push(pv.mr.MR(self.pd, MR_SIZE, pc.const("IBV_ACCESS_LOCAL_WRITE")), "mr")
        self.send_cq, self.recv_cq = owner.send_cq, owner.recv_cq
        self.qp = st.push(self._new_qp(), "qp")

    def poll(self) -> list[Completion]:
        """Nothing: the owner's poll drains the CQs they share."""
        return []

    def events(self, timeout: float) -> list[AsyncEvent]:
        """Nothing: events arrive on the owner's Context."""
        return []

    def destroy(self) -> None:
        """Destroy the QP and its MR (never the owner's CQs, PD or Context); idempotent."""
        if self.closed:
            return
        self.closed = True
        self._stack.close()

    def close(self) -> None:
        """ResourceStack's name for destroy."""
        self.destroy()
