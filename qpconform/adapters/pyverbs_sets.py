"""What a QP is made of besides itself: a Context (told apart by its async-event fd), a
PD, an MR and send and receive CQs (`ResourceSet`), and the pool that lends the sets of
destroyed QPs to new ones (`SetPool`).

A device opened with a pool (the guest's executor: qpconform/adapters/executor.py) hands a
plain QP a pooled set that an earlier, destroyed QP used: opening them is most of what
creating a QP costs under TCG. `SetPool` says when a set is fit to be reused.
"""

from __future__ import annotations

import os
import select
from dataclasses import dataclass
from typing import Any, Protocol

from qpconform.adapters import pyverbs_compat as pc
from qpconform.adapters.resources import ResourceStack

QP_DEPTH = 64
MR_SIZE = 4096
EVENT_FD_LINK = "anon_inode:[infinibandevent]"


def fds_linked_to(target: str) -> set[int]:
    """This process' fds whose /proc/self/fd link reads `target` (one kind of file)."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == target:
                found.add(int(name))
        except OSError:  # closed while we looked
            continue
    return found


def _event_fds() -> set[int]:
    """This process' fds that are uverbs event files (async or completion channel)."""
    return fds_linked_to(EVENT_FD_LINK)


@dataclass
class Opened:
    """A Context and the async-event fd it brought (None if it could not be told apart)."""

    ctx: Any
    async_fd: int | None


def open_context(pv: pc.Pyverbs, name: str, stack: ResourceStack, label: str) -> Opened:
    """A new Context on `name`, on `stack` the moment it exists: a timeout or Ctrl-C that
    lands while its event fd is looked up must not leave it to a traceback (pytest keeps
    the last one: the run's leak check then counted it, seen in CI)."""
    before = _event_fds()
    ctx = stack.push(pv.device.Context(name=name), label)
    new = _event_fds() - before
    return Opened(ctx, new.pop() if len(new) == 1 else None)


class Borrower(Protocol):
    """What a set's objects are lent to (pyverbs_qp.PyverbsQP)."""

    ctx: Any
    async_fd: int | None
    event_fd: int | None
    pd: Any
    mr: Any
    send_cq: Any
    recv_cq: Any
    cqe: dict[str, int]


class ResourceSet:
    """A Context (its async fd tells this QP's events apart), a PD, an MR and send and
    receive CQs: what a QP is made of besides itself (and its SRQ). A QP opens its own on
    its stack, or borrows one a `SetPool` kept from a destroyed QP. Its own ResourceStack
    closes it."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.stack = ResourceStack()
        self.ctx: Any = None
        self.async_fd: int | None = None
        self.cqe: dict[str, int] = {}  # ibv_cq.cqe by queue, read when opened

    def open(self, pv: pc.Pyverbs, name: str) -> None:
        st = self.stack
        opened = open_context(pv, name, st, "context")
        self.ctx, self.async_fd = opened.ctx, opened.async_fd
        self.pd = st.push(pv.pd.PD(self.ctx), "pd")
        self.mr = st.push(pv.mr.MR(self.pd, MR_SIZE, pc.const("IBV_ACCESS_LOCAL_WRITE")), "mr")
        self.send_cq = st.push(pv.cq.CQ(self.ctx, QP_DEPTH, None, None, 0), "send_cq")
        self.recv_cq = st.push(pv.cq.CQ(self.ctx, QP_DEPTH, None, None, 0), "recv_cq")
        # ibv_cq.cqe as create_cq returned it (asked QP_DEPTH), read once per set
        found = {"send": pc.cq_cqe(self.send_cq), "recv": pc.cq_cqe(self.recv_cq)}
        self.cqe = {k: v for k, v in found.items() if v is not None}

    def lend_to(self, qp: Borrower) -> None:
        """Make the set's objects the QP's own (a set it opened, or one lent by a pool)."""
        qp.ctx, qp.async_fd, qp.event_fd = self.ctx, self.async_fd, self.async_fd
        qp.pd, qp.mr, qp.send_cq, qp.recv_cq = self.pd, self.mr, self.send_cq, self.recv_cq
        qp.cqe = dict(self.cqe)

    def clean(self) -> bool:
        """Is the set fit for a new QP: nothing left on its CQs, no event pending on its
        Context? Whatever is there belongs to a QP destroyed earlier (the kernel drops a
        destroyed QP's unread events, ib_uverbs_release_uevent(), and its tasks are
        stopped: nothing of it comes later), so it must not reach the next QP's ledger,
        where a reused wr_id could match it. A set with anything left is closed instead,
        which is what closing it at destroy did to it before: unseen, unjudged, and never
        blamed on another QP. A Context whose async fd could not be told apart is never
        reused (its pending events cannot be checked)."""
        if self.async_fd is None:
            return False
        for cq in (self.send_cq, self.recv_cq):
            count, _wcs = cq.poll(num_entries=1)
            if count:
                return False
        return not select.select([self.async_fd], [], [], 0.0)[0]

    def close(self) -> None:
        self.stack.close()


class SetPool:
    """Resource sets of destroyed QPs, lent again to new plain QPs of one device.

    Every set is on the device's ResourceStack from the moment it exists, so closing the
    device (at the end, on failure, on Ctrl-C) closes the free ones and the lent ones
    (after their QPs: a QP is always pushed after the set it borrows). At most `keep`
    free sets are kept; a set that is not clean when it is taken is closed, never lent.
    """

    def __init__(self, pv: pc.Pyverbs, name: str, stack: ResourceStack, keep: int) -> None:
        self.pv, self.name, self.stack, self.keep = pv, name, stack, keep
        self.free: list[ResourceSet] = []
        self._serial = 0
        self.opened = self.reused = self.discarded = 0  # what the pool saved (stats)

    def take(self) -> ResourceSet:
        """A clean free set, else a new one."""
        while self.free:
            found = self.free.pop()
            if found.clean():
                self.reused += 1
                return found
            self.discard(found)
        self._serial += 1
        made = self.stack.push(ResourceSet(f"set#{self._serial}"), f"set#{self._serial}")
        try:
            made.open(self.pv, self.name)
        except BaseException:
            self.discard(made)
            raise
        self.opened += 1
        return made

    def give(self, lent: ResourceSet, reuse: bool) -> None:
        """A QP is done with `lent`: kept for the next one if `reuse` and there is room."""
        if reuse and len(self.free) < self.keep and not self.stack.closed:
            self.free.append(lent)
        else:
            self.discard(lent)

    def discard(self, lent: ResourceSet) -> None:
        self.stack.forget(lent.label)
        self.discarded += 1
        lent.close()
