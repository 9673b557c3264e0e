"""The device executor: the small program in the guest that owns the verbs objects and
performs the verbs the host's engine asks for, one frame per request.

    python3 -m qpconform.adapters.executor --device rxe0 --port-name qpconform.0 \
        [--port-name qpconform.1 ...]      # one host session per port

Why: the model, the engine and Hypothesis cost 15-23 ms a step in the emulated CPU and
under 2 ms on the host; the verbs themselves cost tens of microseconds. So the engine runs
on the host (qpconform/adapters/remote_device.py) and only this loop runs in the guest
(syzkaller's split of manager and executor).

Connected pairs are built here too ("pair": a PyverbsPair on the device, loopback; with
--peer-device, iWARP: across the two devices, connected through rdma_cm by
"pair_establish"): their ends and bystanders are QPs like the others (modify, query, post,
poll, events, destroy by id; a pair end's post_send carries its operation and planted
fault), read after every request like the others.

One request is a list ``[verb, *args]``, or ``["batch", [request, ...]]``, or
``["then", [earlier, ...], request]``: the earlier requests (the host's deferred destroys)
run first, without reading any QP; if one fails, its error is the reply and `request`
does not run. Each reply is
``["ok", value, seen]`` or ``["err", kind, message]``: `seen` carries what every open QP
showed right after the verb (its completions and events; a modify also returns the QP's
query_qp), so the engine's reads after a step cost no round trip (None: a request that
touches no QP; a post's reply carries its QP's query_qp too). Kinds:
"unsupported" (a QP type the device cannot create: a reported skip), "lost" (the device
failed: a failure), "error" (anything else: a failure naming the verb).
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import select
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from models.enums import Attr, QPType
from models.operations import Op
from models.wire import SIDES, Fault, WireSettings
from qpconform.adapters import inflight, leaks, wire
from qpconform.adapters.executor_ports import HOST_BOUND, await_host, find_port
from qpconform.engine.device import Device, DeviceLost, PairDevice, QPHandle, UnsupportedQPType

#: Builds a loopback pair on the executor's device: (qp_type, settings, srq_sides,
#: shared_cq_sides) -> PairDevice.
PairFactory = Callable[[QPType, WireSettings, frozenset[str], frozenset[str]], PairDevice]

#: Requests that touch no QP: their reply reads nothing (`seen` is None). After every other
#: request every open QP is read (poll and events) into the reply.
_READ_NOTHING = frozenset({"ping", "stats", "batch", "plain_loop", "guest_machine",
                           "pair_values", "targets"})
#: Resource sets (Context, PD, CQs, MR) of destroyed QPs kept for the next ones: the lone
#: machine has at most 3 QPs open (qpconform/machines/lone.py MachineConfig.max_qps).
POOL = 4
#: How often "watch" looks at the CQs (completions have no fd without a channel).
_WATCH_POLL = 0.002
#: Seconds a reply may wait for the host to take it (a host end that closed: at once).
REPLY_BOUND = 60.0


class Executor:
    """Serves one host session: the device, its QPs by id, and the verbs on them."""

    def __init__(self, device: Device, extra: dict[str, Callable[..., Any]] | None = None,
                 make_pair: PairFactory | None = None) -> None:
        """`extra`: more verbs by name (the benchmark's guest half adds its own);
        `make_pair`: how a pair is built (None: the executor serves no pairs)."""
        self.device = device
        self.qps: dict[int, QPHandle] = {}
        self._next = 0
        self.make_pair = make_pair
        self.pairs: dict[int, PairDevice] = {}
        self._bystander_of: dict[int, int] = {}  # an end's id -> its bystander's id
        self.busy = 0.0  # seconds between reading a request and writing its reply
        self.waited = 0.0  # of which, deliberately waiting in "watch"
        self.handlers: dict[str, Callable[..., Any]] = {
            "ping": lambda: None,
            "create_qp": self.create_qp,
            "modify": self.modify,
            "query": lambda q: wire.query_result(self.qps[q].query()),
            "post_send": lambda q, wr_id, *how: self.post(q, "post_send", wr_id, *_send_how(how)),
            "post_recv": lambda q, wr_id, *how: self.post(q, "post_recv", wr_id, *how),
            "post_srq_recv": lambda q, wr_id: wire.verb_result(self.qps[q].post_srq_recv(wr_id)),
            "arm_srq": lambda q, limit, max_wr=None: wire.verb_result(
                self.qps[q].arm_srq(limit, max_wr)
            ),
            "srq_created": lambda q: wire.srq_created(self.qps[q].srq_created()),
            "query_srq": lambda q: self.qps[q].query_srq(),
            "resize_srq": lambda q, n: wire.verb_result(self.qps[q].resize_srq(n)),
            "pair": self.pair,
            "pair_values": lambda p, side: self.pairs[p].values(side),
            "pair_recreate": self.pair_recreate,
            "pair_establish": lambda p: self.pairs[p].establish(),  # type: ignore[attr-defined]
            "pair_close": self.pair_close,
            "targets": lambda q: self.qps[q].targets(),  # type: ignore[attr-defined]
            "poll": lambda q: [wire.completion(c) for c in self.qps[q].poll()],
            "events": lambda q, timeout: [wire.event(e) for e in self.qps[q].events(timeout)],
            "destroy": self.destroy,
            "watch": self.watch,
            "stats": self.stats,
            "plain_loop": self.plain_loop,
            **(extra or {}),
        }

    def hello(self) -> dict[str, Any]:
        """What the host's RemoteDevice needs before the first verb."""
        dev = self.device
        return {
            "name": dev.name, "port": dev.port, "gid_index": dev.gid_index,
            "caps": wire.caps(dev.caps), "identity": dev.identity(),
            "types": [int(t) for t in dev.supported_qp_types()],
            "reasons": {int(t): why for t in QPType
                        if (why := getattr(dev, "unsupported_reason", lambda _: None)(t))},
            "pid": os.getpid(),
        }

    # ---------------------------------------------------------------------------- verbs
    def create_qp(self, qp_type: int) -> list[Any]:
        qp = self.device.create_qp(QPType(qp_type))
        self._next += 1
        self.qps[self._next] = qp
        return [self._next, qp.qp_num, self.device.valid_attrs(qp),
                wire.created(getattr(qp, "created", None))]

    def modify(self, q: int, attrs: dict[str, int], mask: int) -> list[Any]:
        qp = self.qps[q]
        result = qp.modify(attrs, Attr(mask))
        return [wire.verb_result(result), wire.query_result(qp.query())]

    def post(self, q: int, verb: str, wr_id: int, *how: Any) -> list[Any]:
        """A post and the QP's query_qp after it: the engine reads the state back after the
        rule's last post (the state check), and a reply that carries it saves that round
        trip (a further post replaces it). `how`: a pair end's further arguments."""
        qp = self.qps[q]
        result = getattr(qp, verb)(wr_id, *how)
        return [wire.verb_result(result), wire.query_result(qp.query())]

    def destroy(self, q: int) -> None:
        bystander = q in self._bystander_of.values()  # destroyed with its end, not alone
        qp = self._forget(q)
        if qp is not None and not bystander:
            qp.destroy()  # a pair end destroys its bystander with it

    def _forget(self, q: int) -> QPHandle | None:
        """Stop serving QP `q` (and its bystander, if it is a pair end)."""
        bystander = self._bystander_of.pop(q, None)
        if bystander is not None:
            self.qps.pop(bystander, None)
        return self.qps.pop(q, None)

    def _serve_qp(self, qp: Any) -> int:
        self._next += 1
        self.qps[self._next] = qp
        return self._next

    # ---------------------------------------------------------------------------- pairs
    def pair(self, qp_type: int, settings: dict[str, int], srq_sides: list[str],
             shared_cq_sides: list[str]) -> list[Any]:
        """A loopback pair in RESET: [id, atomics, identity, {side: its end}] (`_end`)."""
        if self.make_pair is None:
            raise UnsupportedQPType("this executor serves no connected pairs")
        pair = self.make_pair(QPType(qp_type), WireSettings(**settings),
                              frozenset(srq_sides), frozenset(shared_cq_sides))
        self._next += 1
        pid = self._next
        self.pairs[pid] = pair
        return [pid, bool(pair.atomics), dict(pair.identity),
                {side: self._end(pair, side) for side in SIDES}]

    def _end(self, pair: PairDevice, side: str) -> list[Any]:
        """An end served as a QP: [id, qp_num, max_inline, [its bystander's id, qp_num] or
        None]."""
        end = pair.end(side)
        q = self._serve_qp(end)
        bystander = None
        if end.bystander is not None:
            self._bystander_of[q] = self._serve_qp(end.bystander)
            bystander = [self._bystander_of[q], end.bystander.qp_num]
        return [q, end.qp_num, int(getattr(end, "max_inline", 0)), bystander]

    def _ids_of(self, pair: PairDevice) -> list[int]:
        ends = [pair.end(side) for side in SIDES]
        return [q for q, qp in self.qps.items() if any(qp is end for end in ends)]

    def pair_recreate(self, p: int, side: str) -> list[Any]:
        """A fresh end (RESET) replaces `side`'s (destroyed with its bystander)."""
        pair = self.pairs[p]
        for q in self._ids_of(pair):
            if self.qps[q] is pair.end(side):
                self._forget(q)
        pair.recreate(side)
        return self._end(pair, side)

    def pair_close(self, p: int) -> None:
        pair = self.pairs.pop(p)
        for q in self._ids_of(pair):
            self._forget(q)
        pair.close()

    def watch(self, timeout: float) -> dict[int, list[Any]]:
        """Wait up to `timeout` for a completion or an event on any open QP; everything
        every QP shows then (the engine's whole wait-and-read, in one round trip)."""
        deadline = time.monotonic() + timeout
        while True:
            seen = self.seen()
            left = deadline - time.monotonic()
            if seen or left <= 0:
                return seen
            started = time.monotonic()
            fds = [fd for qp in self.qps.values() if (fd := _event_fd(qp)) is not None]
            if fds:  # an event ends the nap at once; completions are seen at the next poll
                select.select(fds, [], [], min(_WATCH_POLL, left))
            else:
                time.sleep(min(_WATCH_POLL, left))
            self.waited += time.monotonic() - started

    def plain_loop(self, seconds: float) -> float:
        """modify_qp calls/s on a context of its own (plain_loop.py): the ceiling a host
        engine's throughput line puts its rate beside."""
        from qpconform.adapters.plain_loop import modify_rate  # pyverbs: only when asked

        return modify_rate(self.device.name, seconds, self.device.port)

    def stats(self) -> dict[str, float]:
        """Where the guest's time went so far (the benchmark's cost split), and what the
        device's pool of resource sets saved."""
        pool = getattr(self.device, "pool", None)
        return {"busy": self.busy, "waited": self.waited,
                "in_verbs": inflight.seconds_in_verbs(),
                "sets_opened": pool.opened if pool else 0,
                "sets_reused": pool.reused if pool else 0,
                "sets_discarded": pool.discarded if pool else 0}

    def seen(self) -> dict[int, list[Any]]:
        """Completions and events every open QP shows now (only the QPs that show some
        are listed; the host treats the others as having shown nothing)."""
        out: dict[int, list[Any]] = {}
        fds = {q: fd for q, qp in self.qps.items() if (fd := _event_fd(qp)) is not None}
        # one select() for every QP's async fd: only those with an event pending are read
        ready = set(select.select(list(fds.values()), [], [], 0.0)[0]) if fds else set()
        for q, qp in self.qps.items():
            done = qp.poll()
            events = qp.events(0.0) if q not in fds or fds[q] in ready else []
            if done or events:
                out[q] = [[wire.completion(c) for c in done], [wire.event(e) for e in events]]
        return out

    # -------------------------------------------------------------------------- serving
    def handle(self, request: list[Any], read: bool = True) -> list[Any]:
        """The reply to one request; `read`: with what every QP shows after it."""
        verb, args = request[0], request[1:]
        if verb == "batch":
            return ["ok", [self.handle(r) for r in args[0]], None]
        if verb == "then":
            for earlier in args[0]:
                failed = self._run_quietly(earlier)
                if failed is not None:
                    return failed
            return self.handle(args[1])
        try:
            value = self.handlers[verb](*args)
            if verb == "watch":
                value, seen = None, value
            else:
                seen = None if verb in _READ_NOTHING or not read else self.seen()
        except UnsupportedQPType as exc:
            return ["err", "unsupported", str(exc)]
        except DeviceLost as exc:
            return ["err", "lost", str(exc)]
        except KeyError as exc:
            return ["err", "error", f"{verb}: no such verb or QP ({exc})"]
        except Exception as exc:
            return ["err", "error", f"{verb}: {type(exc).__name__}: {exc}"]
        return ["ok", value, seen]

    def _run_quietly(self, request: list[Any]) -> list[Any] | None:
        """Run a deferred request, reading no QP; its error reply (named as deferred), or
        None."""
        reply = self.handle(request, read=False)
        if reply[0] == "ok":
            return None
        return [reply[0], reply[1], f"{reply[2]} (deferred: reported with the next verb)"]

    def serve(self, fd_in: int, fd_out: int) -> None:
        """Answer requests until "bye" or the host goes away; then free everything."""
        try:
            while True:
                try:
                    request = wire.read_frame(fd_in, None, "host")
                except DeviceLost:
                    return  # the host closed: nothing to answer
                if request[0] == "bye":
                    send(fd_out, ["ok", None, None])
                    return
                start = time.perf_counter()
                reply = self.handle(request)
                self.busy += time.perf_counter() - start
                if not send(fd_out, reply):
                    return  # the host went away: nobody to answer
        finally:
            try:
                for pair in self.pairs.values():
                    pair.close()
                bystanders = set(self._bystander_of.values())
                for q, qp in self.qps.items():
                    if q not in bystanders:
                        qp.destroy()
            finally:
                self.pairs.clear()
                self.qps.clear()
                self.device.close()


def _send_how(how: tuple[Any, ...]) -> tuple[Any, ...]:
    """A pair end's post_send arguments after wr_id (op, fault, signaled, inline, fence,
    and the unused fields' values when filled), their enums rebuilt; a lone QP's: none."""
    return (Op(how[0]), Fault(how[1]), *how[2:]) if how else ()


def send(fd_out: int, frame: list[Any]) -> bool:
    """Write a reply; False when the host went away (its end of the port closed): the
    session ends instead of blocking the write, and the guest, for ever."""
    try:
        wire.write_frame(fd_out, frame, REPLY_BOUND, "host")
    except (DeviceLost, OSError):  # a socket's closed peer: EPIPE
        return False
    return True


def _event_fd(qp: QPHandle) -> int | None:
    """The fd that becomes readable when the QP has an event pending, if it has one."""
    return getattr(qp, "event_fd", None)


def arguments(prog: str) -> argparse.ArgumentParser:
    """The executor's options (the benchmark's guest half takes the same)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", required=True, help="the RDMA device to serve (rxe0)")
    parser.add_argument("--port", type=int, default=None, help="its port (default: first)")
    parser.add_argument("--peer-device", default=None,
                        help="iWARP: the second device its pairs span, connected through "
                        "rdma_cm (siw1); default: loopback pairs on --device")
    parser.add_argument("--port-name", action="append", default=[],
                        help="serve on this virtio-serial port (default: stdin/stdout); "
                        "repeat it for more host sessions, each served by its own process "
                        "with its own device context")
    return parser


def main(
    argv: list[str] | None = None,
    extra: Callable[[Device], dict[str, Callable[..., Any]]] | None = None,
    prog: str = "python3 -m qpconform.adapters.executor",
) -> int:
    """Serve one host session per port (the first here, each further one in a forked
    process: the host runs several engines at once, like pytest-xdist's workers); the worst
    status of them all. Then the leak check: the device's kernel object counts must be back
    where they were before (every session's QPs and pooled sets freed): 1 if not."""
    args = arguments(prog).parse_args(argv)
    _cache_loggers()
    devices = [args.device, *([args.peer_device] if args.peer_device else [])]
    counts = {name: leaks.snapshot(name) for name in devices}  # the peer: its iWARP pairs
    status = _serve_ports(args, extra)
    found = {name: leaks.check(name, counts[name]) for name in devices}
    grown = {name: leaked for name, leaked in found.items() if leaked}
    before = counts[args.device]
    if before is None:
        print("qpconform executor: leak check: counts unknown (no rdma tool)", file=sys.stderr)
    elif grown:
        print(f"qpconform executor: leak check: LEAKED {grown}", file=sys.stderr)
        return 1
    else:
        print(f"qpconform executor: leak check: nothing leaked ({before})", file=sys.stderr)
    return status


def _serve_ports(
    args: argparse.Namespace, extra: Callable[[Device], dict[str, Callable[..., Any]]] | None,
) -> int:
    ports = args.port_name or [None]
    # librdmacm opens a context on every device the first time a process uses it and keeps
    # them until the process exits: with a peer device (iWARP pairs connect through rdma_cm)
    # every session is served by a child, so the leak check below sees them closed
    here = [] if args.peer_device and ports[0] is not None else ports[:1]
    children = []
    for name in ports[len(here):]:
        pid = os.fork()
        if pid == 0:  # the child serves its port and never returns into the caller
            code = 1
            try:
                code = serve_session(args.device, args.port, name, extra, args.peer_device)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)
        children.append(pid)
    status = 0
    for name in here:
        status = serve_session(args.device, args.port, name, extra, args.peer_device)
    for pid in children:
        if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0:
            status = 1
    return status


def _cache_loggers() -> None:
    """pyverbs gives each object it builds (two per query_qp, one per modify, ...) a logger
    by name, and logging.getLogger takes the logging lock every time: a tenth of this
    process's time in the TCG guest (profiled, 19,503 calls in 30 s). The same loggers,
    by name, from a cache (this process only: it logs nothing itself)."""
    logging.getLogger = functools.cache(logging.getLogger)


def serve_session(
    device_name: str, port: int | None, port_name: str | None,
    extra: Callable[[Device], dict[str, Callable[..., Any]]] | None = None,
    peer_name: str | None = None,
) -> int:
    """Open the device (and the peer its iWARP pairs span), say hello, serve until the host
    says bye or goes away."""
    from qpconform.adapters.pyverbs_device import open_device

    started = time.monotonic()
    if port_name:
        fd = os.open(find_port(port_name), os.O_RDWR)
        fd_in = fd_out = fd
        if not await_host(fd, HOST_BOUND):
            print(f"qpconform executor: nobody connected to port {port_name!r} within "
                  f"{HOST_BOUND:.0f} s; giving up", file=sys.stderr)
            return 1
    else:
        fd_in, fd_out = sys.stdin.fileno(), sys.stdout.fileno()
    device = peer = None
    opening = device_name  # the device an error names
    try:
        device = open_device(device_name, port, pool=POOL)
        if peer_name:
            opening = peer_name
            peer = open_device(peer_name, port)
            opening = device_name
        executor = Executor(device, extra(device) if extra else None, _pairs_on(device, peer))
        hello = executor.hello()
    except Exception as exc:
        for opened in (peer, device):
            if opened is not None:
                opened.close()
        wire.write_frame(fd_out, ["err", "lost", f"{opening}: {exc}"])
        return 1
    try:
        return _hello_and_serve(executor, hello, started, fd_in, fd_out, port_name)
    finally:
        if peer is not None:
            peer.close()


def _hello_and_serve(executor: Executor, hello: dict[str, Any], started: float, fd_in: int,
                     fd_out: int, port_name: str | None) -> int:
    """Say hello, then serve until the host says bye (the executor closes its device)."""
    device = executor.device
    hello["startup_s"] = round(time.monotonic() - started, 3)
    if not send(fd_out, ["ok", hello, None]):
        print(f"qpconform executor: the host left port {port_name!r} before the hello",
              file=sys.stderr)
        device.close()
        return 1
    executor.serve(fd_in, fd_out)
    return 0


def _pairs_on(device: Any, peer: Any = None) -> PairFactory:
    """Loopback pairs on the executor's device, or with a `peer` (iWARP), pairs across the
    two devices that "pair_establish" connects through rdma_cm."""
    from qpconform.adapters.pyverbs_pair import PyverbsPair

    iwarp = device.identity().get("node_type") == "RNIC"  # connected through rdma_cm

    def make(qp_type: QPType, settings: WireSettings, srq_sides: frozenset[str],
             shared_cq_sides: frozenset[str]) -> PairDevice:
        if iwarp and peer is None:
            raise UnsupportedQPType(
                f"an iWARP pair spans two devices: start the executor with --peer-device "
                f"(qpconform vm --driver {device.name.rstrip('0123456789')} --host-engine N "
                "does)")
        return PyverbsPair(qp_type, device, peer, settings, iwarp=iwarp,
                           srq_sides=srq_sides, shared_cq_sides=shared_cq_sides)

    return make


if __name__ == "__main__":
    sys.exit(main())
