"""What an iWARP device does with our own QPs connected through rdma_cm (run in the guest).

    qpconform vm --driver siw -- python3 scripts/cm_probe.py --out reports/out/cm/probe.json

Records, per step, what ibv_query_qp says on both sides, the errno of each plain
ibv_modify_qp, the CM and async events, and the completions of a SEND across
the connection; then, on fresh connections, what a modify to ERR, SQD, RESET,
RTS or RTR of a connected QP and rdma_disconnect do to both sides. Prints one
line per observation and writes them all as JSON (qpconform/vm/notes-iwarp-cm.md sums them up).
"""

from __future__ import annotations

import argparse
import errno
import json
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from models.enums import Attr, QPState
from qpconform.adapters import leaks
from qpconform.adapters.cm_connect import INIT_MASK
from qpconform.adapters.cm_pair import CMEnd, CMPair, connect_pair, own_qp

RECORD: list[dict[str, Any]] = []
SETTLE = 1.0  # how long the peer gets to notice a change (TCG is slow)


def note(what: str, **values: Any) -> None:
    RECORD.append({"what": what, **values})
    shown = " ".join(f"{k}={v}" for k, v in values.items())
    print(f"[{time.monotonic() - START:7.2f}] {what}: {shown}", flush=True)


def err(code: int) -> str:
    return "ok" if code == 0 else errno.errorcode.get(code, str(code))


def state(end: CMEnd) -> str:
    try:
        s = end.state()
    except Exception as exc:  # the QP may be gone or the query refused
        return f"query failed: {exc}"
    return s.name if isinstance(s, QPState) else f"raw {s}"


def states(pair: CMPair) -> dict[str, str]:
    return {"active": state(pair.a), "passive": state(pair.b)}


def observe(step: str, pair: CMPair) -> None:
    note(f"connect step {step}", **states(pair))


def events(pair: CMPair, wait: float = SETTLE) -> dict[str, Any]:
    cm = pair.cm_events(wait)
    return {
        "cm_active": cm["active"], "cm_passive": cm["passive"],
        "async_active": pair.a.async_events(0), "async_passive": pair.b.async_events(0),
    }


def lone_qp(dev: str) -> None:
    """A QP with no connection: what plain modify_qp does on the iWARP device."""
    end = CMEnd(dev, "", "lone")
    try:
        own_qp(end)
        note("lone created", state=state(end))
        to_init = end.modify_state(QPState.INIT, INIT_MASK & ~Attr.STATE)
        note("lone RESET->INIT", result=err(to_init), state=state(end))
        note("lone INIT->INIT", result=err(end.modify_state(QPState.INIT)), state=state(end))
        note("lone ->RTR (state only)", result=err(end.modify_state(QPState.RTR)), state=state(end))
        note("lone ->RTS (state only)", result=err(end.modify_state(QPState.RTS)), state=state(end))
        note("lone post_recv", result=err(end.post_recv(1)))
        note("lone post_send", result=err(end.post_send(2)))
        note("lone completions", got=end.poll(SETTLE, want=1))
        note("lone ->SQD", result=err(end.modify_state(QPState.SQD)), state=state(end))
        note("lone ->SQE", result=err(end.modify_state(QPState.SQE)), state=state(end))
        note("lone ->ERR", result=err(end.modify_state(QPState.ERR)), state=state(end))
        note("lone completions after ERR", got=end.poll(SETTLE, want=2))
        note("lone post_send in ERR", result=err(end.post_send(3)))
        note("lone post_recv in ERR", result=err(end.post_recv(4)))
        note("lone completions of WRs posted in ERR", got=end.poll(3 * SETTLE, want=2))
        note("lone ->RESET", result=err(end.modify_state(QPState.RESET)), state=state(end))
        note("lone ->INIT after RESET", result=err(end.modify_state(QPState.INIT)),
             state=state(end))
        note("lone async events", got=end.async_events(0))
    finally:
        end.close()


