"""A device that floods or returns garbage: every read is bounded and every error clear."""

from __future__ import annotations

import os
from types import SimpleNamespace as NS

import pytest

from models.enums import QPState, QPType, WCStatus
from qpconform.adapters import pyverbs_qp as pd
from qpconform.adapters import pyverbs_sets


class FloodingCQ:
    """A CQ that always has a full batch more (a driver that never stops completing)."""

    def __init__(self, status: int = int(WCStatus.SUCCESS)):
        self.calls = 0
        self.status = status

    def poll(self, num_entries):
        self.calls += 1
        wc = NS(wr_id=7, status=self.status, qp_num=1, opcode=0, wc_flags=0, imm_data=0,
                byte_len=16, src_qp=0)
        wcs = [wc] * num_entries
        return num_entries, wcs


def flooded_qp(status: int = int(WCStatus.SUCCESS)) -> pd.PyverbsQP:
    qp = object.__new__(pd.PyverbsQP)
    qp.closed, qp.label, qp.qp_type = False, "RC#1", QPType.RC
    qp.send_cq, qp.recv_cq = FloodingCQ(status), FloodingCQ(status)
    return qp


def test_a_flooding_cq_returns_a_bounded_batch():
    qp = flooded_qp()
    done = qp.poll()
    assert len(done) == 2 * pd.MAX_READ
    assert qp.send_cq.calls == pd.MAX_READ // pd.QP_DEPTH


def test_a_flood_of_events_is_read_a_bounded_number_at_a_time():
    read_end, write_end = os.pipe()
    os.write(write_end, b"x")  # always readable: the fd of a device that never stops
    acked = []
    event = NS(event_type=3, ack=lambda: acked.append(1))
    ctx = NS(get_async_event=lambda: event)
    try:
        types = pd.drain_events(ctx, read_end, timeout=0.01)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert len(types) == pd.MAX_READ and len(acked) == pd.MAX_READ


def test_a_garbage_completion_status_is_a_clear_error():
    with pytest.raises(pd.GarbageFromDevice, match=r"ibv_poll_cq on RC#1 returned WCStatus 999"):
        flooded_qp(status=999).poll()


def test_a_garbage_qp_state_is_a_clear_error():
    qp = object.__new__(pd.PyverbsQP)
    qp.closed, qp.label = False, "UD#4"
    qp.qp = NS(query=lambda mask: (NS(qp_state=9), None))
    with pytest.raises(pd.GarbageFromDevice) as exc:
        qp.query()
    text = str(exc.value)
    assert "ibv_query_qp on UD#4: qp_state returned QPState 9" in text
    assert f"{int(QPState.ERR)} ERR" in text and "garbage" in text


def test_a_context_is_owned_before_anything_else_can_interrupt(monkeypatch) -> None:
    """A timeout or Ctrl-C that lands while the new Context's event fd is looked up: the
    Context is already on the stack, so the stack closes it (seen in CI: it was a local of
    the interrupted frame, kept alive by pytest's last traceback, and the leak check counted
    it as 'ctx 0 -> 1')."""
    from types import SimpleNamespace as NS

    from qpconform.adapters.resources import ResourceStack

    closed: list[str] = []
    calls = iter([set(), KeyboardInterrupt()])

    def event_fds() -> set[int]:
        value = next(calls)
        if isinstance(value, BaseException):
            raise value
        return value

    monkeypatch.setattr(pyverbs_sets, "_event_fds", event_fds)
    pv = NS(device=NS(Context=lambda name: NS(close=lambda: closed.append(name))))
    stack = ResourceStack()
    with pytest.raises(KeyboardInterrupt):
        pyverbs_sets.open_context(pv, "rxe0", stack, "context")
    assert stack.labels() == ["context"]
    stack.close()
    assert closed == ["rxe0"]


@pytest.mark.parametrize(("call", "verb"), [
    (lambda qp: qp.post_srq_recv(1), "ibv_post_srq_recv"),
    (lambda qp: qp.arm_srq(4), "ibv_modify_srq"),
])
def test_an_srq_verb_on_a_qp_without_an_srq_says_so(call, verb) -> None:
    qp = object.__new__(pd.PyverbsQP)
    qp.closed, qp.label, qp.srq = False, "RC#2", None
    with pytest.raises(pd.NoSRQ, match=rf"{verb} on RC#2: this QP was created without an SRQ"):
        call(qp)
    qp.closed = True  # a destroyed QP still answers as destroyed, whatever its SRQ
    assert call(qp) is pd._DESTROYED
