"""The pyverbs pair end's target MRs (models/access.py) without a device: a stand-in
pyverbs records what the end registers and where its WRs point."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from models import access
from models.enums import AccessFlag
from models.operations import Op
from models.wire import Fault
from qpconform.adapters.pyverbs_pair import PyverbsEnd
from qpconform.adapters.resources import ResourceStack


class _MR:
    """A registered buffer: its bytes, its PD, its rights and keys."""

    made = 0

    def __init__(self, pd: Any, length: int, rights: int) -> None:
        _MR.made += 1
        self.pd, self.rights, self.data = pd, AccessFlag(rights), bytearray(length)
        self.buf, self.rkey, self.lkey = 0x10000 * _MR.made, 0x100 + _MR.made, 0x200 + _MR.made

    def write(self, data: bytes, length: int, offset: int) -> None:
        self.data[offset:offset + length] = data[:length]

    def read(self, length: int, offset: int) -> bytes:
        return bytes(self.data[offset:offset + length])

    def close(self) -> None:
        """Nothing to free."""


class _PD:
    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx

    def close(self) -> None:
        """Nothing to free."""


def _end(atomics: bool = True) -> PyverbsEnd:
    """An end with only what target MRs need (no QP: post_send is not called here)."""
    pv = SimpleNamespace(mr=SimpleNamespace(MR=_MR), pd=SimpleNamespace(PD=_PD))
    end = object.__new__(PyverbsEnd)
    end.device = SimpleNamespace(pv=pv, atomics=atomics)
    end.handle = SimpleNamespace(pd=_PD("ctx"), ctx="ctx")
    end._stack, end._targets, end._other_pd, end.closed = ResourceStack(), {}, None, False
    end.rmr = _MR(end.handle.pd, 4096, 0)
    return end


def test_targets_carry_their_rights_pd_and_guard_pattern() -> None:
    end = _end()
    for name, (rights, other) in access.TARGETS.items():
        mr = end.target(name)
        assert mr.rights == access.registered_with(name) and rights in mr.rights
        assert (AccessFlag.LOCAL_WRITE in mr.rights) == (name != access.READ_ONLY)
        assert (mr.pd is not end.handle.pd) == other
        assert mr.read(access.TARGET_LEN, 0) == access.fill(name)
    assert end.target("full") is end.target("full")  # registered once
    assert set(end.targets()) == set(access.TARGETS)


def test_a_device_without_atomics_registers_no_remote_atomic_right() -> None:
    end = _end(atomics=False)
    assert AccessFlag.REMOTE_ATOMIC not in end.target("full").rights


@pytest.mark.parametrize("fault", [Fault.GRANTED, Fault.AT_END, Fault.PAST_END,
                                   Fault.NO_RIGHT, Fault.OTHER_PD], ids=str)
@pytest.mark.parametrize("op", sorted(access.TARGETED_OPS), ids=str)
def test_a_target_fault_names_the_window_with_the_targets_own_rkey(op: Op, fault: Fault) -> None:
    requester, responder = _end(), _end()
    requester.peer = responder
    rkey, addr = requester._remote(op, fault)
    window = access.window_of(op, fault)
    mr = responder.target(window.target)
    assert (rkey, addr) == (mr.rkey, mr.buf + window.offset)
    if fault.refused and fault is not Fault.PAST_END:
        assert fault is Fault.OTHER_PD or access.right_of(op) not in mr.rights


def test_a_local_sge_past_its_end_crosses_the_requesters_own_full_target() -> None:
    end = _end()
    addr, length, lkey = end._local_sge(Op.SEND, Fault.LOCAL_PAST_END)
    mr = end.target("full")
    assert lkey == mr.lkey and addr < mr.buf + access.TARGET_LEN < addr + length


def test_a_local_sge_of_another_pd_names_the_second_pds_target() -> None:
    end = _end()
    addr, length, lkey = end._local_sge(Op.RDMA_WRITE, Fault.LOCAL_OTHER_PD)
    mr = end.target("other_pd")
    assert lkey == mr.lkey and mr.pd is not end.handle.pd
    assert mr.buf <= addr and addr + length <= mr.buf + access.TARGET_LEN


@pytest.mark.parametrize("fault", [Fault.LOCAL_PAST_END, Fault.LOCAL_OTHER_PD], ids=str)
def test_a_write_with_a_local_fault_names_the_peers_granted_window(fault: Fault) -> None:
    requester, responder = _end(), _end()
    requester.peer = responder
    window = access.window_of(Op.RDMA_WRITE, Fault.GRANTED)
    mr = responder.target(window.target)
    assert requester._remote(Op.RDMA_WRITE, fault) == (mr.rkey, mr.buf + window.offset)


@pytest.mark.parametrize(("op", "length"), [(Op.RDMA_READ, access.WR_LEN),
                                            (Op.FETCH_ADD, access.ATOMIC_LEN)], ids=str)
def test_a_sink_without_local_write_lies_in_the_read_only_target(op: Op, length: int) -> None:
    end = _end()
    addr, got, lkey = end._local_sge(op, Fault.SINK_READ_ONLY)
    mr = end.target(access.READ_ONLY)
    assert (lkey, got) == (mr.lkey, length) and AccessFlag.LOCAL_WRITE not in mr.rights
    assert mr.buf <= addr and addr + length <= mr.buf + access.TARGET_LEN


def test_a_read_only_receive_lies_in_the_target_without_local_write() -> None:
    end = _end()
    posted: list[Any] = []
    end.device.pv.wr = SimpleNamespace(
        SGE=lambda addr, length, lkey: (addr, length, lkey),
        RecvWR=lambda wr_id, num_sge, sg: (wr_id, sg))
    end.device.pv.RDMAError = end.device.pv.Error = RuntimeError
    end.handle.qp = SimpleNamespace(post_recv=lambda wr, bad: posted.append(wr))
    assert end.post_recv(7, read_only=True).accepted
    mr = end.target(access.READ_ONLY)
    ((wr_id, [(addr, length, lkey)]),) = posted
    assert (wr_id, lkey) == (7, mr.lkey) and AccessFlag.LOCAL_WRITE not in mr.rights
    assert mr.buf <= addr and addr + length <= mr.buf + access.TARGET_LEN
