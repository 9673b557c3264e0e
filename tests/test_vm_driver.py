"""Driver under test (no VM): options, module checks, the guest device setup, identity."""

from __future__ import annotations

import json
import os
import stat
import struct
import subprocess
from pathlib import Path

import pytest

from qpconform import cli
from qpconform.adapters import identity
from qpconform.vm import buildenv, driver_setup, drivers, runner

DEVICES_SH = Path(driver_setup.__file__).with_name("guest_devices.sh")


def fake_module(tmp_path: Path, vermagic: str, build_id: bytes = b"\x12" * 20) -> Path:
    """A minimal ELF64 file with a .modinfo-like string and a .note.gnu.build-id section."""
    note = struct.pack("<III", 4, len(build_id), 3) + b"GNU\0" + build_id
    names = b"\0.shstrtab\0.note.gnu.build-id\0"
    body = b"\0vermagic=" + vermagic.encode() + b"\0depends=ib_core\0"
    header_size = 64
    note_off = header_size + len(body)
    names_off = note_off + len(note)
    shoff = names_off + len(names)
    sections = [
        struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        struct.pack("<IIQQQQIIQQ", 11, 7, 0, 0, note_off, len(note), 0, 0, 4, 0),
        struct.pack("<IIQQQQIIQQ", 1, 3, 0, 0, names_off, len(names), 0, 0, 1, 0),
    ]
    ehdr = bytearray(64)
    ehdr[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", ehdr, 0x28, shoff)
    struct.pack_into("<HHH", ehdr, 0x3A, 64, len(sections), 2)
    path = tmp_path / "rdma_rxe.ko"
    path.write_bytes(bytes(ehdr) + body + note + names + b"".join(sections))
    return path


def test_build_id_and_vermagic_are_read_from_the_module(tmp_path):
    ko = fake_module(tmp_path, "6.1.0-50-amd64 SMP preempt mod_unload modversions ")
    assert drivers.elf_build_id(ko) == "12" * 20
    assert buildenv.modinfo_field(ko, "depends") == "ib_core"
    assert buildenv.check_vermagic(ko, "6.1.0-50-amd64").startswith("6.1.0-50-amd64 SMP")


def test_vermagic_mismatch_names_both_kernels_and_the_fix(tmp_path):
    ko = fake_module(tmp_path, "6.12.117+deb13-amd64 SMP preempt")
    with pytest.raises(drivers.DriverError) as exc:
        buildenv.check_vermagic(ko, "6.1.0-50-amd64")
    text = str(exc.value)
    assert "6.12.117+deb13-amd64" in text and "6.1.0-50-amd64" in text and "--driver-src" in text


def test_a_file_that_is_no_module_is_refused(tmp_path):
    path = tmp_path / "x.ko"
    path.write_bytes(b"not an elf")
    with pytest.raises(drivers.DriverError, match="not a kernel module"):
        buildenv.check_vermagic(path, "6.1.0-50-amd64")


def test_tree_hash_ignores_build_products(tmp_path):
    (tmp_path / "Makefile").write_text("obj-m += x.o\n")
    (tmp_path / "x.c").write_text("int x;\n")
    before = drivers.tree_hash(tmp_path)
    (tmp_path / "x.o").write_bytes(b"obj")
    (tmp_path / "x.ko").write_bytes(b"ko")
    assert drivers.tree_hash(tmp_path) == before
    (tmp_path / "x.c").write_text("int y;\n")
    assert drivers.tree_hash(tmp_path) != before


def test_source_folder_is_found_in_a_kernel_tree(tmp_path):
    rxe = tmp_path / "drivers/infiniband/sw/rxe"
    rxe.mkdir(parents=True)
    (rxe / "Makefile").write_text("")
    (rxe / "rxe.c").write_text("")
    spec = drivers.spec("rxe")
    assert drivers.find_source_folder(tmp_path, spec) == rxe
    assert drivers.find_source_folder(rxe, spec) == rxe
    with pytest.raises(drivers.DriverError, match="qpconform driver-source"):
        drivers.find_source_folder(tmp_path / "drivers", spec)


def test_unknown_driver_lists_the_known_ones():
    with pytest.raises(drivers.DriverError, match="choose from rxe, siw"):
        drivers.spec("mlx5")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["vm", "--driver-src", "/nonexistent", "--", "true"], "no such directory"),
        (["vm", "--module", "/nonexistent.ko", "--", "true"], "no such file"),
        (["vm", "--driver-src", "/", "--module", "/", "--", "true"], "not both"),
    ],
)
def test_driver_option_errors(capsys, argv, message):
    assert cli.main(argv) == runner.EXIT_INFRA
    assert message in capsys.readouterr().err


