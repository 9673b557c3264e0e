"""Build a driver module out of tree against the guest kernel's own headers.

The build layer is a Debian root of the guest's release holding the exact
``linux-headers-<kernel release>`` of the image, gcc and make, made with
mmdebstrap and cached apart from the boot image (which stays small).  A build
runs ``make M=...`` in it under chroot, natively on the host: a few seconds
for rxe, where the same build under TCG would take minutes.  The same layer
fetches the matching stock source (``linux-source-X.Y`` of the headers'
version), so a patched driver starts from exactly what the guest runs.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from qpconform.vm import image, prereqs, stoppable
from qpconform.vm.drivers import DriverError, DriverSpec

#: libibverbs-dev: qpconform/vm/verbs_cost.c, the C side of the executor-language measurement
BUILD_PACKAGES = ("gcc", "make", "libc6-dev", "xz-utils", "libibverbs-dev")
RECIPE_VERSION = 1


class BuildError(Exception):
    """The module did not build, or the source could not be fetched (carries the tool's words)."""


def _log(msg: str) -> None:
    print(f"qpconform vm: {msg}", file=sys.stderr, flush=True)


def headers_package(kernel_release: str) -> str:
    return f"linux-headers-{kernel_release}"


def source_package(kernel_release: str) -> str:
    """``linux-source-6.1`` for 6.1.0-50-amd64, ``linux-source-6.12`` for 6.12.117+deb13-amd64."""
    match = re.match(r"(\d+)\.(\d+)", kernel_release)
    if not match:
        raise BuildError(f"cannot tell the kernel series of {kernel_release!r}")
    return f"linux-source-{match.group(1)}.{match.group(2)}"


def cache_key(release: str, kernel_release: str, mirror: str) -> str:
    inputs = {
        "release": release,
        "kernel": kernel_release,
        "mirror": mirror.rstrip("/"),
        "packages": sorted(BUILD_PACKAGES),
        "recipe": RECIPE_VERSION,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class BuildEnv:
    """A built build layer: ``rootfs`` plus meta.json (kernel release, headers version)."""

    directory: Path

    @property
    def rootfs(self) -> Path:
        return self.directory / "rootfs"

    @property
    def meta(self) -> dict:
        return json.loads((self.directory / "meta.json").read_text())

    def complete(self) -> bool:
        return (self.directory / "meta.json").is_file() and self.rootfs.is_dir()

    def chroot(self, argv: list[str], cwd: str = "/") -> subprocess.CompletedProcess:
        """Run ``argv`` inside the layer; output captured as text."""
        shutil.copy2("/etc/resolv.conf", self.rootfs / "etc/resolv.conf")  # apt-get download
        return subprocess.run(
            chroot_command(self.rootfs, argv, cwd),
            capture_output=True,
            text=True,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8", "HOME": "/root"},
        )


# /proc in the layer, in a mount namespace of the command's own (gone with it: nothing stays
# mounted in the cache, two builds at once do not meet): objtool of 7.x kernels reads
# /proc/self/maps when it starts ("read_stack_limit: fopen failed" without it).
_WITH_PROC = (
    'root=$1; shift; mount -t proc proc "$root/proc" && '
    'exec chroot "$root" /bin/sh -c \'cd "$0" && exec "$@"\' "$@"'
)


def chroot_command(rootfs: Path, argv: list[str], cwd: str = "/") -> list[str]:
    """``argv`` run in ``cwd`` inside ``rootfs``, with /proc mounted there for it alone."""
    return [
        "unshare", "--mount", "--propagation", "private",
        "/bin/sh", "-c", _WITH_PROC, "sh", str(rootfs), cwd, *argv,
    ]  # fmt: skip


def mmdebstrap_command(release: str, kernel_release: str, mirror: str, target: Path) -> list[str]:
    return [
        "mmdebstrap",
        "--mode=root",
        "--variant=apt",
        "--include=" + ",".join((*BUILD_PACKAGES, headers_package(kernel_release))),
        '--aptopt=Acquire::Languages "none"',
        "--skip=cleanup/apt/lists",  # kept: `apt-get download` of the matching source
        *[f"--dpkgopt={opt}" for opt in image.DOC_EXCLUDES],
        image.base_suite(release),
        str(target),
        # the kernel's suite too: its headers (an exact name, found in either) and linux-source
        *image.source_lines(release, mirror),
    ]


def ensure(release: str, kernel_release: str, mirror: str, root: Path | None = None) -> BuildEnv:
    """The cached build layer for this guest kernel, built when missing (needs root)."""
    root = root or image.cache_root()
    key = cache_key(release, kernel_release, mirror)
    env = BuildEnv(root / "buildenv" / f"{release}-{key}")
    if env.complete():
        return env
    prereqs.check_root_for_build()
    prereqs.check_tools(
        {"mmdebstrap": "mmdebstrap", "chroot": "coreutils", "unshare": "util-linux"}
    )
    prereqs.check_disk_space(root)
    env.directory.parent.mkdir(parents=True, exist_ok=True)
    lock_path = env.directory.parent / f".{env.directory.name}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two runs at once build it once
        if env.complete():
            return env
        work = Path(
            tempfile.mkdtemp(prefix=f".{env.directory.name}.build-", dir=env.directory.parent)
        )
        try:
            started = time.monotonic()
            _log(
                f"building the driver build layer ({headers_package(kernel_release)}, gcc, make) "
                f"with mmdebstrap; once per guest kernel, about a minute"
            )
            cmd = mmdebstrap_command(release, kernel_release, mirror, work / "rootfs")
            result = stoppable.run(cmd)  # a Ctrl-C lets mmdebstrap unmount what it mounted
            if result.returncode != 0:
                tail = "\n".join(result.stdout.splitlines()[-15:])
                hint = ""
                if "Unable to locate package linux-headers" in result.stdout or (
                    "linux-headers" in result.stdout
                    and "has no installation candidate" in result.stdout
                ):
                    hint = (
                        f"\nthe mirror no longer has {headers_package(kernel_release)} (the cached "
                        f"image's kernel is older than the mirror's): rebuild the image with "
                        f"`qpconform vm --release {release} --rebuild --build-only`"
                    )
                raise BuildError(f"mmdebstrap of the build layer failed:\n{tail}{hint}")
            layer = BuildEnv(work)
            version = layer.chroot(
                ["dpkg-query", "-W", "-f=${Version}", headers_package(kernel_release)]
            ).stdout.strip()
            meta = {
                "release": release,
                "kernel_release": kernel_release,
                "headers_version": version,
                "built_seconds": round(time.monotonic() - started, 1),
            }
            (work / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
            if env.directory.exists():
                shutil.rmtree(env.directory)
            os.replace(work, env.directory)
            _log(f"build layer ready in {meta['built_seconds']} s: {env.directory}")
        finally:
            stoppable.remove_tree(work)
    return env


@dataclass(frozen=True)
class BuiltModule:
    path: Path
    seconds: float
    log: str


def for_image(img: image.Image, root: Path | None = None) -> BuildEnv:
    """The build layer of a guest image's kernel (its release, kernel and mirror)."""
    meta = img.meta
    return ensure(meta["release"], meta["kernel_release"], meta["mirror"], root)


def _is_source(path: Path) -> bool:
    return path.suffix in (".c", ".h") or path.name in ("Makefile", "Kbuild", "Kconfig")


def sync_sources(source: Path, tree: Path) -> int:
    """Make ``tree``'s sources equal ``source``'s, touching only files whose content differs
    (so make recompiles only those); a changed file set starts the tree afresh.
    Returns how many files were written."""
    wanted = {p.relative_to(source) for p in source.rglob("*") if p.is_file() and _is_source(p)}
    present = {p.relative_to(tree) for p in tree.rglob("*") if p.is_file() and _is_source(p)}
    if present and present != wanted:
        shutil.rmtree(tree)
    written = 0
    for rel in sorted(wanted):
        data = (source / rel).read_bytes()
        target = tree / rel
        if target.is_file() and target.read_bytes() == data:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)  # mtime now: newer than its object file
        written += 1
    return written


def build_module(
    env: BuildEnv, source: Path, driver: DriverSpec, out_dir: Path, jobs: int | None = None
) -> BuiltModule:
    """Build ``driver`` from ``source`` (its own folder) in the layer; the .ko lands in out_dir.

    The layer keeps one build tree per driver, built in place: a mutant or a
    patch that changes one file recompiles that file only (seconds, not a
    minute); a lock keeps two builds from sharing it.
    """
    kernel_release = env.meta["kernel_release"]
    build_root = env.rootfs / "build"
    build_root.mkdir(exist_ok=True)
    tree = build_root / f"{driver.name}-tree"
    with open(build_root / f".{driver.name}-tree.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sync_sources(source, tree)
        (tree / f"{driver.module}.ko").unlink(missing_ok=True)
        inside = "/" + tree.relative_to(env.rootfs).as_posix()
        started = time.monotonic()
        result = env.chroot(
            [
                "make",
                "-C",
                f"/usr/src/{headers_package(kernel_release)}",
                f"M={inside}",
                f"{driver.config}=m",
                f"-j{jobs or os.cpu_count() or 1}",
                "modules",
            ]
        )
        seconds = time.monotonic() - started
        log = result.stdout + result.stderr
        built = tree / f"{driver.module}.ko"
        if result.returncode != 0 or not built.is_file():
            errors = [
                line for line in log.splitlines() if "error" in line.lower()
            ] or log.splitlines()
            raise BuildError(
                f"building {driver.module}.ko from {source} against {kernel_release} failed "
                f"(make status {result.returncode}):\n" + "\n".join(errors[-20:])
            )
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / built.name
        shutil.copy2(built, target)
        return BuiltModule(target, seconds, log)


def modinfo_field(ko: Path, name: str) -> str:
    """One ``name=value`` of a module's .modinfo section, read from the file (no tools)."""
    data = ko.read_bytes()
    match = re.search(rb"(?:^|\0)" + re.escape(name.encode()) + rb"=([^\0]*)\0", data)
    return match.group(1).decode(errors="replace") if match else ""


def check_vermagic(ko: Path, kernel_release: str) -> str:
    """The module's vermagic; an error unless it was built for ``kernel_release``."""
    if not ko.is_file():
        raise DriverError(f"--module {ko}: no such file")
    vermagic = modinfo_field(ko, "vermagic")
    if not vermagic:
        raise DriverError(f"--module {ko}: not a kernel module (no vermagic in .modinfo)")
    built_for = vermagic.split()[0]
    if built_for != kernel_release:
        raise DriverError(
            f"--module {ko} was built for kernel {built_for}, but the guest runs "
            f"{kernel_release}: rebuild it against linux-headers-{kernel_release} "
            f"(or give the source with --driver-src DIR and the runner builds it)"
        )
    return vermagic


def fetch_source(env: BuildEnv, driver: DriverSpec, dest: Path, *others: DriverSpec) -> Path:
    """Extract the stock source of ``driver`` for the guest kernel into ``dest``/<name>
    (and of ``others`` from the same download); returns the first.

    Downloads ``linux-source-X.Y`` at the version of the layer's headers and
    keeps only the drivers' folders.
    """
    kernel_release = env.meta["kernel_release"]
    version = env.meta["headers_version"]
    package = source_package(kernel_release)
    wanted = [driver, *others]
    for spec in wanted:
        if (dest / spec.name).exists():
            raise DriverError(
                f"{dest / spec.name} already exists; remove it or choose another DEST"
            )
    work = Path(tempfile.mkdtemp(prefix="source-", dir=env.rootfs / "tmp"))
    try:
        inside = "/" + work.relative_to(env.rootfs).as_posix()
        _log(f"downloading {package}={version} (about 140 MB)")
        got = env.chroot(["apt-get", "download", f"{package}={version}"], cwd=inside)
        debs = list(work.glob("*.deb"))
        if got.returncode != 0 or not debs:
            raise BuildError(
                f"apt-get download {package}={version} failed:\n{(got.stdout + got.stderr)[-1500:]}"
            )
        unpacked = work / "x"
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(unpacked)], check=True)
        tarball = next(unpacked.glob("usr/src/linux-source-*.tar.*"))
        patterns = [f"*/{spec.folder}/*" for spec in wanted]
        subprocess.run(
            ["tar", "-xf", str(tarball), "-C", str(work), "--wildcards", *patterns], check=True
        )
        dest.mkdir(parents=True, exist_ok=True)
        for spec in wanted:
            target = dest / spec.name
            shutil.copytree(next(work.glob(f"linux-source-*/{spec.folder}")), target)
            (target / ".qpconform-source").write_text(
                f"{package}={version} {spec.folder} (guest kernel {kernel_release})\n"
            )
        return dest / driver.name
    finally:
        shutil.rmtree(work, ignore_errors=True)