def harness_bring_up(dev: str) -> None:
    """The project's own device adapter: does it open the device and bring an RC QP up?"""
    from models.enums import QPType
    from qpconform.adapters.pyverbs_compat import error_code
    from qpconform.adapters.pyverbs_device import open_device
    from qpconform.engine.connect import FAST, bring_up_mask, connect_values

    try:
        device = open_device(dev)
    except Exception as exc:
        note("harness open_device", result=f"{type(exc).__name__}: {exc}")
        return
    try:
        note("harness open_device", gid_index=device.gid_index, gid=str(device.gid.gid),
             link_layer=device.caps.link_layer, mtu=int(device.port_attr.active_mtu),
             supported=[t.name for t in device.supported_qp_types()])
        qp = device.create_qp(QPType.RC)
        values = connect_values(QPType.RC, device.port, device.gid_index,
                                int(device.port_attr.active_mtu), qp.qp_num, FAST)
        cur = QPState.RESET
        for nxt in (QPState.INIT, QPState.RTR, QPState.RTS):
            mask = Attr.STATE | bring_up_mask(QPType.RC, cur, nxt)
            result = qp.modify({**values, "qp_state": int(nxt)}, mask)
            note(f"harness {cur.name}->{nxt.name} (bring-up mask {int(mask):#x})",
                 result="ok" if result.accepted else err(result.errno or 0),
                 detail=result.detail,
                 state=qp.query().state.name)
            cur = nxt
    except Exception as exc:
        note("harness bring-up", result=f"{type(exc).__name__}: {exc}",
             code=error_code(exc))
    finally:
        device.close()


def send_both_ways(pair: CMPair) -> None:
    a, b = pair.a, pair.b
    note("post_recv passive", result=err(b.post_recv(11)))
    note("post_send active", result=err(a.post_send(12, b"hello-from-a")))
    note("completions active", got=a.poll(5.0, want=1))
    note("completions passive", got=b.poll(5.0, want=1), payload=b.received(12).decode())
    note("post_recv active", result=err(a.post_recv(21)))
    note("post_send passive", result=err(b.post_send(22, b"hello-from-b")))
    note("completions passive", got=b.poll(5.0, want=1))
    note("completions active", got=a.poll(5.0, want=1), payload=a.received(12).decode())


def connected(dev_a: str, ip_a: str, dev_b: str, ip_b: str, timeout: float) -> CMPair:
    return connect_pair(dev_a, ip_a, dev_b, ip_b, timeout=timeout, observe=observe)


def first_connection(args: argparse.Namespace) -> None:
    t0 = time.monotonic()
    with connected(args.dev_a, args.ip_a, args.dev_b, args.ip_b, args.timeout) as pair:
        note("connected", seconds=round(time.monotonic() - t0, 2), port=pair.port,
             qpn_active=pair.a.qp_num, qpn_passive=pair.b.qp_num,
             query_active=pair.a.query(), query_passive=pair.b.query(), **events(pair, 0))
        send_both_ways(pair)
        for nxt in (QPState.RTS, QPState.RTR, QPState.INIT):
            note(f"connected active ->{nxt.name} (state only)",
                 result=err(pair.a.modify_state(nxt)), **states(pair))
        note("after the no-op modifies", **events(pair))
        note("post_recv passive", result=err(pair.b.post_recv(41)))
        note("post_send active", result=err(pair.a.post_send(42)))
        note("still works", completions_active=pair.a.poll(5.0, want=1),
             completions_passive=pair.b.poll(5.0, want=1))
        note("send without a posted receive (active)", result=err(pair.a.post_send(31)))
        note("after a send with no receive posted", completions_active=pair.a.poll(2.0, want=1),
             completions_passive=pair.b.poll(0, 0), **states(pair), **events(pair))


