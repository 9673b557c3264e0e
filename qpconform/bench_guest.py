"""The guest half of `qpconform bench --vm`: the device executor plus the two figures
that must be measured inside the guest, in the same boot as the host's.

    python3 -m qpconform.bench_guest --device rxe0 --port-name qpconform.0

Extra verbs on top of the executor's (qpconform/adapters/executor.py): "plain_loop"
(modify_qp calls/s, the device's ceiling) and "guest_machine" (the stateful machine with
its engine in the guest, as `qpconform vm -- pytest` runs it today).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from qpconform.adapters import executor


def _verbs(device: Any) -> dict[str, Callable[..., Any]]:
    from qpconform import bench

    def plain_loop(seconds: float) -> float:
        return bench.modify_rate(device.name, seconds, device.port)

    def guest_machine(seconds: float) -> dict[str, Any]:
        return bench.in_guest_machine(device.name, seconds, device.port)

    return {"plain_loop": plain_loop, "guest_machine": guest_machine}


def main(argv: list[str] | None = None) -> int:
    """Serve the host's bench; then the leak check: the device's kernel object counts
    must be back where they were (the executor's pooled sets included)."""
    from fixtures import leaks

    name = executor.arguments("bench_guest").parse_known_args(argv)[0].device
    before = leaks.snapshot(name)
    status = executor.main(argv, extra=_verbs, prog="python3 -m qpconform.bench_guest")
    grown = leaks.check(name, before)
    if before is None:
        print("qpconform bench: executor leak check: counts unknown (no rdma tool)",
              file=sys.stderr)
    elif grown:
        print(f"qpconform bench: executor leak check: LEAKED {grown}", file=sys.stderr)
        return 1
    else:
        print(f"qpconform bench: executor leak check: nothing leaked ({before})",
              file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
