"""The guest kernel log scanner: catches real problem reports, ignores benign lines."""

from qpconform.vm import kernel_log

BENIGN = """\
[    0.000000] Linux version 6.1.0-50-amd64 (debian-kernel@lists.debian.org)
[    0.830071] PCI: Using host bridge windows from ACPI; if necessary, use "pci=nocrs" and\
 report a bug
[    1.410881] AMD-Vi: AMD IOMMUv2 functionality not available on this system - This is not a bug.
[    2.000000] ACPI Warning: SystemIO range conflicts with OpRegion
[    3.100000] rdma_rxe: loaded
[    3.200000] infiniband rxe0: set active
[    3.300000] warning: process `foo' used the deprecated sysctl system call
[    4.000000] EXT4-fs (vda): mounted filesystem with ordered data mode.
"""

SAMPLES = {
    "warning": "[   12.345678] WARNING: CPU: 1 PID: 345 at drivers/infiniband/sw/rxe/rxe_qp.c:123 "
    "rxe_qp_do_cleanup+0x1/0x2 [rdma_rxe]",
    "bug": "[   20.000001] BUG: kernel NULL pointer dereference, address: 0000000000000008",
    "kasan": "[    9.1] BUG: KASAN: slab-use-after-free in rxe_comp_queue_pkt+0x12/0x80 [rdma_rxe]",
    "lockdep": "[    7.7] WARNING: possible circular locking dependency detected",
    "lockdep_info": "[    7.8] INFO: possible recursive locking detected",
    "oops": "[   30.0] Oops: 0002 [#1] PREEMPT SMP NOPTI",
    "bug_on": "[   31.0] kernel BUG at drivers/infiniband/core/verbs.c:2000!",
    "ubsan": "[   32.0] UBSAN: array-index-out-of-bounds in "
    "drivers/infiniband/sw/rxe/rxe_resp.c:10:5",
    "hung": "[  240.0] INFO: task kworker/0:1:42 blocked for more than 120 seconds.",
    "caller_id": "[   12.0] [  T345] WARNING: CPU: 0 PID: 345 at kernel/foo.c:1 bar+0x1/0x2",
    "planted": "[    8.330569] WARNING: CPU: 0 PID: 1 at planted",
}


def test_benign_boot_log_is_clean():
    assert kernel_log.scan(BENIGN) == []


def test_each_sample_is_caught():
    for name, line in SAMPLES.items():
        findings = kernel_log.scan(BENIGN + line + "\n")
        assert len(findings) == 1, name
        assert findings[0].line == line
        assert findings[0].line_number == BENIGN.count("\n") + 1


def test_kinds():
    assert kernel_log.scan(SAMPLES["kasan"])[0].kind == "bug"
    assert kernel_log.scan(SAMPLES["lockdep"])[0].kind == "warning"
    assert kernel_log.scan(SAMPLES["oops"])[0].kind == "oops"
    assert kernel_log.scan(SAMPLES["ubsan"])[0].kind == "ubsan"


def test_mention_in_the_middle_of_a_message_is_not_a_report():
    assert kernel_log.scan("[    1.0] mydrv: got WARNING: from firmware\n") == []
    assert kernel_log.scan("[    1.0] foo: BUG: not really\n") == []


def test_plain_dmesg_without_timestamps():
    assert kernel_log.scan("WARNING: CPU: 0 PID: 1 at x\n")[0].kind == "warning"


def test_ignore_patterns():
    text = SAMPLES["planted"] + "\n" + SAMPLES["bug"] + "\n"
    findings = kernel_log.scan(text, ignore=[r"at planted$"])
    assert [f.kind for f in findings] == ["bug"]


def test_summary_is_bounded():
    text = "\n".join([SAMPLES["warning"]] * 15)
    summary = kernel_log.summary(kernel_log.scan(text), limit=3)
    assert summary.count("\n") == 3
    assert "and 12 more" in summary


def test_crash_is_the_reports_after_which_the_guest_is_stopped():
    assert kernel_log.crash("[   94.510149] Oops: 0000 [#1] PREEMPT SMP NOPTI")
    assert kernel_log.crash("[ 9.0] Kernel panic - not syncing: Fatal exception")
    assert kernel_log.crash("[ 9.0] general protection fault, probably for non-canonical")
    # reported (they fail the run) but the kernel goes on: no reason to stop it early
    assert not kernel_log.crash("[ 8.3] WARNING: CPU: 0 PID: 1 at planted")
    assert not kernel_log.crash("[ 8.3] BUG: KASAN: slab-use-after-free in rxe_qp_do_cleanup")
    assert not kernel_log.crash("[ 8.3] rdma_rxe: mentions Oops in passing")
