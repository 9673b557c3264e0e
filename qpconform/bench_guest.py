"""The guest half of `qpconform bench --vm`: the device executor plus the figure that must
be measured inside the guest, in the same boot as the host's.

    python3 -m qpconform.bench_guest --device rxe0 --port-name qpconform.0

One extra verb on top of the executor's (qpconform/adapters/executor.py, which serves the
plain loop and checks for leaks at its end): "guest_machine", the stateful machine with
its engine in the guest, as `qpconform vm -- pytest` runs it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from qpconform.adapters import executor


def _verbs(device: Any) -> dict[str, Callable[..., Any]]:
    from qpconform import bench
    from qpconform.cli import bench_tuning

    def guest_machine(seconds: float) -> dict[str, Any]:
        return bench.in_guest_machine(device.name, seconds, bench_tuning(), device.port)

    return {"guest_machine": guest_machine}


def main(argv: list[str] | None = None) -> int:
    """Serve the host's bench (the executor's leak check included)."""
    return executor.main(argv, extra=_verbs, prog="python3 -m qpconform.bench_guest")


if __name__ == "__main__":
    sys.exit(main())
