"""On the real rxe0: rxe 6.1's memory-corrupting modify is kept unsent, and 6.12's is sent.

Boots the SoftRoCE VM once per release (set QPCONFORM_VM_TESTS=1) and runs
scripts/hazard_probe.py there: on bookworm (6.1) the engine must not send a modify that
grows max_dest_rd_atomic (the guest would oops: scripts/repro_rxe_rd_atomic_grow.py) and
must record it as the known hazard; on trixie (6.12, outside the entry's range) the same
modify is sent and accepted. Either way the device still works afterwards.
"""

from __future__ import annotations

import pytest

from tests.vm_helpers import VM_ONLY, out_dir, run_in_vm

pytestmark = VM_ONLY


@pytest.mark.parametrize(
    ("release", "sent"),
    [("bookworm", "avoided: rxe.rd_atomic_grow_corrupts_memory"), ("trixie", "sent: accepted")],
)
def test_the_hazard_is_kept_unsent_on_6_1_only(release: str, sent: str) -> None:
    out = out_dir(f"vm-hazard-{release}")
    result = run_in_vm(out, "python3 -m scripts.hazard_probe rxe0", "--release", release,
                       timeout=300)
    assert f"SQD->SQD max_dest_rd_atomic 1 -> 16: {sent}" in result.stdout
    assert "a second QP reached RTS: the device works" in result.stdout
    assert "PROBE OK" in result.stdout
    assert result.returncode == 0
