"""The Device protocol (qpconform/engine/device.py) served by an executor in a guest
(qpconform/adapters/executor.py): the engine, Hypothesis and the model run here, on the
host, at native speed; each verb is one round trip.

A step costs one round trip: after every verb that can change something the executor
reads all its QPs (completions, events; a modify's or a post's query_qp) into the reply, and the
engine's reads right after the step are answered from that (`_Seen`), once. A later read
asks the device again. A destroy costs none: it is deferred and sent ahead of the next
request in the same frame (nothing of a destroyed QP is read in between: the engine has
forgotten it, and the executor runs the destroy first); if it fails, that next request
does not run and raises the destroy's error, so a failed destroy is still a failure
(close() sends what is left). A dead or silent executor is a lost device (DeviceLost),
never a skip.
"""

from __future__ import annotations

import contextlib
import select
import socket
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from models.attributes import DeviceCaps
from models.enums import Attr, QPType
from qpconform.adapters import wire
from qpconform.engine.device import (
    AsyncEvent,
    Completion,
    Created,
    DeviceLost,
    QueryResult,
    UnsupportedQPType,
    VerbResult,
)

#: The identity's "engine" entry of a run whose engine is here and device in a guest.
ENGINE = "on the host, the device behind an executor"
#: Seconds a verb may take in the guest before the executor counts as gone (TCG is slow,
#: and a busy host slower: generous; a wait for events adds its own timeout).
VERB_BOUND = 60.0


class Channel:
    """One connection to an executor: request, reply, bounded, counted."""

    def __init__(self, sock: socket.socket, label: str) -> None:
        self.sock, self.label = sock, label
        self.fd = sock.fileno()
        self.round_trips = 0
        self.by_verb: Counter[str] = Counter()  # round trips per verb: what a step costs
        self.carried: Counter[str] = Counter()  # deferred requests sent ahead of another
        self.seconds = 0.0  # spent waiting for replies (transport + guest)
        self.closed = False
        self.broken = False  # the wire failed: the executor is gone

    def call(
        self, request: list[Any], wait: float = 0.0, before: list[list[Any]] | None = None
    ) -> tuple[Any, dict[int, Any] | None]:
        """Send one request (after the deferred requests `before`, in the same frame),
        return (value, seen: None if the executor read no QP); raise what the executor
        reported."""
        if self.closed:
            raise DeviceLost(f"{self.label}: the executor session is closed")
        if self.broken:  # a replay after the loss must not wait VERB_BOUND for a dead guest
            raise DeviceLost(f"{self.label}: the executor went away earlier in this session")
        start = time.perf_counter()
        try:
            wire.write_frame(self.fd, ["then", before, request] if before else request)
            reply = wire.read_frame(self.fd, VERB_BOUND + wait, f"{self.label} ({request[0]})")
        except (OSError, DeviceLost) as exc:
            self.broken = True
            if isinstance(exc, DeviceLost):
                raise
            raise DeviceLost(f"{self.label}: the executor went away ({exc})") from None
        finally:
            self.round_trips += 1
            self.by_verb[request[0]] += 1
            for earlier in before or ():
                self.carried[earlier[0]] += 1
            self.seconds += time.perf_counter() - start
        if reply[0] == "ok":
            seen = reply[2]
            return reply[1], None if seen is None else {int(k): v for k, v in seen.items()}
        kind, message = reply[1], reply[2]
        if kind == "unsupported":
            raise UnsupportedQPType(message)
        if kind == "lost":
            raise DeviceLost(f"{self.label}: {message}")
        raise RuntimeError(f"{self.label}: {message}")

    def close(self) -> None:
        if self.closed:
            return
        with contextlib.suppress(DeviceLost, RuntimeError, OSError):
            self.call(["bye"])  # gone already: nothing to free on this side
        self.closed = True
        self.sock.close()


@dataclass
class _Seen:
    """What the executor showed of one QP in the reply to the device's latest round trip,
    not yet read by the engine. Valid until the next round trip: reads in between are
    answered from here (the device as of that reply; what arrives later, the next real
    read sees)."""

    completions: list[Completion] = field(default_factory=list)
    events: list[AsyncEvent] = field(default_factory=list)
    trip: int = -1  # the round trip whose reply filled it
    #: a modify's or post's read-back, for the next query() unless the engine read a
    #: completion or event of the QP first (RemoteQP._read_since_query)
    query: QueryResult | None = None


