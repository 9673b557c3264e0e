"""The executor's wire: length-prefixed msgpack frames, and the device observations as
plain lists (the engine's dataclasses, rebuilt on the other side).

Both ends import this module: the host's RemoteDevice (qpconform/adapters/remote_device.py)
and the guest's executor (qpconform/adapters/executor.py). A frame is a 4-byte big-endian
length and one msgpack object; nothing else crosses. Why msgpack: compact, fast, a
well-kept library with wheels for the guest's Python; why lists instead of dicts: a
step's reply is built and read in the emulated CPU, where every key costs.
"""

from __future__ import annotations

import os
import select
import struct
import time
from dataclasses import asdict
from typing import Any

import msgpack

from models.attributes import DeviceCaps
from models.enums import MTU, EventType, QPState, WCOpcode, WCStatus
from qpconform.engine.device import (
    AsyncEvent,
    Completion,
    Created,
    DeviceLost,
    QueryResult,
    SrqCreated,
    VerbResult,
)

_HEADER = struct.Struct(">I")
#: A frame larger than this is garbage from a broken peer, not a reply.
MAX_FRAME = 64 << 20
#: Bytes a bounded write hands the kernel at a time (a step's reply is smaller).
_BOUNDED_WRITE = 4096


class WireTimeout(DeviceLost):
    """The other end did not answer within the bound: the executor (or the VM) is gone."""


# --------------------------------------------------------------------------------- frames
def pack(obj: Any) -> bytes:
    body = msgpack.packb(obj, use_bin_type=True)
    return _HEADER.pack(len(body)) + body


def write_frame(fd: int, obj: Any, timeout: float | None = None, what: str = "host") -> None:
    """Write one frame to a blocking fd (a socket's, or a virtio-serial port's). With a
    `timeout`, a peer that is gone or does not read raises DeviceLost instead of blocking
    forever: a virtio-serial port whose host end closed blocks every write (and says
    POLLHUP)."""
    data = memoryview(pack(obj))
    deadline = None if timeout is None else time.monotonic() + timeout
    while data:
        if deadline is None:
            sent = os.write(fd, data)
        else:  # writable: room for a small write at least, so this one cannot block
            _await_writable(fd, deadline, what)
            sent = os.write(fd, data[:_BOUNDED_WRITE])
        data = data[sent:]


def _await_writable(fd: int, deadline: float, what: str) -> None:
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise WireTimeout(f"{what}: does not take the reply")
        for _, flags in poller.poll(1000 * left):
            if flags & select.POLLOUT:
                return
            if flags & (select.POLLHUP | select.POLLERR):
                raise DeviceLost(f"{what}: the other end closed the connection")


def _read_exact(fd: int, n: int, deadline: float | None, what: str) -> bytes:
    chunks: list[bytes] = []
    while n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise WireTimeout(f"{what}: no answer in time")
        chunk = os.read(fd, n)
        if not chunk:
            raise DeviceLost(f"{what}: the other end closed the connection")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, timeout: float | None, what: str = "executor") -> Any:
    """One frame from `fd`; `timeout` (None: wait forever) bounds the whole frame."""
    deadline = None if timeout is None else time.monotonic() + timeout
    (size,) = _HEADER.unpack(_read_exact(fd, _HEADER.size, deadline, what))
    if size > MAX_FRAME:
        raise DeviceLost(f"{what}: a frame of {size} bytes: the stream is corrupt")
    return msgpack.unpackb(_read_exact(fd, size, deadline, what), raw=False,
                           strict_map_key=False)


# ---------------------------------------------------------------------------- observations
def verb_result(r: VerbResult) -> list[Any]:
    return [r.accepted, r.errno, r.detail, r.killed]


def to_verb_result(v: list[Any]) -> VerbResult:
    return VerbResult(bool(v[0]), v[1], v[2], v[3])


def srq_created(c: SrqCreated | None) -> list[Any] | None:
    """What create_srq wrote back, as [asked, returned] (RemoteEnd.srq_created reads it)."""
    return None if c is None else [c.asked, c.returned]


def completion(c: Completion) -> list[Any]:
    return [c.wr_id, c.queue, int(c.status), c.qp_num,
            None if c.opcode is None else int(c.opcode), c.imm_data, c.data,
            c.byte_len, c.wc_flags, c.src_qp]


def to_completion(v: list[Any]) -> Completion:
    """A completion off the wire (an executor older than byte_len, wc_flags and src_qp
    sends seven values: those are then not read)."""
    byte_len, wc_flags, src_qp = [*v[7:10], None, None, None][:3]
    return Completion(v[0], v[1], WCStatus(v[2]), v[3],
                      None if v[4] is None else WCOpcode(v[4]), v[5], v[6],
                      byte_len, wc_flags, src_qp)


def event(e: AsyncEvent) -> list[Any]:
    return [int(e.event_type), e.qp_num]


def to_event(v: list[Any]) -> AsyncEvent:
    return AsyncEvent(EventType(v[0]), v[1])


def query_result(q: QueryResult) -> list[Any]:
    return [int(q.state), q.sq_draining, q.attrs, q.cap]


def to_query_result(v: list[Any]) -> QueryResult:
    """A query_qp off the wire (an executor older than init_attr.cap sends three values:
    the cap is then not read)."""
    cap = v[3] if len(v) > 3 else None
    return QueryResult(QPState(v[0]), v[1], dict(v[2]), None if cap is None else dict(cap))


def created(c: Created | None) -> list[Any] | None:
    """What creating a QP wrote back (engine.device.Created), or None: not read."""
    return None if c is None else [c.asked, c.cap, c.cqe_asked, c.cqe]


def to_created(v: list[Any] | None) -> Created | None:
    return None if v is None else Created(dict(v[0]), dict(v[1]), int(v[2]), dict(v[3]))


def caps(c: DeviceCaps) -> dict[str, Any]:
    out = asdict(c)
    out["max_mtu"], out["active_mtu"] = int(c.max_mtu), int(c.active_mtu)
    out["empty_gids"] = sorted(c.empty_gids)
    return out


def to_caps(v: dict[str, Any]) -> DeviceCaps:
    fields = dict(v)
    fields["max_mtu"], fields["active_mtu"] = MTU(v["max_mtu"]), MTU(v["active_mtu"])
    fields["empty_gids"] = frozenset(v["empty_gids"])
    return DeviceCaps(**fields)
