"""What a C executor would save: the verbs a device executor makes for each checked step,
timed from C against libibverbs and from Python through pyverbs, in one guest boot
(issue 25 item 1: measure before choosing the executor's language).

    python -m vm.verbs_cost [--release bookworm] [--seconds 3] [--output FILE]

vm/verbs_cost.c is compiled in the driver gate's build layer (the guest's release, with
libibverbs-dev) into reports/out/verbs-cost/; in the guest the same loops run on rxe0
from C and through pyverbs (modify_qp, query_qp with the executor's mask, poll_cq of an
empty CQ, create_qp + destroy_qp), and the table gives microseconds a call for both.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from vm import buildenv, image, runner
from vm.buildenv import BuildError

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
OUT = PROJECT / "reports" / "out" / "verbs-cost"
VERBS = ("modify", "query", "poll", "create_destroy")
DEPTH = 16  # the CQ's entries asked per poll, as verbs_cost.c and the executor


def build(release: str) -> Path:
    """verbs_cost.c compiled in the build layer of `release`; the binary under OUT."""
    root = image.cache_root()
    img = runner.ensure_image(runner.VmOptions(release=release, build_only=True), root)
    env = buildenv.for_image(img, root)
    inside = env.rootfs / "build" / "verbs-cost"
    inside.mkdir(parents=True, exist_ok=True)
    shutil.copy2(HERE / "verbs_cost.c", inside / "verbs_cost.c")
    result = env.chroot(["gcc", "-O2", "-Wall", "-o", "verbs_cost", "verbs_cost.c", "-libverbs"],
                        cwd="/build/verbs-cost")
    if result.returncode != 0:
        raise BuildError(f"compiling vm/verbs_cost.c failed:\n{result.stdout}{result.stderr}")
    OUT.mkdir(parents=True, exist_ok=True)
    binary = OUT / f"verbs_cost-{release}"
    shutil.copy2(inside / "verbs_cost", binary)
    return binary


def pyverbs_costs(device: str, seconds: float, mask: int) -> dict[str, float]:
    """The same loops as verbs_cost.c through pyverbs (in the guest): microseconds a call."""
    import pyverbs.enums as e
    from pyverbs.cq import CQ
    from pyverbs.device import Context
    from pyverbs.pd import PD
    from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

    with Context(name=device) as ctx, PD(ctx) as pd, CQ(ctx, DEPTH) as cq:
        cap = QPCap(max_send_wr=DEPTH, max_recv_wr=DEPTH, max_send_sge=1, max_recv_sge=1)
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)
        to_init = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1)
        to_init.pkey_index, to_init.qp_access_flags = 0, 0
        to_reset = QPAttr(qp_state=e.IBV_QPS_RESET)
        init_mask = (e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT
                     | e.IBV_QP_ACCESS_FLAGS)
        with QP(pd, init) as qp:
            def modify() -> int:
                qp.modify(to_init, init_mask)
                qp.modify(to_reset, e.IBV_QP_STATE)
                return 2

            def create_destroy() -> int:
                QP(pd, init).close()
                return 1

            loops = {"modify": modify, "query": lambda: qp.query(mask) and 1,
                     "poll": lambda: cq.poll(num_entries=DEPTH) and 1,
                     "create_destroy": create_destroy}
            return {verb: _timed(loop, seconds) for verb, loop in loops.items()}


def _timed(loop: Any, seconds: float) -> float:
    calls, start = 0, time.monotonic()
    while time.monotonic() - start < seconds:
        calls += loop()
    return 1e6 * (time.monotonic() - start) / calls


def guest(device: str, seconds: float, binary: Path, output: Path) -> int:
    """In the guest: both sides, written to `output` as JSON."""
    from qpconform.adapters.pyverbs_qp import QUERY_MASK

    c = subprocess.run([str(binary), device, str(seconds), str(QUERY_MASK)],
                       capture_output=True, text=True)
    if c.returncode != 0:
        print(c.stderr, file=sys.stderr)
        return 1
    result = {"device": device, "seconds": seconds, "c": json.loads(c.stdout),
              "pyverbs": pyverbs_costs(device, seconds, QUERY_MASK)}
    output.write_text(json.dumps(result, indent=1) + "\n")
    return 0


def table(result: dict[str, Any]) -> str:
    """Microseconds a call, C and pyverbs, and what pyverbs adds."""
    lines = [f"{'verb':<16}{'C (us)':>10}{'pyverbs (us)':>14}{'pyverbs adds':>14}"]
    for verb in VERBS:
        c, py = result["c"][verb], result["pyverbs"][verb]
        lines.append(f"{verb:<16}{c:>10.1f}{py:>14.1f}{py - c:>14.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vm.verbs_cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--release", default="bookworm", choices=image.RELEASES)
    parser.add_argument("--seconds", type=float, default=3.0, help="per loop (default 3)")
    parser.add_argument("--output", type=Path, default=OUT / "verbs-cost.json")
    parser.add_argument("--guest", metavar="DEVICE", help=argparse.SUPPRESS)
    parser.add_argument("--binary", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.guest:
        return guest(args.guest, args.seconds, args.binary, args.output)
    try:
        binary = build(args.release)
    except (BuildError, runner.UserError) as exc:
        print(f"verbs_cost: {exc}", file=sys.stderr)
        return 2
    written = OUT / "guest.json"  # the guest sees only the project
    written.unlink(missing_ok=True)
    status = subprocess.run(
        [sys.executable, "-m", "qpconform", "vm", "--release", args.release, "--timeout", "900",
         "--log-dir", str(OUT), "--", "python3", "-m", "vm.verbs_cost", "--guest", "rxe0",
         "--seconds", str(args.seconds), "--binary", str(binary), "--output",
         str(written)],
        cwd=PROJECT,
    ).returncode
    if status != 0 or not written.is_file():
        print(f"verbs_cost: the guest run failed (status {status}); see {OUT}", file=sys.stderr)
        return 1
    result = json.loads(written.read_text())
    result["release"] = args.release
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    print(f"verbs_cost: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
