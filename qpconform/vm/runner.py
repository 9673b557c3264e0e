"""Orchestrate one ``qpconform vm`` run: image, Python deps, boot, status, kernel log.

Exit status: COMMAND's own status; 1 if COMMAND succeeded but the guest
kernel log shows a problem (qpconform/vm/kernel_log.py); 124 if --timeout expired;
125 if the runner itself failed (setup, boot); 130 on Ctrl-C/SIGTERM.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from qpconform.vm import driver_setup, image, kernel_log, prereqs, pydeps, qemu
from qpconform.vm.buildenv import BuildError
from qpconform.vm.drivers import DriverError
from qpconform.vm.mirror import MirrorError, host_mirror
from reports.atomic import ReportWriteError, check_writable

EXIT_KERNEL_LOG = 1
EXIT_TIMEOUT = 124
EXIT_INFRA = 125
EXIT_INTERRUPTED = 130

DEFAULT_KVM_BOOT_TIMEOUT = 20.0
DEFAULT_TCG_BOOT_TIMEOUT = 180.0


class UserError(Exception):
    """A problem the user can fix; printed without a traceback."""


@dataclass
class VmOptions:
    """Parsed ``qpconform vm`` options (see qpconform/vm/cli_args.py for their meaning)."""

    command: list[str] = field(default_factory=list)
    release: str = image.DEFAULT_RELEASE
    mirror: str | None = None
    rebuild: bool = False
    build_only: bool = False
    accel: str = "auto"
    memory_mb: int = 2048
    cpus: int = 2
    timeout: float = 3600.0
    kvm_boot_timeout: float = DEFAULT_KVM_BOOT_TIMEOUT
    tcg_boot_timeout: float = DEFAULT_TCG_BOOT_TIMEOUT
    kernel: Path | None = None
    initrd: Path | None = None
    modules: Path | None = None
    log_dir: Path = Path("reports/out")
    env: list[str] = field(default_factory=list)
    pip_packages: list[str] = field(default_factory=lambda: list(pydeps.DEFAULT_PACKAGES))
    project: Path | None = None
    ignore_kernel: list[str] = field(default_factory=list)
    show_boot: bool = False
    driver: str = "rxe"
    driver_src: Path | None = None
    module: Path | None = None
    #: virtio-serial ports to the guest, name -> host unix socket (qpconform/adapters/executor.py)
    ports: dict[str, Path] = field(default_factory=dict)


def _note(msg: str) -> None:
    print(f"qpconform vm: {msg}", file=sys.stderr, flush=True)


def find_project(start: Path) -> Path:
    """The nearest directory at or above ``start`` with pyproject.toml or .git."""
    for candidate in (start, *start.parents):
        if (candidate / "pyproject.toml").is_file() or (candidate / ".git").exists():
            return candidate
    return start


def validate(opts: VmOptions) -> None:
    """Option checks that need no host tools."""
    if not opts.command and not opts.build_only:
        raise UserError("no COMMAND given: qpconform vm [options] -- COMMAND [ARGS...]")
    if opts.release not in image.RELEASES:
        raise UserError(
            f"unknown --release {opts.release!r}; choose from " + ", ".join(image.RELEASES)
        )
    if opts.accel not in ("auto", "kvm", "tcg"):
        raise UserError(f"--accel must be kvm, tcg or auto, not {opts.accel!r}")
    for item in opts.env:
        name = item.split("=", 1)[0]
        if "=" not in item or not name.isidentifier():
            raise UserError(f"--env wants NAME=VALUE, got {item!r}")
    if opts.memory_mb < 256:
        raise UserError("--memory must be at least 256 (MiB)")
    if opts.cpus < 1:
        raise UserError("--cpus must be at least 1")
    if opts.timeout <= 0:
        raise UserError("--timeout must be positive")
    for label, path in (("--kernel", opts.kernel), ("--initrd", opts.initrd)):
        if path is not None and not path.is_file():
            raise UserError(f"{label} {path}: no such file")
    if opts.modules is not None and not opts.modules.is_dir():
        raise UserError(f"--modules {opts.modules}: no such directory")
    if (opts.initrd or opts.modules) and opts.kernel is None:
        raise UserError("--initrd and --modules go with --kernel")
    try:
        driver_setup.validate(opts.driver, opts.driver_src, opts.module, opts.kernel)
    except DriverError as exc:
        raise UserError(str(exc)) from None


def modules_tree(directory: Path) -> Path:
    """The directory holding <kernel-version>/modules.dep under ``directory``.

    Accepts an INSTALL_MOD_PATH root (DIR/lib/modules/VER), a lib/modules
    directory, or one VER directory.
    """
    for candidate in (directory / "lib/modules", directory / "usr/lib/modules", directory):
        if candidate.is_dir() and any(candidate.glob("*/modules.dep")):
            return candidate
    if (directory / "modules.dep").is_file():
        return directory.parent
    raise UserError(
        f"--modules {directory}: no */modules.dep found "
        "(give the INSTALL_MOD_PATH of `make modules_install`)"
    )


def ensure_image(opts: VmOptions, root: Path) -> image.Image:
    """The cached image for these inputs, built when missing or on --rebuild."""
    try:
        mirror = (opts.mirror or host_mirror()).rstrip("/")
    except MirrorError as exc:
        raise UserError(str(exc)) from None
    packages = image.packages_for(opts.release)
    key = image.cache_key(opts.release, packages, image.guest_init_script(), mirror)
    img = image.Image(image.image_dir(opts.release, key, root))
    if img.complete() and not opts.rebuild:
        return img
    prereqs.check_root_for_build()
    prereqs.check_tools(prereqs.BUILD_TOOLS)
    prereqs.check_disk_space(root)
    prereqs.check_mirror_reachable(mirror)
    lock_path = img.directory.parent / f".{img.directory.name}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        # Concurrent runs wait for one build instead of building twice.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if img.complete() and not opts.rebuild:
            return img
        try:
            img = image.build(opts.release, mirror, img.directory)
        except (RuntimeError, subprocess.CalledProcessError) as exc:
            raise UserError(f"image build failed: {exc}") from None
    image.remove_other_images(img.directory)
    return img


def write_control(
    ctl: Path,
    opts: VmOptions,
    project: Path,
    workdir: Path,
    use_pydeps: bool,
    driver: dict[str, str] | None = None,
) -> None:
    """config.sh for the guest init and command.sh that execs COMMAND."""
    columns = ""
    if sys.stdout.isatty():
        columns = str(shutil.get_terminal_size().columns)
    config = {
        "PROJECT_DIR": str(project),
        "WORK_DIR": str(workdir),
        "PYDEPS": "1" if use_pydeps else "0",
        "GUEST_COLUMNS": columns,
        **(driver or {"DRIVER": "rxe", "DRIVER_MODULE": "rdma_rxe", "DRIVER_KO": ""}),
    }
    (ctl / "config.sh").write_text("".join(f"{k}={shlex.quote(v)}\n" for k, v in config.items()))
    lines = [
        "# written by qpconform vm",
        f"export {driver_setup.ENV_NAME}={driver_setup.CTL_IN_GUEST}/driver.json",
    ]
    for item in opts.env:
        name, value = item.split("=", 1)
        if name == "PYTHONPATH":  # keep the project and the pip --target dir importable
            lines.append(f'export PYTHONPATH={shlex.quote(value)}"${{PYTHONPATH:+:$PYTHONPATH}}"')
        else:
            lines.append(f"export {name}={shlex.quote(value)}")
    lines.append("exec " + shlex.join(opts.command))
    (ctl / "command.sh").write_text("\n".join(lines) + "\n")


# --- KVM memory: a host whose KVM cannot boot the guest is remembered ---------


def _accel_memo_key(kernel: Path) -> str:
    return f"{os.uname().release}|{kernel.resolve()}"


def _load_memo(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def choose_accels(
    requested: str, kernel: Path, memo_path: Path, kvm_ok: bool | None = None
) -> list[str]:
    """Accelerators to try, in order, for --accel ``requested``."""
    if requested != "auto":
        return [requested]
    if not (qemu.kvm_usable() if kvm_ok is None else kvm_ok):
        return ["tcg"]
    if _load_memo(memo_path).get(_accel_memo_key(kernel)) == "kvm-failed":
        _note(
            f"KVM did not boot this kernel on this host before (remembered in {memo_path}); "
            "using TCG (--accel kvm tries KVM again)"
        )
        return ["tcg"]
    return ["kvm", "tcg"]


def remember_kvm_failure(kernel: Path, memo_path: Path) -> None:
    memo = _load_memo(memo_path)
    memo[_accel_memo_key(kernel)] = "kvm-failed"
    memo_path.parent.mkdir(parents=True, exist_ok=True)
    memo_path.write_text(json.dumps(memo, indent=2) + "\n")


# --- the run ---------------------------------------------------------------


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def run(opts: VmOptions) -> int:
    """Run COMMAND in the VM; returns the exit status for the process."""
    previous = {s: signal.signal(s, _raise_interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return _run(opts)
    except KeyboardInterrupt:
        _note(
            "interrupted: what was running (QEMU, an image build) is stopped, its temporary "
            "files removed"
        )
        return EXIT_INTERRUPTED
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def log_dir_of(opts: VmOptions, project: Path | None = None) -> Path:
    """Where the run's logs go: --log-dir, relative to the project (the guest sees it)."""
    if opts.log_dir.is_absolute():
        return opts.log_dir
    project = project or (opts.project or find_project(Path.cwd().resolve())).resolve()
    return project / opts.log_dir


