"""A fake device behind the executor: the host side (RemoteDevice) talks to an Executor
serving a FakeDevice in a thread over a socketpair, so the wire, the executor and the
one-round-trip-per-step reads are tested without a VM."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from qpconform.adapters import wire
from qpconform.adapters.executor import Executor
from qpconform.adapters.remote_device import Channel, RemoteDevice

#: The fake's plain loop (no pyverbs modify loop here): the throughput line's ceiling.
FAKE_VERBS = {"plain_loop": lambda seconds: 1.0}


def serve_session(device: Any, conn: socket.socket, make_pair: Any = None) -> None:
    """One host session on `conn`, as the guest's executor serves it: hello, requests
    until bye or the host goes away, then everything freed and `conn` closed; `make_pair`
    builds its pairs (tests/fake_pair.py's, say)."""
    executor = Executor(device, FAKE_VERBS, make_pair)
    wire.write_frame(conn.fileno(), ["ok", executor.hello(), None])
    try:
        executor.serve(conn.fileno(), conn.fileno())
    finally:
        conn.close()


def fake_pairs(fault: str | None = None, iwarp: bool = False) -> Any:
    """An executor's pair factory over tests/fake_pair.py's pairs, planting `fault`
    (`iwarp`: pairs connected by establish(), as an iWARP executor's)."""
    from tests.fake_pair import FakePair

    def make(qp_type: Any, settings: Any, srq_sides: frozenset[str],
             shared_cq_sides: frozenset[str]) -> FakePair:
        return FakePair(qp_type, fault, settings=settings, srq_sides=srq_sides,
                        shared_cq_sides=shared_cq_sides, iwarp=iwarp)

    return make


@contextmanager
def remote(device: Any, make_pair: Any = None) -> Iterator[RemoteDevice]:
    """`device` served by an executor thread (its pairs built by `make_pair`); the
    RemoteDevice is closed on the way out."""
    host, guest = socket.socketpair()
    thread = threading.Thread(target=serve_session, args=(device, guest, make_pair),
                              name="fake-executor", daemon=True)
    thread.start()
    hello = wire.read_frame(host.fileno(), 10.0)
    remote_device = RemoteDevice(Channel(host, "fake executor"), hello[1])
    try:
        yield remote_device
    finally:
        try:
            remote_device.close()
        finally:  # close() may raise (a deferred destroy failed): the executor still ends
            thread.join(10.0)


@contextmanager
def listening(device: Any, path: str, accept_bound: float = 120.0,
              make_pair: Any = None) -> Iterator[threading.Thread]:
    """`device` served to the first process that connects to the unix socket `path` (as
    QEMU's virtio-serial chardev lets the host reach the guest's executor); the thread ends
    when that session does (or nobody came within `accept_bound` s)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    server.settimeout(accept_bound)

    def accept_and_serve() -> None:
        try:
            conn, _ = server.accept()
        except OSError:  # nobody came, or the server was closed
            return
        finally:
            server.close()
        serve_session(device, conn, make_pair)

    thread = threading.Thread(target=accept_and_serve, name="fake-executor-listener",
                              daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        thread.join(accept_bound)