class RemoteQP:
    """A QPHandle whose verbs run in the executor."""

    #: events(timeout) returns as soon as anything arrives on any QP of the executor (its
    #: "watch"), so the engine waits out a window in one round trip (engine/core.py).
    wakes_on_arrival = True

    def __init__(self, device: RemoteDevice, qid: int, qp_type: QPType, qp_num: int,
                 valid: dict[str, int], created: Created | None = None) -> None:
        self.device, self.qid, self.qp_type, self.qp_num = device, qid, qp_type, qp_num
        self.valid = valid
        self.created = created  # what create_qp and create_cq wrote back, in the guest
        self.closed = False
        self.seen = _Seen()

    def _call(self, verb: str, *args: Any, wait: float = 0.0) -> Any:
        return self.device.call([verb, self.qid, *args], wait)

    def modify(self, attrs: Mapping[str, int], mask: Attr) -> VerbResult:
        if self.closed:
            return VerbResult(False, None, "destroyed")
        result, query = self._call("modify", dict(attrs), int(mask))
        self.seen.query = wire.to_query_result(query)
        return wire.to_verb_result(result)

    def query(self) -> QueryResult:
        if self.closed:
            raise RuntimeError(f"remote qp {self.qid} was destroyed: nothing to query")
        if self.seen.query is not None and self.seen.trip == self.device.channel.round_trips:
            found, self.seen.query = self.seen.query, None
            return found
        return wire.to_query_result(self._call("query"))

    def post_send(self, wr_id: int) -> VerbResult:
        return self._post("post_send", wr_id)

    def post_recv(self, wr_id: int) -> VerbResult:
        return self._post("post_recv", wr_id)

    def _post(self, verb: str, wr_id: int, *how: Any) -> VerbResult:
        """A post; its reply's query_qp answers the state check after it (as a modify's).
        `how`: a pair end's further arguments."""
        if self.closed:
            return VerbResult(False, None, "destroyed")
        result, query = self._call(verb, wr_id, *how)
        self.seen.query = wire.to_query_result(query)
        return wire.to_verb_result(result)

    def poll(self) -> list[Completion]:
        if self.closed:
            return []
        seen = self.seen
        early, seen.completions = seen.completions, []
        if seen.trip != self.device.channel.round_trips:
            early += [wire.to_completion(c) for c in self._call("poll")]
        return self._read_since_query(early)

    def _read_since_query(self, found: list[Any]) -> list[Any]:
        """What the engine reads of this QP after its verb: once it read something, the
        verb's query_qp (taken before these were polled) is older than what it knows, so the
        next query() asks the device (a flush read here can mean the QP left its state since
        the query; the engine then compares the state it is in now)."""
        if found:
            self.seen.query = None
        return found

    def events(self, timeout: float) -> list[AsyncEvent]:
        if self.closed:
            return []
        seen = self.seen
        if seen.trip == self.device.channel.round_trips and timeout == 0.0:
            found, seen.events = seen.events, []
            return self._read_since_query(found)
        if timeout > 0.0:  # the engine's wait: one round trip reads every QP
            self.device.watch(timeout)
            found, seen.events = seen.events, []
            return self._read_since_query(found)
        early, seen.events = seen.events, []
        return self._read_since_query(
            early + [wire.to_event(e) for e in self._call("events", 0.0)])

    def destroy(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.device.forget(self)
        self.device.defer(["destroy", self.qid])


class RemoteDevice:
    """A Device whose QPs live in an executor (one per host process: xdist workers each
    open their own session)."""

    def __init__(self, channel: Channel, hello: dict[str, Any]) -> None:
        self.channel = channel
        self.name: str = hello["name"]
        self.port: int = hello["port"]
        self.gid_index: int = hello["gid_index"]
        self.caps: DeviceCaps = wire.to_caps(hello["caps"])
        self._identity: dict[str, str] = dict(hello["identity"])
        self._types = [QPType(t) for t in hello["types"]]
        self._reasons = {QPType(int(t)): r for t, r in hello.get("reasons", {}).items()}
        self._qps: dict[int, RemoteQP] = {}
        self._deferred: list[list[Any]] = []  # sent ahead of the next request
        self.closed = False

    def call(self, request: list[Any], wait: float = 0.0) -> Any:
        value, seen = self._send(request, wait)
        if seen is not None:
            self._take(seen)
        return value

    def _send(self, request: list[Any], wait: float = 0.0) -> tuple[Any, dict[int, Any] | None]:
        """One round trip carrying the deferred requests first."""
        before, self._deferred = self._deferred, []
        return self.channel.call(request, wait, before)

    def defer(self, request: list[Any]) -> None:
        """Send `request` ahead of the next one (a destroy: nothing to wait for)."""
        self._deferred.append(request)

    def watch(self, timeout: float) -> None:
        """Wait up to `timeout` in the guest for anything on any QP; what came is handed
        to the QPs (their next poll() and events(0) read it without a round trip)."""
        self.call(["watch", timeout], wait=timeout)

    def _take(self, seen: dict[int, Any]) -> None:
        """Hand what the executor showed to each QP (the others showed nothing)."""
        for qid, qp in self._qps.items():
            got = seen.get(qid)
            if got:
                qp.seen.completions.extend(wire.to_completion(c) for c in got[0])
                qp.seen.events.extend(wire.to_event(e) for e in got[1])
            qp.seen.trip = self.channel.round_trips

    def identity(self) -> dict[str, str]:
        found = dict(self._identity)
        # stable across runs (no socket path): `report --compare` and `--same` diff identities
        found["engine"] = ENGINE
        return found

    def supported_qp_types(self) -> list[QPType]:
        return list(self._types)

    def unsupported_reason(self, qp_type: QPType) -> str | None:
        return self._reasons.get(QPType(qp_type))

    def create_qp(self, qp_type: QPType) -> RemoteQP:
        if QPType(qp_type) in self._reasons:
            raise UnsupportedQPType(self._reasons[QPType(qp_type)])
        value, seen = self._send(["create_qp", int(qp_type)])  # before the QP is known
        qid, qp_num, valid = value[:3]
        made = wire.to_created(value[3]) if len(value) > 3 else None  # an older executor: none
        qp = RemoteQP(self, qid, QPType(qp_type), qp_num, dict(valid), made)
        self._qps[qid] = qp
        if seen is not None:
            self._take(seen)
        return qp

    def serve(self, qp: RemoteQP) -> None:
        """Hand `qp` what each reply shows of it (a pair's end or bystander, built by the
        executor's "pair")."""
        self._qps[qp.qid] = qp

    def valid_attrs(self, qp: RemoteQP) -> dict[str, int]:
        return dict(qp.valid)

    def plain_loop(self, seconds: float) -> float:
        """The executor's plain modify loop (calls/s) on the guest's device: the throughput
        line's ceiling, measured where the device is."""
        return float(self.call(["plain_loop", seconds], wait=seconds))

    def forget(self, qp: RemoteQP) -> None:
        self._qps.pop(qp.qid, None)

    def close(self) -> None:
        """Destroy what is left and end the session (the executor frees the rest). A
        deferred destroy that fails here raises, after the session ended (unless the
        executor is gone already: that was raised where it happened)."""
        if self.closed:
            return
        self.closed = True
        for qp in list(self._qps.values()):
            qp.destroy()
        try:
            if self._deferred and not self.channel.broken:
                self.call(["ping"])
        except (DeviceLost, RuntimeError):
            self.channel.close()
            raise
        self.channel.close()


def connect(
    path: str, timeout: float, label: str | None = None,
    gone: Callable[[], str | None] = lambda: None,
) -> RemoteDevice:
    """Connect to the executor behind a unix socket (QEMU's virtio-serial chardev) and read
    its hello; waits up to `timeout` s for the guest to boot and the executor to start,
    and no longer than `gone()` (why the guest is gone, or None) stays None. A QEMU that
    dies before the hello (a KVM boot that fell back to TCG) is waited out: the next one
    listens on the same path."""
    deadline = time.monotonic() + timeout
    label = label or f"executor at {path}"
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            hello = _await_hello(sock, path, deadline, label, gone)
        except BaseException:
            sock.close()
            raise
        if hello is not None:
            break
        sock.close()  # that QEMU went away before its guest said hello: the next one
    if hello[0] != "ok":
        sock.close()
        raise DeviceLost(f"{label}: {hello[2]}")
    return RemoteDevice(Channel(sock, label), hello[1])


def _await_hello(
    sock: socket.socket, path: str, deadline: float, label: str,
    gone: Callable[[], str | None],
) -> list[Any] | None:
    """The executor's hello on `sock`, or None if the listener closed before sending one."""
    connected = False
    while True:
        why = gone()
        if why is not None:
            raise DeviceLost(f"{label}: {why}")
        if time.monotonic() > deadline:
            raise DeviceLost(f"{label}: no hello within the boot bound")
        if not connected:
            try:
                sock.connect(path)  # QEMU listens from its start, before the guest boots
                connected = True
            except (FileNotFoundError, ConnectionRefusedError):
                time.sleep(0.1)
            continue
        if select.select([sock], [], [], 0.5)[0]:
            try:
                return wire.read_frame(sock.fileno(), 30.0, f"{label} (hello)")
            except (DeviceLost, ConnectionResetError):
                return None
