"""End to end: `rdma link del rxe0` in the middle of a run (slow; QPCONFORM_VM_TESTS=1).

The run must end within 60 s of the removal, fail (never pass or skip), say
which device was lost, and still write its partial report, marked incomplete. Unloading
the driver first is refused by the kernel while the run holds a context (rxe has no
disassociate_ucontext, so ib_uverbs_open() pins the module): the module stays, and the
device is then removed with `rdma link del`.
"""

from __future__ import annotations

import json
import re
import time

from tests.vm_helpers import VM_ONLY, out_dir, run_in_vm

pytestmark = VM_ONLY

# The removal comes ``delay`` seconds after the run opened its device context (its tests are
# running by then; under TCG the collection before it takes 20-40 s).
GUEST = """
( for i in $(seq 1 240); do rdma resource show ctx | grep -q python3 && break; sleep 0.5; done
  sleep {delay}; modprobe -r rdma_rxe 2>&1 | tail -n 1; echo "UNLOAD-RC $?";
  lsmod | grep -q '^rdma_rxe ' && echo "MODULE-STILL-LOADED";
  rdma link del rxe0; echo "REMOVED-AT $(date +%s)" ) &
python3 -m pytest {tests} --device rxe0 --hypothesis-profile ci -p no:cacheprovider -q -rs
echo "PYTEST-RC $? ENDED-AT $(date +%s)"
"""


def test_device_removed_mid_run_ends_it_quickly_with_a_clear_error():
    out = out_dir("selftest-device-lost")
    script = GUEST.format(delay=15, tests="suites/")  # the whole suite, as the issue ran it
    text = run_in_vm(out, script).stdout
    removed = re.search(r"REMOVED-AT (\d+)", text)
    ended = re.search(r"PYTEST-RC (\d+) ENDED-AT (\d+)", text)
    assert removed and ended, "the guest did not report both times"
    assert "MODULE-STILL-LOADED" in text, "rdma_rxe was unloaded under an open context"
    rc, end = int(ended.group(1)), int(ended.group(2))
    assert rc not in (0, 5), "a run that lost its device must fail"
    assert end - int(removed.group(1)) <= 60, "the run did not end within 60 s of the removal"
    assert "rxe0" in text and ("is gone" in text or "DeviceLost" in text)
    assert not re.search(r"SKIPPED.*unsupported by rxe0", text), "a lost device became a skip"
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"]["code"] in ("incomplete", "not-conformant")


def test_a_guest_kernel_crash_fails_the_run_at_once_and_names_it():
    # the device under test's kernel dies (here on purpose: sysrq's crash, a panic): the
    # run fails with the crash line within seconds, not at its timeout nor as a skip
    out = out_dir("selftest-kernel-crash")
    started = time.monotonic()
    result = run_in_vm(out, "echo c > /proc/sysrq-trigger; sleep 600", timeout=600)
    assert result.returncode == 1, "a guest kernel crash must fail the run (exit 1)"
    assert "the guest kernel crashed" in result.stderr
    assert "Kernel panic - not syncing: sysrq triggered crash" in result.stderr
    assert time.monotonic() - started < 300  # boot and crash, not the 600 s timeout
