"""Boot watchdog, accelerator fallback, live console and cleanup, with a fake QEMU.

The fake is a small Python script standing in for qemu-system-x86_64: it hangs
(or crashes) for the accelerators named in FAKE_QEMU_BAD, otherwise it acts like a
guest: noise, the boot marker, some output, the exit marker.
"""

import io
import os
import sys
import time

import pytest

from qpconform.vm import qemu, runner

FAKE = """\
import os, re, sys, time
argv = sys.argv[1:]
accel = argv[argv.index("-accel") + 1]
nonce = re.search(r"qpconform.nonce=(\\w+)", argv[argv.index("-append") + 1]).group(1)
with open(os.environ["FAKE_QEMU_PIDS"], "a") as f:
    f.write(f"{os.getpid()}\\n")
mode = os.environ.get("FAKE_QEMU_" + accel.upper(), "ok")
out = sys.stdout
out.write("SeaBIOS noise\\r\\n"); out.flush()
hung = os.environ["FAKE_QEMU_PIDS"] + ".hung"
if mode == "hang" or (mode == "hang-once" and not os.path.exists(hung)):
    open(hung, "w").close()
    time.sleep(600)
if mode == "crash":
    print("qemu: kvm assertion failed", flush=True)
    sys.exit(134)
mark = os.environ["FAKE_QEMU_PIDS"] + ".panicked"
if mode == "panic" or (mode == "panic-once" and not os.path.exists(mark)):
    open(mark, "w").close()
    print("[ 4.8] Kernel panic - not syncing: Fatal exception in interrupt", flush=True)
    sys.exit(0)
out.write(f"QPCONFORM-BOOTED {nonce}\\r\\n")
out.write("hello from the guest\\r\\nprogress...")
out.flush()
time.sleep(0.2)
out.write("done\\r\\n")
if mode == "hang-after-boot":
    out.flush()
    time.sleep(600)
if mode == "panic-after-boot":  # panic=-1 and -no-reboot: QEMU ends
    print("[ 50.2] Kernel panic - not syncing: sysrq triggered crash", flush=True)
    sys.exit(0)
if mode.startswith("oops"):  # an oops, then a flood (seen: rxe on 6.1 corrupting a slab)
    out.write("[   94.509645] BUG: unable to handle page fault for address: ffff8a8f103d73a1\\r\\n")
    out.write("[   94.510149] Oops: 0000 [#1] PREEMPT SMP NOPTI\\r\\n")
    for n in range(5000 if mode == "oops-then-exit" else 10**9):
        out.write(f"[  247.7{n:05d}] get_swap_device: Bad swap file entry 4003ffffffffffff\\r\\n")
        if n % 1000 == 0:
            out.flush()
            time.sleep(0.01)
out.write(f"QPCONFORM-EXIT {nonce} 7\\r\\n")
out.write("[ 9.1] reboot: Power down\\r\\n")
"""


@pytest.fixture
def fake_qemu(tmp_path, monkeypatch):
    path = tmp_path / "fake-qemu"
    path.write_text(f"#!{sys.executable}\n{FAKE}")
    path.chmod(0o755)
    monkeypatch.setenv("FAKE_QEMU_PIDS", str(tmp_path / "pids"))
    return path


def spec_factory(fake, tmp_path):
    def spec_for(accel):
        return qemu.GuestSpec(
            kernel=tmp_path / "vmlinuz",
            initrd=None,
            disk=tmp_path / "o.qcow2",
            append="console=ttyS0 qpconform.nonce=abc123",
            qemu=str(fake),
        )

    return spec_for


def boot_tcg(fake, tmp_path, boot_timeout, seconds_left=60.0):
    """qemu.boot of the fake with TCG only; returns (accel, outcome, the notes it made)."""
    notes = []
    accel, outcome = qemu.boot(
        spec_factory(fake, tmp_path), ["tcg"], "abc123", {"tcg": boot_timeout},
        time.monotonic() + seconds_left, io.BytesIO(), note=notes.append,
    )
    return accel, outcome, notes


def assert_all_dead(tmp_path):
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    return pids