def loopback(args: argparse.Namespace) -> None:
    """Both QPs on one device (the harness's default without --peer-device)."""
    t0 = time.monotonic()
    with connect_pair(args.dev_a, args.ip_a, args.dev_a, args.ip_a, timeout=args.timeout,
                      observe=observe) as pair:
        note("loopback connected", seconds=round(time.monotonic() - t0, 2),
             qpn_active=pair.a.qp_num, qpn_passive=pair.b.qp_num, **states(pair))
        note("loopback post_recv passive", result=err(pair.b.post_recv(61)))
        note("loopback post_send active", result=err(pair.a.post_send(62, b"loopback")))
        note("loopback completions", active=pair.a.poll(5.0, want=1),
             passive=pair.b.poll(5.0, want=1), payload=pair.b.received(8).decode())


def on_connected(args: argparse.Namespace, label: str, action) -> None:
    """A fresh connection, a receive posted on both sides, then `action`; what follows."""
    with connected(args.dev_a, args.ip_a, args.dev_b, args.ip_b, args.timeout) as pair:
        pair.a.post_recv(51)
        pair.b.post_recv(52)
        result = action(pair)
        note(f"{label}", result=result, **states(pair))
        time.sleep(SETTLE)
        note(f"{label}: after {SETTLE} s", **states(pair), **events(pair),
             completions_active=pair.a.poll(1.0, want=1),
             completions_passive=pair.b.poll(1.0, want=1))
        note(f"{label}: post_send active", result=err(pair.a.post_send(53)),
             completions=pair.a.poll(3 * SETTLE, want=1))
        note(f"{label}: post_send passive", result=err(pair.b.post_send(54)),
             completions=pair.b.poll(3 * SETTLE, want=1))
        note(f"{label}: post_recv active", result=err(pair.a.post_recv(55)),
             completions=pair.a.poll(3 * SETTLE, want=1))
        note(f"{label}: active ->ERR", result=err(pair.a.modify_state(QPState.ERR)),
             **states(pair))
        note(f"{label}: active ->RESET", result=err(pair.a.modify_state(QPState.RESET)),
             **states(pair), **events(pair))


def disconnect(pair: CMPair) -> str:
    try:
        pair.link.disconnect("active")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dev-a", default="siw0")
    parser.add_argument("--ip-a", default="192.0.2.1")
    parser.add_argument("--dev-b", default="siw1")
    parser.add_argument("--ip-b", default="192.0.2.2")
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=Path("reports/out/cm/probe.json"))
    parser.add_argument("--only", help="run only the steps whose label contains this")
    args = parser.parse_args()
    note("system", kernel=platform.release(), counts_before=leaks.snapshot(args.dev_a),
         counts_before_b=leaks.snapshot(args.dev_b))
    steps = [
        ("lone QP", lambda: lone_qp(args.dev_a)),
        ("harness adapter", lambda: harness_bring_up(args.dev_a)),
        ("first connection", lambda: first_connection(args)),
        ("loopback", lambda: loopback(args)),
    ]
    for nxt in (QPState.ERR, QPState.SQD, QPState.RESET, QPState.SQE):
        steps.append((
            f"connected active ->{nxt.name}",
            lambda n=nxt: on_connected(
                args, f"connected active ->{n.name}",
                lambda pair: err(pair.a.modify_state(n))),
        ))
    steps.append(("passive ->ERR", lambda: on_connected(
        args, "connected passive ->ERR", lambda pair: err(pair.b.modify_state(QPState.ERR)))))
    steps.append(("rdma_disconnect", lambda: on_connected(args, "rdma_disconnect active",
                                                          disconnect)))
    failed = 0
    for label, run in steps:
        if args.only and args.only not in label:
            continue
        try:
            run()
        except Exception as exc:
            failed += 1
            note(f"FAILED {label}", error=f"{type(exc).__name__}: {exc}",
                 trace=traceback.format_exc(limit=4))
    time.sleep(SETTLE)
    note("system", counts_after=leaks.snapshot(args.dev_a),
         counts_after_b=leaks.snapshot(args.dev_b))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(RECORD, indent=1, default=str) + "\n")
    return 1 if failed else 0


START = time.monotonic()
if __name__ == "__main__":
    sys.exit(main())
