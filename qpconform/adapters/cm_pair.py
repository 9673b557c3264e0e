"""Two of our own RC QPs connected through rdma_cm: the probe's and the self-tests' pair.

cm_connect.py connects QPs that exist already (`link_qps`, used by the device adapter);
here each side also makes its own Context, PD, MR, CQs and RC QP the way
pyverbs_device.py makes them (`own_qp`), so `connect_pair` returns a CMPair owning
everything, released on close() and when the connection fails half way.
pyverbs is imported only inside the functions that use it (no RDMA stack on a host).
"""

from __future__ import annotations

import contextlib
import errno
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from models.enums import AccessFlag, Attr, QPState, QPType
from qpconform.adapters import pyverbs_compat as pc
from qpconform.adapters.cm_connect import (
    DEPTH,
    INIT_MASK,
    MR_SIZE,
    NO_ATTR,
    QUERY_MASK,
    RECV_LEN,
    RECV_OFFSET,
    SEND_LEN,
    CMError,
    CMLink,
    async_name,
    cm_step,
    link_qps,
)
from qpconform.adapters.pyverbs_qp import drain_events
from qpconform.adapters.pyverbs_sets import open_context
from qpconform.adapters.resources import ResourceStack


@dataclass
class CMEnd:
    """One side's own Context, PD, MR, CQs and RC QP (made by own_qp)."""

    device: str
    ip: str
    role: str  # "active" or "passive"
    ctx: Any = None
    pd: Any = None
    mr: Any = None
    send_cq: Any = None
    recv_cq: Any = None
    qp: Any = None
    qp_num: int = 0
    async_fd: int | None = None
    stack: ResourceStack = field(default_factory=ResourceStack)

    # ------------------------------------------------------------------- verbs
    def query(self) -> dict[str, int]:
        """ibv_query_qp: the state and a few attributes, raw, as the kernel reports them."""
        attr, _init = self.qp.query(QUERY_MASK)
        return {
            k: int(getattr(attr, k))
            for k in ("qp_state", "cur_qp_state", "path_mtu", "max_rd_atomic",
                      "max_dest_rd_atomic", "qp_access_flags", "sq_draining")
            if hasattr(attr, k)
        }

    def state(self) -> QPState | int:
        """The state ibv_query_qp reports (the raw number if it is no QP state)."""
        raw = self.query()["qp_state"]
        return QPState(raw) if raw in QPState._value2member_map_ else raw

    def modify_state(self, state: QPState, extra: Attr = NO_ATTR) -> int:
        """ibv_modify_qp to `state` (with valid values for the extra bits); 0 or the errno."""
        from pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError
        from pyverbs.qp import QPAttr

        attr = QPAttr()
        attr.qp_state = int(state)
        if Attr.PKEY_INDEX in extra:
            attr.pkey_index = 0
        if Attr.PORT in extra:
            attr.port_num = 1
        if Attr.ACCESS_FLAGS in extra:
            attr.qp_access_flags = int(
                AccessFlag.LOCAL_WRITE | AccessFlag.REMOTE_WRITE | AccessFlag.REMOTE_READ
            )
        try:
            self.qp.modify(attr, int(Attr.STATE | extra))
        except (PyverbsRDMAError, PyverbsError) as exc:
            return pc.error_code(exc) or errno.EIO
        return 0

    def post_recv(self, wr_id: int) -> int:
        """One receive WR for a buffer in the MR; 0 or the errno."""
        from pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError
        from pyverbs.wr import SGE, RecvWR

        try:
            sge = SGE(self.mr.buf + RECV_OFFSET, RECV_LEN, self.mr.lkey)
            self.qp.post_recv(RecvWR(wr_id=wr_id, num_sge=1, sg=[sge]), None)
        except (PyverbsRDMAError, PyverbsError) as exc:
            return pc.error_code(exc) or errno.EIO
        return 0

    def post_send(self, wr_id: int, payload: bytes = b"qpconform-cm") -> int:
        """One signaled SEND of `payload` (at most SEND_LEN bytes) from the MR; 0 or the errno."""
        from pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError
        from pyverbs.wr import SGE, SendWR

        data = payload[:SEND_LEN].ljust(SEND_LEN, b"\0")
        try:
            self.mr.write(data, len(data))
            sge = SGE(self.mr.buf, SEND_LEN, self.mr.lkey)
            wr = SendWR(wr_id=wr_id, opcode=pc.const("IBV_WR_SEND"), num_sge=1, sg=[sge],
                        send_flags=pc.const("IBV_SEND_SIGNALED"))
            self.qp.post_send(wr, None)
        except (PyverbsRDMAError, PyverbsError) as exc:
            return pc.error_code(exc) or errno.EIO
        return 0

    def async_events(self, timeout: float = 0.0) -> list[str]:
        """Async events of the QP's own Context (acked), waiting at most `timeout`."""
        if self.async_fd is None:
            return []
        return [async_name(t) for t in drain_events(self.ctx, self.async_fd, timeout)]

    def received(self, length: int = SEND_LEN) -> bytes:
        """The bytes in the receive buffer."""
        return bytes(self.mr.read(length, RECV_OFFSET))

    def poll(self, timeout: float, want: int = 1) -> list[tuple[str, int, int]]:
        """(queue, wr_id, status) of completions, until `want` came or `timeout` passed."""
        done: list[tuple[str, int, int]] = []
        deadline = time.monotonic() + timeout
        while True:
            for queue, cq in (("send", self.send_cq), ("recv", self.recv_cq)):
                count, wcs = cq.poll(num_entries=DEPTH)
                done.extend((queue, int(wc.wr_id), int(wc.status)) for wc in wcs[:count])
            if len(done) >= want or time.monotonic() >= deadline:
                return done
            time.sleep(0.01)

    def close(self) -> None:
        """Release the QP and what it owns (newest first)."""
        self.stack.close()


