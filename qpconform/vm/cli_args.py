"""The ``qpconform vm`` command-line options, turned into VmOptions."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from qpconform.vm import drivers, image, pydeps, runner
from qpconform.vm.qemu import CRASH_GRACE

DESCRIPTION = f"""\
Run COMMAND inside a QEMU VM that has real SoftRoCE devices rxe0 and rxe1
(rdma_rxe on the two ends of a veth pair; no network leaves the VM).  The
project directory is shared at the same path, COMMAND runs there with
QPCONFORM_IN_VM=1, its output streams live, and its exit status is returned.
A WARNING/BUG/Oops/KASAN/lockdep report in the guest kernel log fails the run;
a guest whose kernel crashed (an oops, a panic) is stopped {CRASH_GRACE:.0f} s later.
"""

EPILOG = """\
exit status: COMMAND's status; 1 if COMMAND succeeded but the guest kernel log
has a problem report, or the guest kernel crashed before COMMAND ended; 124 on
--timeout; 125 if the runner failed; 130 on Ctrl-C.
The image is cached under $XDG_CACHE_HOME/qpconform (default ~/.cache/qpconform).
example: qpconform vm -- python3 -m pytest suites/ --device rxe0
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the vm options on ``parser`` (COMMAND comes after ``--``)."""
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add = parser.add_argument
    add(
        "--release",
        default=image.DEFAULT_RELEASE,
        choices=image.RELEASES,
        help="Debian release of the guest (default %(default)s)",
    )
    add("--mirror", help="Debian archive URI (default: the host's apt sources)")
    add("--rebuild", action="store_true", help="rebuild the cached image and Python deps")
    add("--build-only", action="store_true", help="build/check the image, boot nothing")
    add(
        "--install-deps",
        action="store_true",
        help="apt-get install the host packages (qemu, mmdebstrap, ...) as root and exit",
    )
    add(
        "--accel",
        default="auto",
        choices=("auto", "kvm", "tcg"),
        help="auto: KVM if it boots within --kvm-boot-timeout, else TCG (default)",
    )
    add("--memory", type=int, default=2048, metavar="MIB", help="guest memory (default 2048)")
    add(
        "--cpus",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="guest CPUs (default: 2, capped at host CPUs)",
    )
    add(
        "--timeout",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="limit for the whole run; a guest still running is killed (default 3600)",
    )
    add(
        "--kvm-boot-timeout",
        type=float,
        default=runner.DEFAULT_KVM_BOOT_TIMEOUT,
        metavar="SECONDS",
        help="KVM boot watchdog before falling back to TCG (default 20)",
    )
    add(
        "--boot-timeout",
        type=float,
        default=runner.DEFAULT_TCG_BOOT_TIMEOUT,
        metavar="SECONDS",
        help="TCG boot watchdog (default 180)",
    )
    add(
        "--kernel",
        type=Path,
        metavar="BZIMAGE",
        help="boot this kernel instead of Debian's (needs virtio_pci, virtio_blk, ext4 "
        "built in, or an --initrd that loads them)",
    )
    add("--initrd", type=Path, help="initrd for --kernel")
    add(
        "--modules",
        type=Path,
        metavar="DIR",
        help="modules for --kernel: INSTALL_MOD_PATH of `make modules_install`",
    )
    add(
        "--log-dir",
        type=Path,
        default=Path("reports/out"),
        help="where guest-kernel-log.txt and guest-console.txt go, relative to the "
        "project (default reports/out)",
    )
    add(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment for COMMAND (repeatable)",
    )
    add(
        "--pip",
        action="append",
        default=[],
        metavar="SPEC",
        help="extra pure-Python package for the guest (repeatable); defaults: "
        + ", ".join(pydeps.DEFAULT_PACKAGES),
    )
    add("--no-pip", action="store_true", help="install no extra Python packages")
    add(
        "--project",
        type=Path,
        help="directory shared into the guest "
        "(default: nearest parent with pyproject.toml or .git)",
    )
    add(
        "--ignore-kernel",
        action="append",
        default=[],
        metavar="REGEX",
        help="kernel log lines matching REGEX do not fail the run (repeatable)",
    )
    add(
        "--driver",
        default="rxe",
        choices=sorted(drivers.DRIVERS),
        help="software RDMA driver whose devices (NAME0, NAME1) the guest creates "
        "(default rxe; siw is built from the guest kernel's source, Debian does not ship it)",
    )
    add(
        "--driver-src",
        type=Path,
        metavar="DIR",
        help="driver under test: build this source folder (e.g. a patched "
        "drivers/infiniband/sw/rxe) against the guest kernel's headers and load it "
        "instead of the stock module; fetch the stock source with `qpconform driver-source`",
    )
    add(
        "--module",
        type=Path,
        metavar="FILE.ko",
        help="driver under test built elsewhere (its vermagic must match the guest kernel)",
    )
    add("--show-boot", action="store_true", help="print firmware/kernel boot output on failure")
    add(
        "--serial-port",
        action="append",
        default=[],
        type=_serial_port,
        metavar="NAME=SOCKET",
        help="a virtio-serial port NAME in the guest, reached from the host at unix socket "
        "SOCKET (repeatable): how the host's engine talks to the guest's executor",
    )
    add_host_engine(add)


def add_host_engine(add) -> None:  # type: ignore[no-untyped-def]
    add(
        "--host-engine",
        type=_sessions,
        default=0,
        metavar="N",
        help="run COMMAND on this host, its engine against N device executor sessions in the "
        "guest (one per pytest process: -n N, or 1 without xdist; the guest serves NAME0 of "
        "--driver); COMMAND finds them in QPCONFORM_EXECUTORS (qpconform/vm/host_engine.py)",
    )
    add(
        "--then-in-guest",
        metavar="SHELL_COMMAND",
        help="with --host-engine: once every session ended, run SHELL_COMMAND inside the "
        "same guest (with the --env variables) before it powers off: a second part of the "
        "run without a second boot; the exit status is the worst of the three",
    )


def _sessions(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 8:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of sessions, 1 to 8")
    return int(text)


def _serial_port(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give NAME=SOCKET, e.g. qpconform.0=/tmp/qpc.sock"
        )
    return name, Path(path)


def options_from_args(args: argparse.Namespace, command: list[str]) -> runner.VmOptions:
    packages = [] if args.no_pip else [*pydeps.DEFAULT_PACKAGES, *args.pip]
    return runner.VmOptions(
        command=command,
        release=args.release,
        mirror=args.mirror,
        rebuild=args.rebuild,
        build_only=args.build_only,
        accel=args.accel,
        memory_mb=args.memory,
        cpus=args.cpus,
        timeout=args.timeout,
        kvm_boot_timeout=args.kvm_boot_timeout,
        tcg_boot_timeout=args.boot_timeout,
        kernel=args.kernel,
        initrd=args.initrd,
        modules=args.modules,
        log_dir=args.log_dir,
        env=args.env,
        pip_packages=packages,
        project=args.project,
        ignore_kernel=args.ignore_kernel,
        show_boot=args.show_boot,
        driver=args.driver,
        driver_src=args.driver_src,
        module=args.module,
        ports=dict(args.serial_port),
    )
