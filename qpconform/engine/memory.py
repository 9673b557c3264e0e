"""Guard bands: the bytes of every target MR of a pair, compared after every step.

`MemoryGuards` is a part of `PairHarness` (qpconform/engine/pair.py). An end that
has target MRs (models/access.py: the pair adapters register them on first use and
report their bytes through `targets()`) is read after each settle and each quiet
window; `PairModel.memory` says what each must hold. A byte changed outside a window
a granted RDMA WRITE named, or inside one the responder refused, breaks
`pair.access.guard`; a granted WRITE's bytes missing once the pair is quiet break
`pair.access.write_placed`. A known divergence (a quirk) makes the model take the
bytes the device holds, so one stray write is reported once.

An end without `targets()` (a device that registers none) has nothing to guard.
"""

from __future__ import annotations

from typing import Any

from models.access import GUARD, WRITE_PLACED, Memory
from models.wire import SIDES

#: How many differing offsets a record names (the rest are counted).
SHOWN = 8


class MemoryGuards:
    """The guard-band check of a pair harness: it reads the harness's device and model
    (both replaced as the pair goes) and judges through its engine."""

    def __init__(self, harness: Any) -> None:
        self.h = harness

    def check(self, commit: bool = False) -> None:
        """Compare every target MR with the model (`commit`: the pair is quiet, so every
        granted WRITE must have landed)."""
        model = self.h.model
        if not model.memory.used:  # no WR named a target: none was registered
            return
        if commit:
            model.memory.commit()
        for side in SIDES:
            if side in model.gone:
                continue
            read = getattr(self.h.dev.end(side), "targets", None)
            if read is None:
                continue
            for target, got in sorted(dict(read()).items()):
                self._compare(side, target, bytes(got))

    def _compare(self, side: str, target: str, got: bytes) -> None:
        memory: Memory = self.h.model.memory
        stray, unplaced = memory.diff(side, target, got)
        if not stray and not unplaced:
            return
        rule, offsets = (GUARD, stray) if stray else (WRITE_PLACED, unplaced)
        want = memory.expected(side, target)
        shown = ", ".join(f"{i}: {want[i]:#04x}->{got[i]:#04x}" for i in offsets[:SHOWN])
        more = f" (+{len(offsets) - SHOWN} more)" if len(offsets) > SHOWN else ""
        track = self.h.ends[side]
        d = self.h.divergence(
            track, "memory", rule, track.last(),
            f"target MR {target!r} unchanged but for the granted WRITEs",
            f"target MR {target!r} bytes changed at offset {shown}{more}",
            [f"target={target}", f"first_offset={offsets[0]}", f"bytes={len(offsets)}"],
        )
        if self.h.diverge(track, d) is not None:
            follow(memory, side, target, got)


def follow(memory: Memory, side: str, target: str, got: bytes) -> None:
    """A known divergence: the model takes the bytes the device holds."""
    memory.held[(side, target)] = bytearray(got)
    memory.pending = {k: v for k, v in memory.pending.items()
                      if k[0] != side or k[1].target != target}
