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


def serve_session(device: Any, conn: socket.socket) -> None:
    """One host session on `conn`, as the guest's executor serves it: hello, requests
    until bye or the host goes away, then everything freed and `conn` closed."""
    executor = Executor(device)
    wire.write_frame(conn.fileno(), ["ok", executor.hello(), None])
    try:
        executor.serve(conn.fileno(), conn.fileno())
    finally:
        conn.close()


@contextmanager
def remote(device: Any) -> Iterator[RemoteDevice]:
    """`device` served by an executor thread; the RemoteDevice is closed on the way out."""
    host, guest = socket.socketpair()
    thread = threading.Thread(target=serve_session, args=(device, guest),
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