def test_kvm_hang_falls_back_to_tcg(fake_qemu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_QEMU_KVM", "hang")
    out, notes = io.BytesIO(), []
    started = time.monotonic()
    accel, outcome = qemu.boot(
        spec_factory(fake_qemu, tmp_path),
        ["kvm", "tcg"],
        "abc123",
        {"kvm": 1.5, "tcg": 30},
        time.monotonic() + 60,
        out,
        note=notes.append,
    )
    assert time.monotonic() - started < 20
    assert accel == "tcg"
    assert outcome.kind == "exited" and outcome.status == 7
    assert "falling back to TCG" in notes[0] and "no sign of life" in notes[0]
    assert out.getvalue() == b"hello from the guest\nprogress...done\n"
    assert len(assert_all_dead(tmp_path)) == 2


def test_kvm_crash_falls_back_to_tcg(fake_qemu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_QEMU_KVM", "crash")
    notes = []
    accel, outcome = qemu.boot(
        spec_factory(fake_qemu, tmp_path),
        ["kvm", "tcg"],
        "abc123",
        {"kvm": 30, "tcg": 30},
        time.monotonic() + 60,
        io.BytesIO(),
        note=notes.append,
    )
    assert accel == "tcg" and outcome.status == 7
    assert "kvm assertion failed" in notes[0]


def test_a_tcg_guest_that_hangs_twice_is_reported_after_one_more_boot(
    fake_qemu, tmp_path, monkeypatch
):
    monkeypatch.setenv("FAKE_QEMU_TCG", "hang")
    accel, outcome, notes = boot_tcg(fake_qemu, tmp_path, 1.0)
    assert accel == "tcg" and outcome.kind == "boot-timeout"
    assert b"SeaBIOS noise" in outcome.boot_output
    assert len(notes) == 1 and "no sign of life within 1 s" in notes[0]
    assert "SeaBIOS noise" in notes[0] and "once more" in notes[0]
    assert len(assert_all_dead(tmp_path)) == 2


def test_a_tcg_guest_that_hangs_once_is_booted_once_more(fake_qemu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_QEMU_TCG", "hang-once")
    accel, outcome, notes = boot_tcg(fake_qemu, tmp_path, 1.0)
    assert accel == "tcg" and outcome.kind == "exited" and outcome.status == 7
    assert len(notes) == 1 and "once more" in notes[0]


def test_no_second_boot_when_the_deadline_leaves_no_room(fake_qemu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_QEMU_TCG", "hang")
    _, outcome, notes = boot_tcg(fake_qemu, tmp_path, 1.0, seconds_left=1.5)
    assert outcome.kind == "boot-timeout" and notes == []
    assert len(assert_all_dead(tmp_path)) == 1


def test_hung_guest_is_killed_at_the_deadline(fake_qemu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_QEMU_TCG", "hang-after-boot")
    started = time.monotonic()
    _, outcome = qemu.boot(
        spec_factory(fake_qemu, tmp_path),
        ["tcg"],
        "abc123",
        {"tcg": 30},
        started + 2.0,
        io.BytesIO(),
    )
    assert outcome.kind == "timeout"
    assert outcome.boot_seconds is not None
    assert time.monotonic() - started < 10
    assert_all_dead(tmp_path)


def test_console_filter_hides_markers_and_keeps_log():
    out, log = io.BytesIO(), io.BytesIO()
    console = qemu.ConsoleFilter("n1", out, log)
    for chunk in [
        b"bios\r\n",
        b"QPCONFORM-BOO",
        b"TED n1\r\nline one\r",
        b"\npartial",
        b" rest\r\nQPCONFORM-EXIT n1 3\r\n",
        b"power down\r\n",
    ]:
        console.feed(chunk)
    assert console.booted and console.status == 3
    assert out.getvalue() == b"line one\npartial rest\n"
    assert log.getvalue().startswith(b"bios\r\nQPCONFORM-BOOTED n1")
    assert bytes(console.preboot) == b"bios\n"


def test_console_filter_ignores_markers_with_another_nonce():
    out = io.BytesIO()
    console = qemu.ConsoleFilter("n1", out)
    console.feed(b"QPCONFORM-BOOTED n1\nQPCONFORM-EXIT other 0\n")
    assert console.status is None
    assert out.getvalue() == b"QPCONFORM-EXIT other 0\n"


def test_build_argv_has_no_network_and_readonly_shares(tmp_path):
    spec = qemu.GuestSpec(
        kernel=tmp_path / "k",
        initrd=tmp_path / "i",
        disk=tmp_path / "d",
        append="x",
        shares=[qemu.Share(tmp_path, "t", readonly=True)],
    )
    argv = qemu.build_argv(spec, "tcg")
    assert argv[argv.index("-nic") + 1] == "none"
    assert "-no-reboot" in argv
    assert any(a.endswith("mount_tag=t,security_model=none,readonly=on") for a in argv)
    assert "-cpu" not in argv
    assert qemu.build_argv(spec, "kvm")[3:5] == ["-cpu", "host"]


def test_choose_accels(tmp_path):
    memo = tmp_path / "accel.json"
    kernel = tmp_path / "vmlinuz"
    assert runner.choose_accels("tcg", kernel, memo, kvm_ok=True) == ["tcg"]
    assert runner.choose_accels("kvm", kernel, memo, kvm_ok=False) == ["kvm"]
    assert runner.choose_accels("auto", kernel, memo, kvm_ok=False) == ["tcg"]
    assert runner.choose_accels("auto", kernel, memo, kvm_ok=True) == ["kvm", "tcg"]
    runner.remember_kvm_failure(kernel, memo)
    assert runner.choose_accels("auto", kernel, memo, kvm_ok=True) == ["tcg"]
    assert runner.choose_accels("auto", tmp_path / "other", memo, kvm_ok=True) == ["kvm", "tcg"]


def test_a_kernel_panic_at_boot_is_booted_once_more(fake_qemu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_QEMU_TCG", "panic-once")
    accel, outcome, notes = boot_tcg(fake_qemu, tmp_path, 30)
    assert accel == "tcg" and outcome.kind == "exited" and outcome.status == 7
    assert len(notes) == 1 and "kernel panicked while booting" in notes[0]
    assert "Fatal exception" in notes[0] and "once more" in notes[0]
    assert len(assert_all_dead(tmp_path)) == 2


def test_a_kernel_that_panics_again_is_reported_not_retried_forever(
    fake_qemu, tmp_path, monkeypatch
):
    monkeypatch.setenv("FAKE_QEMU_TCG", "panic")
    _, outcome, notes = boot_tcg(fake_qemu, tmp_path, 30)
    assert outcome.kind == "died" and b"Kernel panic" in outcome.boot_output
    assert len(notes) == 1  # one more boot, then the failure is reported
    assert len(assert_all_dead(tmp_path)) == 2


def test_a_guest_whose_kernel_crashed_is_stopped_and_its_flood_cut(
    fake_qemu, tmp_path, monkeypatch
):
    monkeypatch.setenv("FAKE_QEMU_TCG", "oops")
    monkeypatch.setattr(qemu, "CRASH_GRACE", 1.0)
    out, log = io.BytesIO(), io.BytesIO()
    started = time.monotonic()
    _, outcome = qemu.boot(spec_factory(fake_qemu, tmp_path), ["tcg"], "abc123", {"tcg": 30},
                           started + 60, out, log)
    assert outcome.kind == "crashed" and time.monotonic() - started < 15
    assert "the guest kernel crashed ([   94.510149] Oops: 0000 [#1]" in outcome.message
    echoed = out.getvalue().decode().splitlines()
    assert len(echoed) <= qemu.CRASH_ECHO + 5, len(echoed)  # the boot's lines, the oops, 200
    assert "console echo cut after the kernel crash report" in echoed[-1]
    assert log.getvalue().count(b"Bad swap file entry") > qemu.CRASH_ECHO  # the log keeps all
    assert_all_dead(tmp_path)


def test_a_guest_that_reports_its_status_after_a_crash_is_not_cut_short(
    fake_qemu, tmp_path, monkeypatch
):
    monkeypatch.setenv("FAKE_QEMU_TCG", "oops-then-exit")
    _, outcome = qemu.boot(spec_factory(fake_qemu, tmp_path), ["tcg"], "abc123", {"tcg": 30},
                           time.monotonic() + 60, io.BytesIO())
    assert outcome.kind == "exited" and outcome.status == 7  # its own failure, reported
    assert_all_dead(tmp_path)


def test_only_a_crash_after_the_boot_counts():
    console = qemu.ConsoleFilter("n1", io.BytesIO())
    console.feed(b"[ 0.1] Oops: early noise\r\n")  # a panic at boot is boot()'s business
    assert console.crashed_at is None
    console.feed(b"QPCONFORM-BOOTED n1\r\n[ 5.0] rxe: mentions Oops in passing\r\n")
    assert console.crashed_at is None
    console.feed(b"[ 9.0] general prot")  # a serial console delivers lines in pieces
    console.feed(b"ection fault, probably for non-canonical address\r\n")
    assert console.crashed_at is not None and console.crash_line.startswith("[ 9.0] general")


def test_a_guest_kernel_panic_after_the_boot_is_a_crash_not_a_runner_failure(
    fake_qemu, tmp_path, monkeypatch
):
    monkeypatch.setenv("FAKE_QEMU_TCG", "panic-after-boot")
    _, outcome, notes = boot_tcg(fake_qemu, tmp_path, 30)
    assert outcome.kind == "crashed" and notes == []  # not booted once more
    assert "Kernel panic - not syncing: sysrq triggered crash" in outcome.message
    assert len(assert_all_dead(tmp_path)) == 1
