"""Does the engine keep rxe 6.1's memory-corrupting modify unsent, and only there? A probe.

    qpconform vm [--release trixie] -- python3 -m scripts.hazard_probe [DEVICE]

On DEVICE (default rxe0), with the quirk profile of the run's kernel: an RC QP is brought
to SQD with max_dest_rd_atomic 1, then SQD->SQD sets it to 16, through the engine (the
Checker, as the suites run it). Where rxe.rd_atomic_grow_corrupts_memory applies (6.1) the
modify must not be sent (a known hazard); elsewhere it is sent and checked like any other
(6.12 accepts it). Either way a second QP is then brought to RTS: the device still works.
Prints one line per fact and exits 0 when the run did what the profile says, else 1.
tests/test_vm_hazard.py runs it on bookworm and trixie.
"""

from __future__ import annotations

import sys

from fixtures.selection import QUIRKS_DIR
from models.enums import Attr, QPState, QPType
from qpconform.adapters.pyverbs_device import open_device
from qpconform.engine.hazards import HazardAvoided
from qpconform.engine.lone import Checker
from qpconform.engine.quirks import Quirks
from qpconform.engine.records import DivergenceList

HAZARD = "rxe.rd_atomic_grow_corrupts_memory"


def main(name: str) -> int:
    device = open_device(name)
    try:
        identity = device.identity()
        profile = Quirks.load(QUIRKS_DIR / "rxe.toml").for_run(identity)
        applies = any(q.id == HAZARD for q in profile)
        print(f"kernel {identity.get('kernel')}: {HAZARD} "
              f"{'applies' if applies else 'does not apply'}")
        checker = Checker(device, quirks=profile, sink=DivergenceList())
        try:
            qp = checker.open_qp(QPType.RC)
            qp.bring_to(QPState.SQD)
            attrs, mask = qp.values.transition_attrs(QPState.SQD)
            attrs["max_dest_rd_atomic"] = 16
            try:
                res = qp.modify(attrs, mask | Attr.MAX_DEST_RD_ATOMIC)
                sent = f"sent: {'accepted' if res.accepted else 'refused'}"
            except HazardAvoided as exc:
                sent = f"avoided: {exc.quirk.id}"
            print(f"SQD->SQD max_dest_rd_atomic 1 -> 16: {sent}")
            other = checker.open_qp(QPType.RC)
            other.bring_to(QPState.RTS)
            print(f"a second QP reached {other.model.state.name}: the device works")
            checker.settle()
        finally:
            checker.close()
    finally:
        device.close()
    expected = f"avoided: {HAZARD}" if applies else "sent: accepted"
    print("PROBE OK" if sent == expected else f"PROBE FAILED: expected {expected}")
    return 0 if sent == expected else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "rxe0"))
