"""What a C executor would save: the verbs a device executor makes for each checked step,
timed from C against libibverbs and from Python through pyverbs, in one guest boot
(so the executor's language is chosen on figures: docs/measured.md).

    python -m qpconform.vm.verbs_cost [--release bookworm] [--seconds 3] [--output FILE]

qpconform/vm/verbs_cost.c is compiled in the driver gate's build layer (the guest's release, with
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
from pathlib import Path
from typing import Any

from qpconform.vm import buildenv, image, runner
from qpconform.vm.buildenv import BuildError

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parents[1]
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
        raise BuildError(f"compiling qpconform/vm/verbs_cost.c failed:\n"
                         f"{result.stdout}{result.stderr}")
    OUT.mkdir(parents=True, exist_ok=True)
    binary = OUT / f"verbs_cost-{release}"
    shutil.copy2(inside / "verbs_cost", binary)
    return binary


def guest(device: str, seconds: float, binary: Path, output: Path) -> int:
    """In the guest: both sides, written to `output` as JSON."""
    from qpconform.adapters.plain_loop import pyverbs_call_costs
    from qpconform.adapters.pyverbs_qp import QUERY_MASK

    c = subprocess.run([str(binary), device, str(seconds), str(QUERY_MASK)],
                       capture_output=True, text=True)
    if c.returncode != 0:
        print(c.stderr, file=sys.stderr)
        return 1
    result = {"device": device, "seconds": seconds, "c": json.loads(c.stdout),
              "pyverbs": pyverbs_call_costs(device, seconds, QUERY_MASK, DEPTH)}
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
    parser = argparse.ArgumentParser(prog="python -m qpconform.vm.verbs_cost", description=__doc__,
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
         "--log-dir", str(OUT), "--", "python3", "-m", "qpconform.vm.verbs_cost", "--guest", "rxe0",
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