def own_qp(end: CMEnd) -> None:
    """Context, PD, MR, CQs and an RC QP in RESET, as pyverbs_device.py makes them."""
    from pyverbs.cq import CQ
    from pyverbs.mr import MR
    from pyverbs.pd import PD
    from pyverbs.qp import QP, QPCap, QPInitAttr

    st = end.stack
    opened = open_context(pc.load(), end.device, st, f"{end.role} context")
    end.ctx = opened.ctx
    end.async_fd = opened.async_fd
    end.pd = st.push(PD(end.ctx), f"{end.role} pd")
    end.mr = st.push(MR(end.pd, MR_SIZE, pc.const("IBV_ACCESS_LOCAL_WRITE")), f"{end.role} mr")
    end.send_cq = st.push(CQ(end.ctx, DEPTH, None, None, 0), f"{end.role} send_cq")
    end.recv_cq = st.push(CQ(end.ctx, DEPTH, None, None, 0), f"{end.role} recv_cq")
    cap = QPCap(max_send_wr=DEPTH, max_recv_wr=DEPTH, max_send_sge=1, max_recv_sge=1)
    init = QPInitAttr(qp_type=int(QPType.RC), scq=end.send_cq, rcq=end.recv_cq, cap=cap,
                      sq_sig_all=1)
    end.qp = st.push(QP(end.pd, init), f"{end.role} qp")  # no QPAttr: stays in RESET
    end.qp_num = int(end.qp.qp_num)


@dataclass
class CMPair:
    """Two of our own QPs (active on `a`, passive on `b`) and the link that connects them;
    close() releases everything."""

    a: CMEnd
    b: CMEnd
    link: CMLink | None = None
    log: list[str] = field(default_factory=list)
    closed: bool = False

    def ends(self) -> tuple[CMEnd, CMEnd]:
        return self.a, self.b

    @property
    def port(self) -> int:
        return self.link.port if self.link else 0

    def cm_events(self, timeout: float = 0.0) -> dict[str, list[str]]:
        """CM events per side since the last look (see CMLink.events)."""
        return self.link.events(timeout) if self.link else {"active": [], "passive": []}

    def close(self) -> None:
        """The link first (cm_ids, channels), then each QP and what it owns; idempotent."""
        if self.closed:
            return
        self.closed = True
        errors: list[BaseException] = []
        for part in (self.link, self.a, self.b):
            if part is None:
                continue
            try:
                part.close()
            except BaseException as exc:  # the rest is still released
                errors.append(exc)
        if errors:
            raise errors[0]

    def __enter__(self) -> CMPair:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect_pair(
    dev_a: str,
    ip_a: str,
    dev_b: str,
    ip_b: str,
    *,
    port: int | None = None,
    timeout: float = 10.0,
    observe: Callable[[str, CMPair], None] | None = None,
) -> CMPair:
    """Our own RC QP on `dev_a` connected to our own RC QP on `dev_b` through rdma_cm.

    The QPs are made as qpconform/adapters/pyverbs_device.py makes them and moved RESET -> INIT
    with ibv_modify_qp; link_qps connects them (`a` active, `b` passive) and the CM moves
    them to RTS. `observe(step, pair)` is called after each step ("created", "init",
    then link_qps' steps), e.g. to query the QPs. Every wait is bounded by `timeout`; on
    any failure all that was made is released and the error re-raised.
    """
    pc.load()
    pair = CMPair(CMEnd(dev_a, ip_a, "active"), CMEnd(dev_b, ip_b, "passive"))
    a, b = pair.a, pair.b

    def step(name: str) -> None:
        pair.log.append(name)
        if observe is not None:
            observe(name, pair)

    try:
        for end in (a, b):
            with cm_step(f"{end.role} {end.device}: create the QP"):
                own_qp(end)
        step("created")
        for end in (a, b):
            code = end.modify_state(QPState.INIT, INIT_MASK & ~Attr.STATE)
            if code:
                raise CMError(f"{end.role} {end.device}: RESET -> INIT refused: "
                              f"{errno.errorcode.get(code, code)}")
        step("init")
        pair.link = link_qps(dev_a, ip_a, a.qp_num, dev_b, ip_b, b.qp_num, port=port,
                             timeout=timeout, observe=step)
    except BaseException:
        with contextlib.suppress(Exception):  # the first error is the one to report
            pair.close()
        raise
    return pair