def _run(opts: VmOptions) -> int:
    started = time.monotonic()
    deadline = started + opts.timeout
    validate(opts)
    cwd = Path.cwd().resolve()
    project = (opts.project or find_project(cwd)).resolve()
    workdir = cwd if cwd.is_relative_to(project) else project
    log_dir = log_dir_of(opts, project)
    if not opts.build_only:  # found now, not after minutes of image build and boot
        try:
            check_writable(log_dir, "pass --log-dir DIR")
        except ReportWriteError as exc:
            raise UserError(str(exc)) from None
    root = image.cache_root()
    img = ensure_image(opts, root)
    if opts.build_only:
        _note(f"image: {img.directory}")
        return 0
    prereqs.check_tools(prereqs.BOOT_TOOLS)
    qemu_bin = prereqs.find_tool("qemu-system-x86_64")
    qemu_img = prereqs.find_tool("qemu-img")
    meta = img.meta
    pydeps_dir = None
    if opts.pip_packages:
        try:
            pydeps_dir = pydeps.ensure(meta["python"], opts.pip_packages, root, opts.rebuild)
        except pydeps.PydepsError as exc:
            raise UserError(str(exc)) from None

    (log_dir / "guest-kernel-log.txt").unlink(missing_ok=True)  # never a stale one

    kernel = opts.kernel or img.kernel
    initrd = opts.initrd if opts.kernel else img.initrd
    memo_path = root / "accel.json"
    accels = choose_accels(opts.accel, kernel, memo_path)
    nonce = secrets.token_hex(8)

    tmp = Path(tempfile.mkdtemp(prefix="qpconform-vm-"))
    try:
        ctl = tmp / "ctl"
        ctl.mkdir()
        try:
            dut = driver_setup.prepare(
                opts.driver, opts.driver_src, opts.module, img, root, ctl
            )
        except (DriverError, BuildError) as exc:
            raise UserError(str(exc)) from None
        write_control(
            ctl, opts, project, workdir, pydeps_dir is not None, driver_setup.config(dut)
        )
        shares = [qemu.Share(ctl, "qpc_ctl"), qemu.Share(project, "qpc_proj")]
        if pydeps_dir is not None:
            shares.append(qemu.Share(pydeps_dir, "qpc_pydeps"))  # guest adds bytecode
        append = (
            f"root=/dev/vda rw console=ttyS0 init={image.INIT_PATH_IN_GUEST} "
            f"panic=-1 quiet qpconform.nonce={nonce}"
        )
        extra_disks = []
        if opts.modules is not None:
            modimg = tmp / "modules.img"
            tree = modules_tree(opts.modules)
            size_mb = max(64, int(_du(tree) * 1.3 / 1024**2) + 32)
            subprocess.run(
                [
                    prereqs.find_tool("mkfs.ext4"),
                    "-q",
                    "-F",
                    "-d",
                    str(tree),
                    str(modimg),
                    f"{size_mb}M",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            extra_disks.append(modimg)
            append += " qpconform.modules=/dev/vdb"

        def spec_for(accel: str) -> qemu.GuestSpec:
            overlay = tmp / "overlay.qcow2"
            overlay.unlink(missing_ok=True)
            qemu.create_overlay(qemu_img, img.root, overlay)
            (ctl / "status").unlink(missing_ok=True)
            return qemu.GuestSpec(
                kernel=kernel,
                initrd=initrd,
                disk=overlay,
                append=append,
                memory_mb=opts.memory_mb,
                cpus=opts.cpus,
                shares=shares,
                extra_disks=extra_disks,
                ports=[qemu.SerialPort(n, p) for n, p in opts.ports.items()],
                qemu=qemu_bin,
            )

        kernel_name = kernel if opts.kernel else meta["kernel_release"]
        _note(
            f"booting {opts.release} image (kernel {kernel_name}) with "
            f"{' then '.join(a.upper() for a in accels)}; project {project} -> same path in guest; "
            f"driver: {driver_setup.describe(dut)}"
        )
        timeouts = {"kvm": opts.kvm_boot_timeout, "tcg": opts.tcg_boot_timeout}
        with open(log_dir / "guest-console.txt", "wb") as console_log:
            accel, outcome = qemu.boot(
                spec_for,
                accels,
                nonce,
                timeouts,
                deadline,
                sys.stdout.buffer,
                console_log,
                note=_note,
            )
        if accels[0] == "kvm" and accel == "tcg":
            remember_kvm_failure(kernel, memo_path)
        return _finish(outcome, accel, ctl, log_dir, opts, started)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _finish(
    outcome: qemu.Outcome, accel: str, ctl: Path, log_dir: Path, opts: VmOptions, started: float
) -> int:
    """Turn the QEMU outcome plus the guest's files into the run's exit status."""
    total = time.monotonic() - started
    boot = f"{outcome.boot_seconds:.1f} s" if outcome.boot_seconds is not None else "n/a"
    timing = f"accel {accel.upper()}, boot {boot}, total {total:.1f} s"
    kernel_log_path = log_dir / "guest-kernel-log.txt"
    if outcome.kind != "exited":
        if outcome.boot_output and (opts.show_boot or outcome.boot_seconds is None):
            sys.stderr.write(outcome.boot_output.decode(errors="replace")[-4000:] + "\n")
        elif outcome.boot_seconds is None:
            _note("the guest printed nothing on its console before it was killed "
                  "(a kernel or QEMU hang before the boot marker)")
        if outcome.kind == "timeout":
            _note(f"guest still running after --timeout {opts.timeout:.0f} s: killed it ({timing})")
            return EXIT_TIMEOUT
        if outcome.kind == "crashed":  # a failure of the device under test, not of the runner
            _note(f"{outcome.message} ({timing}); its report is in the console log "
                  f"{log_dir / 'guest-console.txt'}")
            return EXIT_KERNEL_LOG
        _note(
            f"guest failed: {outcome.message} (QEMU status {outcome.qemu_returncode}; "
            f"{timing}); console log in {log_dir / 'guest-console.txt'}"
        )
        return EXIT_INFRA
    status_file = ctl / "status"
    status = outcome.status
    if status_file.is_file():
        status = int(status_file.read_text().strip() or status)
    log_text = ""
    if (ctl / "kernel.log").is_file():
        log_text = (ctl / "kernel.log").read_text(errors="replace")
        kernel_log_path.write_text(log_text)
    else:
        _note("the guest wrote no kernel log")
    if (ctl / "setup-error").is_file():
        error = (ctl / "setup-error").read_text().strip()
        _note(
            f"guest setup failed before COMMAND ran: {error} ({timing}); kernel log in "
            f"{kernel_log_path}"
        )
        return EXIT_INFRA
    findings = kernel_log.scan(log_text, opts.ignore_kernel)
    _note(f"COMMAND exited with status {status} ({timing})")
    if findings:
        _note(
            f"the guest kernel log has {len(findings)} problem report(s); "
            f"saved to {kernel_log_path}:\n{kernel_log.summary(findings)}"
        )
        return status if status else EXIT_KERNEL_LOG
    return status


def run_or_report(opts: VmOptions) -> int:
    """``run`` with user errors turned into one clear line instead of a traceback."""
    try:
        return run(opts)
    except (UserError, prereqs.PrereqError) as exc:
        _note(f"error: {exc}")
        return EXIT_INFRA