def test_driver_src_does_not_go_with_a_custom_kernel(tmp_path):
    kernel = tmp_path / "bzImage"
    kernel.write_bytes(b"")
    with pytest.raises(drivers.DriverError, match="--kernel"):
        driver_setup.validate("rxe", tmp_path, None, kernel)


def test_control_files_carry_the_driver(tmp_path):
    opts = runner.VmOptions(command=["true"])
    dut = drivers.DriverUnderTest(drivers.spec("siw"), module_file=Path("/run/x/siw.ko"))
    runner.write_control(tmp_path, opts, Path("/p"), Path("/p"), True, driver_setup.config(dut))
    config = (tmp_path / "config.sh").read_text()
    assert "DRIVER=siw" in config and "DRIVER_MODULE=siw" in config
    assert "DRIVER_KO=/run/x/siw.ko" in config
    assert f"export {driver_setup.ENV_NAME}=" in (tmp_path / "command.sh").read_text()


# --- the guest device setup, run with stub commands ---------------------------------


def run_devices_sh(tmp_path: Path, driver: str, module: str, ko: str, insmod_ok: bool = True):
    """Run guest_devices.sh with stub ip/modprobe/insmod/rdma/modinfo/dmesg; returns
    (status, output, log of the commands it ran)."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    log = tmp_path / "calls.log"
    for name in ("ip", "modprobe", "rdma", "modinfo", "dmesg", "insmod"):
        body = f'echo "{name} $*" >> {log}\n'
        if name == "modinfo":
            body += 'echo "ib_uverbs,ib_core"\n'
        if name == "dmesg":
            body += 'echo "rdma_rxe: disagrees about version of symbol ib_register_device"\n'
        if name == "insmod" and not insmod_ok:
            body += 'echo "insmod: ERROR: could not insert: Invalid parameters" >&2\nexit 1\n'
        script = stubs / name
        script.write_text("#!/bin/sh\n" + body)
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    if ko:
        Path(ko).write_bytes(b"module")
    wrapper = (
        'fail() { echo "FAIL: $*"; exit 125; }\n'
        f"CTL={ctl} DRIVER={driver} DRIVER_MODULE={module} DRIVER_KO={ko}\n"
        f". {DEVICES_SH}\n"
    )
    env = dict(os.environ, PATH=f"{stubs}:{os.environ['PATH']}")
    result = subprocess.run(["sh", "-c", wrapper], capture_output=True, text=True, env=env)
    calls = log.read_text() if log.exists() else ""
    return result.returncode, result.stdout + result.stderr, calls


def test_stock_driver_is_modprobed_and_devices_created(tmp_path):
    status, out, calls = run_devices_sh(tmp_path, "rxe", "rdma_rxe", "")
    assert status == 0, out
    assert "modprobe rdma_rxe" in calls and "insmod" not in calls
    assert "rdma link add rxe0 type rxe netdev veth0" in calls
    assert "rdma link add rxe1 type rxe netdev veth1" in calls
    assert "neigh" not in calls  # the rxe setup is unchanged: no rdma_cm there


def test_module_under_test_is_loaded_after_its_dependencies(tmp_path):
    ko = str(tmp_path / "siw.ko")
    status, out, calls = run_devices_sh(tmp_path, "siw", "siw", ko)
    assert status == 0, out
    lines = calls.splitlines()
    assert lines.index("modprobe ib_core") < lines.index(f"insmod {ko}")
    assert "modprobe siw" not in calls
    assert "rdma link add siw0 type siw netdev veth0" in calls
    # rdma_cm's address resolution between the two local ends needs the neighbours
    assert "neigh replace 192.0.2.2" in calls and "dev veth0 nud permanent" in calls
    assert "neigh replace 192.0.2.1" in calls and "dev veth1 nud permanent" in calls


def test_refused_insmod_is_a_setup_failure_with_the_kernels_words(tmp_path):
    ko = str(tmp_path / "rdma_rxe.ko")
    status, out, calls = run_devices_sh(tmp_path, "rxe", "rdma_rxe", ko, insmod_ok=False)
    assert status == 125
    assert "insmod rdma_rxe.ko refused" in out
    assert "Invalid parameters" in out and "disagrees about version" in out
    assert "rdma link add" not in calls


# --- identity: which module the kernel runs ------------------------------------------


def sys_module(tmp_path: Path, taint: str, build_id: bytes) -> Path:
    base = tmp_path / "sys" / "rdma_rxe"
    (base / "notes").mkdir(parents=True)
    (base / "taint").write_text(taint + "\n")
    note = struct.pack("<III", 4, len(build_id), 3) + b"GNU\0" + build_id
    (base / "notes" / ".note.gnu.build-id").write_bytes(note)
    return tmp_path / "sys"


def test_stock_module_identity(tmp_path, monkeypatch):
    monkeypatch.delenv(identity.DRIVER_UNDER_TEST_ENV, raising=False)
    found = identity.driver_under_test("rdma_rxe", sys_module(tmp_path, "", b"\xab" * 20))
    assert found["driver_origin"] == "stock"
    assert found["driver_loaded_build_id"] == "ab" * 20


def test_out_of_tree_module_is_shown_even_when_loaded_by_hand(tmp_path, monkeypatch):
    monkeypatch.delenv(identity.DRIVER_UNDER_TEST_ENV, raising=False)
    found = identity.driver_under_test("rdma_rxe", sys_module(tmp_path, "OE", b"\xab" * 20))
    assert found["driver_origin"] == "out-of-tree" and found["driver_taint"] == "OE"


def test_the_module_the_run_was_given_must_be_the_one_loaded(tmp_path, monkeypatch):
    given = tmp_path / "driver.json"
    monkeypatch.setenv(identity.DRIVER_UNDER_TEST_ENV, str(given))
    sysfs = sys_module(tmp_path, "OE", b"\xab" * 20)
    record = {
        "driver_under_test": "rdma_rxe",
        "driver_origin": "out-of-tree",
        "driver_source": "/src/rxe",
        "driver_build_id": "ab" * 20,
    }
    given.write_text(json.dumps(record))
    assert identity.driver_under_test("rdma_rxe", sysfs)["driver_source"] == "/src/rxe"
    given.write_text(json.dumps({**record, "driver_build_id": "cd" * 20}))
    with pytest.raises(identity.DriverMismatch, match="/src/rxe"):
        identity.driver_under_test("rdma_rxe", sysfs)


def test_no_module_in_sysfs_adds_nothing(tmp_path):
    assert identity.driver_under_test("mlx5_ib", tmp_path) == {}


def test_build_tree_is_synced_by_content_so_only_changed_files_recompile(tmp_path):
    source, tree = tmp_path / "src", tmp_path / "tree"
    source.mkdir()
    (source / "Makefile").write_text("obj-m += a.o b.o\n")
    (source / "a.c").write_text("int a;\n")
    (source / "b.c").write_text("int b;\n")
    assert buildenv.sync_sources(source, tree) == 3
    (tree / "a.o").write_bytes(b"object")  # what make left
    assert buildenv.sync_sources(source, tree) == 0
    (source / "b.c").write_text("int b = 1;\n")
    assert buildenv.sync_sources(source, tree) == 1
    assert (tree / "a.o").is_file()
    (source / "c.c").write_text("int c;\n")  # another file set: start afresh
    assert buildenv.sync_sources(source, tree) == 4
    assert not (tree / "a.o").exists()


def test_driver_source_and_mutants_refuse_an_unknown_driver(capsys):
    for argv in (["driver-source", "--driver", "mlx5", "/tmp/x"], ["mutants", "--driver", "efa"]):
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        assert exc.value.code == 2
        assert "invalid choice" in capsys.readouterr().err


def test_build_layer_commands_run_with_their_own_proc(tmp_path):
    """Each command in the build layer gets /proc (objtool of 7.x kernels reads
    /proc/self/maps) in a private mount namespace, so nothing stays mounted in the cache;
    cwd and arguments (spaces too) reach the command unchanged. Fake mount and chroot."""
    root = tmp_path / "layer"
    (root / "proc").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mount").write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/mounted\n')
    (bin_dir / "chroot").write_text('#!/bin/sh\nshift\nexec "$@"\n')  # drop ROOT, run the rest
    for tool in ("mount", "chroot"):
        (bin_dir / tool).chmod(0o755)
    command = ["sh", "-c", 'pwd; printf "%s|" "$@"', "x", "a b", "c"]
    argv = buildenv.chroot_command(root, command, str(tmp_path))  # the fake chroot: a host path
    assert argv[:4] == ["unshare", "--mount", "--propagation", "private"]
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    out = subprocess.run(argv[4:], capture_output=True, text=True, env=env, check=True)
    assert out.stdout == f"{tmp_path}\na b|c|"
    assert (tmp_path / "mounted").read_text().split() == ["-t", "proc", "proc", f"{root}/proc"]
