"""`qpconform bench --vm` end to end (boots the VM; set QPCONFORM_VM_TESTS=1): the host's
engines reach the guest's executor over virtio-serial, one session per port, each port
served by its own process in the guest, and the guest's leak check passes.

The only self-test that crosses the real transport: the others serve the executor over a
socketpair (tests/remote_fake.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.vm_helpers import REPO, VM_ONLY, out_dir

pytestmark = VM_ONLY


def test_host_engines_side_by_side_each_with_its_executor_session() -> None:
    out = out_dir("vm-bench")
    result = subprocess.run(
        [sys.executable, "-m", "qpconform", "bench", "--vm", "bookworm", "--seconds", "5",
         "--output", str(out / "bench.json")],  # the default: 3 sessions
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )
    print(result.stdout[-3000:])
    print(result.stderr[-3000:], file=sys.stderr)
    assert result.returncode == 0, result.stderr[-2000:]
    bench = json.loads((out / "bench.json").read_text())
    assert bench["vm_status"] == 0
    assert bench["machine_host_engine"]["steps"] > 0
    together = bench["machine_side_by_side"]
    assert together["sessions"] == 3
    assert all(session["steps"] > 0 for session in together["per_session"]), together
    assert 0 < together["window_steps"] <= together["steps"], together  # all ran at once
    assert all(session["cpu_ms_per_step"] > 0 for session in together["per_session"])
    assert bench["machine_in_guest"]["steps"] > 0
    # the guest's output reaches the host on the VM's console (stdout)
    assert "qpconform executor: leak check: nothing leaked" in result.stdout + result.stderr
    assert "3 host engines side by side" in result.stdout
