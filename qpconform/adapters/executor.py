"""The device executor: the small program in the guest that owns the verbs objects and
performs the verbs the host's engine asks for, one frame per request.

    python3 -m qpconform.adapters.executor --device rxe0 --port-name qpconform.0 \
        [--port-name qpconform.1 ...]      # one host session per port

Why: the model, the engine and Hypothesis cost 15-23 ms a step in the emulated CPU and
under 2 ms on the host; the verbs themselves cost tens of microseconds. So the engine runs
on the host (qpconform/adapters/remote_device.py) and only this loop runs in the guest
(syzkaller's split of manager and executor).

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
import glob
import logging
import os
import select
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from models.enums import Attr, QPType
from qpconform.adapters import inflight, leaks, wire
from qpconform.engine.device import Device, DeviceLost, QPHandle, UnsupportedQPType

#: Requests that touch no QP: their reply reads nothing (`seen` is None). After every other
#: request every open QP is read (poll and events) into the reply.
_READ_NOTHING = frozenset({"ping", "stats", "batch", "plain_loop", "guest_machine"})
#: Resource sets (Context, PD, CQs, MR) of destroyed QPs kept for the next ones: the lone
#: machine has at most 3 QPs open (qpconform/machines/lone.py MachineConfig.max_qps).
POOL = 4
#: How often "watch" looks at the CQs (completions have no fd without a channel).
_WATCH_POLL = 0.002
#: Seconds a port's executor waits for the host to connect before it gives up (the host
#: connects its sessions when it starts, or when its benchmark or worker reaches them).
HOST_BOUND = 600.0
#: Seconds a reply may wait for the host to take it (a host end that closed: at once).
REPLY_BOUND = 60.0


class Executor:
    """Serves one host session: the device, its QPs by id, and the verbs on them."""

    def __init__(self, device: Device, extra: dict[str, Callable[..., Any]] | None = None) -> None:
        """`extra`: more verbs by name (the benchmark's guest half adds its own)."""
        self.device = device
        self.qps: dict[int, QPHandle] = {}
        self._next = 0
        self.busy = 0.0  # seconds between reading a request and writing its reply
        self.waited = 0.0  # of which, deliberately waiting in "watch"
        self.handlers: dict[str, Callable[..., Any]] = {
            "ping": lambda: None,
            "create_qp": self.create_qp,
            "modify": self.modify,
            "query": lambda q: wire.query_result(self.qps[q].query()),
            "post_send": lambda q, wr_id: self.post(q, "post_send", wr_id),
            "post_recv": lambda q, wr_id: self.post(q, "post_recv", wr_id),
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
        return [self._next, qp.qp_num, self.device.valid_attrs(qp)]

    def modify(self, q: int, attrs: dict[str, int], mask: int) -> list[Any]:
        qp = self.qps[q]
        result = qp.modify(attrs, Attr(mask))
        return [wire.verb_result(result), wire.query_result(qp.query())]

    def post(self, q: int, verb: str, wr_id: int) -> list[Any]:
        """A post and the QP's query_qp after it: the engine reads the state back after the
        rule's last post (the state check), and a reply that carries it saves that round
        trip (a further post replaces it)."""
        qp = self.qps[q]
        result = getattr(qp, verb)(wr_id)
        return [wire.verb_result(result), wire.query_result(qp.query())]

    def destroy(self, q: int) -> None:
        qp = self.qps.pop(q, None)
        if qp is not None:
            qp.destroy()

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
            for qp in self.qps.values():
                qp.destroy()
            self.qps.clear()
            self.device.close()


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


def find_port(name: str) -> str:
    """The /dev node of the virtio-serial port QEMU named `name` (no udev in the guest:
    /sys/class/virtio-ports/vportNpM/name says which node it is)."""
    for entry in glob.glob("/sys/class/virtio-ports/*/name"):
        if Path(entry).read_text().strip() == name:
            return "/dev/" + Path(entry).parent.name
    found = sorted(Path(p).read_text().strip() for p in glob.glob(
        "/sys/class/virtio-ports/*/name"))
    raise SystemExit(f"qpconform executor: no virtio-serial port named {name!r} "
                     f"(the guest has: {', '.join(found) or 'none'}); is virtio_console loaded?")


def arguments(prog: str) -> argparse.ArgumentParser:
    """The executor's options (the benchmark's guest half takes the same)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", required=True, help="the RDMA device to serve (rxe0)")
    parser.add_argument("--port", type=int, default=None, help="its port (default: first)")
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
    before = leaks.snapshot(args.device)
    status = _serve_ports(args, extra)
    grown = leaks.check(args.device, before)
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
    children = []
    for name in ports[1:]:
        pid = os.fork()
        if pid == 0:  # the child serves its port and never returns into the caller
            code = 1
            try:
                code = serve_session(args.device, args.port, name, extra)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)
        children.append(pid)
    status = serve_session(args.device, args.port, ports[0], extra)
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
) -> int:
    """Open the device, say hello, serve until the host says bye or goes away."""
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
    try:
        device = open_device(device_name, port, pool=POOL)
        executor = Executor(device, extra(device) if extra else None)
        hello = executor.hello()
    except Exception as exc:
        wire.write_frame(fd_out, ["err", "lost", f"{device_name}: {exc}"])
        return 1
    hello["startup_s"] = round(time.monotonic() - started, 3)
    if not send(fd_out, ["ok", hello, None]):
        print(f"qpconform executor: the host left port {port_name!r} before the hello",
              file=sys.stderr)
        device.close()
        return 1
    executor.serve(fd_in, fd_out)
    return 0


def await_host(fd: int, bound: float) -> bool:
    """Wait until the host end of a virtio-serial port is open (the port polls HUP until
    then, and a write blocks), at most `bound` s: a session the host never reaches (a
    benchmark that failed, a worker that never started) ends with a message instead of
    keeping the guest up until it is killed."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    deadline = time.monotonic() + bound
    while True:
        ready = poller.poll(100)
        if ready and not ready[0][1] & select.POLLHUP:
            return True
        if time.monotonic() > deadline:
            return False
        if ready:  # HUP is level-triggered: nap instead of spinning on it
            time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
