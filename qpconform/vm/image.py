"""Build and cache the guest root filesystem image with mmdebstrap.

The image is keyed by everything that goes into it (release, packages, init
script, mirror, build recipe), so a changed input gives a new image and an
unchanged one is reused.  A run never writes to the cached image: QEMU boots a
copy-on-write overlay of it (see qpconform/vm/qemu.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from qpconform.vm import stoppable

RELEASES = ("bookworm", "trixie", "trixie-backports")
DEFAULT_RELEASE = "bookworm"

# A release whose kernel comes from another suite than its user space: trixie-backports is
# Debian 13 (rdma-core, pyverbs, Python of trixie) with the newest kernel Debian's archive
# serves (linux-image-amd64 of trixie-backports; 7.3.4 on 2026-12-02). Debian unstable (sid)
# is not offered: the mirror's sid Release expired (Valid-Until) and its kernel was older.
KERNEL_SUITES = {"trixie-backports": "trixie-backports"}

PACKAGES = (
    "linux-image-amd64",
    "initramfs-tools",
    "kmod",
    "udev",
    "iproute2",
    "rdma-core",
    "ibverbs-providers",
    "ibverbs-utils",
    "python3",
    "python3-pyverbs",
    "python3-pytest",
    "python3-hypothesis",
    "python3-jinja2",  # the report is rendered in the guest at session end (compiled markupsafe)
    "python3-msgpack",  # the executor's wire (qpconform/adapters/wire.py; compiled, from Debian)
)

# Bump when the build steps below change in a way the other inputs don't show.
RECIPE_VERSION = 1

# Leave documentation, manual pages and translations out of the image.
DOC_EXCLUDES = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
    "path-exclude=/usr/share/lintian/*",
)
DPKG_EXCLUDES = (
    *DOC_EXCLUDES,
    # kernel modules a virtio guest with SoftRoCE never loads (about half of them)
    *(
        f"path-exclude={lib}/modules/*/kernel/{sub}/*"
        for lib in ("/lib", "/usr/lib")
        for sub in (
            "drivers/gpu",
            "drivers/media",
            "drivers/net/wireless",
            "drivers/net/ethernet",
            "drivers/staging",
            "drivers/infiniband/hw",
            "drivers/bluetooth",
            "drivers/iio",
            "drivers/scsi",
            "drivers/usb",
            "drivers/isdn",
            "drivers/input",
            "sound",
            "net/wireless",
            "net/mac80211",
            "net/bluetooth",
        )
    ),
)

# A small initramfs: only what mounting /dev/vda needs (faster to unpack under TCG).
INITRAMFS_CONF = "MODULES=list\nCOMPRESS=zstd\n"
INITRAMFS_MODULES = "virtio_pci\nvirtio_blk\next4\n"

INIT_PATH_IN_GUEST = "/usr/local/sbin/qpconform-init"


def base_suite(release: str) -> str:
    """The Debian suite of the user space: ``trixie`` for trixie-backports."""
    return release.split("-", 1)[0]


def suites(release: str) -> tuple[str, ...]:
    """Every suite the image (and the driver build layer) is built from."""
    base = base_suite(release)
    return (base,) if release == base else (base, release)


def source_lines(release: str, mirror: str) -> list[str]:
    """The mmdebstrap MIRROR arguments: one ``deb`` line per suite."""
    return [f"deb {mirror} {suite} main" for suite in suites(release)]


def packages_for(release: str) -> tuple[str, ...]:
    """PACKAGES, the kernel taken from the release's kernel suite (``pkg/suite``) if it has one,
    so apt also takes the kernel's own dependencies (linux-image-X, modules) from there."""
    suite = KERNEL_SUITES.get(release)
    if suite is None:
        return PACKAGES
    return tuple(f"{p}/{suite}" if p == "linux-image-amd64" else p for p in PACKAGES)


def guest_init_script() -> bytes:
    """The guest PID 1 script shipped as package data."""
    return resources.files("qpconform.vm").joinpath("guest_init.sh").read_bytes()


def cache_root() -> Path:
    """$XDG_CACHE_HOME/qpconform, default ~/.cache/qpconform."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "qpconform"


def cache_key(
    release: str, packages: tuple[str, ...] | list[str], init_script: bytes, mirror: str
) -> str:
    """Stable digest of every input of an image build."""
    inputs = {
        "release": release,
        "packages": sorted(packages),
        "init": hashlib.sha256(init_script).hexdigest(),
        "mirror": mirror.rstrip("/"),
        "recipe": RECIPE_VERSION,
        "dpkg": list(DPKG_EXCLUDES),
        "initramfs": [INITRAMFS_CONF, INITRAMFS_MODULES],
    }
    blob = json.dumps(inputs, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


@dataclass(frozen=True)
class Image:
    """A built image directory: root.img (raw ext4), vmlinuz, initrd.img, meta.json."""

    directory: Path

    @property
    def root(self) -> Path:
        return self.directory / "root.img"

    @property
    def kernel(self) -> Path:
        return self.directory / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.directory / "initrd.img"

    @property
    def meta(self) -> dict:
        return json.loads((self.directory / "meta.json").read_text())

    def complete(self) -> bool:
        files = (self.root, self.kernel, self.initrd, self.directory / "meta.json")
        return all(p.is_file() for p in files)


def image_dir(release: str, key: str, root: Path | None = None) -> Path:
    return (root or cache_root()) / "images" / f"{release}-{key}"


def mmdebstrap_command(
    release: str,
    mirror: str,
    target: Path,
    init_script: Path,
    packages: tuple[str, ...] | list[str] | None = None,
) -> list[str]:
    """The mmdebstrap argv; hooks run on the host with $1 = the new root."""
    setup = (
        'mkdir -p "$1/etc/initramfs-tools/conf.d" "$1/usr/share/initramfs-tools/modules.d"'
        f' && printf "{INITRAMFS_CONF.replace(chr(10), chr(92) + "n")}"'
        ' > "$1/etc/initramfs-tools/conf.d/qpconform"'
        f' && printf "{INITRAMFS_MODULES.replace(chr(10), chr(92) + "n")}"'
        ' > "$1/usr/share/initramfs-tools/modules.d/qpconform"'
    )
    customize = (
        f'install -D -m 0755 "{init_script}" "$1{INIT_PATH_IN_GUEST}"'
        ' && rm -rf "$1/var/cache/apt/archives/"*.deb "$1/var/lib/apt/lists/"*'
        ' && echo qpconform-vm > "$1/etc/hostname"'
    )
    if packages is None:
        packages = packages_for(release)
    cmd = [
        "mmdebstrap",
        "--mode=root",
        "--variant=minbase",
        "--include=" + ",".join(packages),
        '--aptopt=Acquire::Languages "none"',
        *[f"--dpkgopt={opt}" for opt in DPKG_EXCLUDES],
        f"--setup-hook={setup}",
        f"--customize-hook={customize}",
        base_suite(release),
        str(target),
        *source_lines(release, mirror),
    ]
    return cmd


def _log(msg: str) -> None:
    print(f"qpconform vm: {msg}", file=sys.stderr, flush=True)


def _guest_python(rootfs: Path) -> str:
    """'3.11' from the guest's /usr/bin/python3 symlink (python3 -> python3.11)."""
    link = os.readlink(rootfs / "usr/bin/python3")
    return Path(link).name.removeprefix("python")


def _one(rootfs: Path, pattern: str) -> Path:
    found = sorted((rootfs / "boot").glob(pattern))
    if not found:
        raise RuntimeError(f"image build produced no /boot/{pattern}")
    return found[-1]


def _dir_size(path: Path) -> int:
    out = subprocess.run(["du", "-sxb", str(path)], check=True, capture_output=True, text=True)
    return int(out.stdout.split()[0])


def build(release: str, mirror: str, destination: Path) -> Image:
    """Build the image into ``destination`` atomically (temp dir + rename): an interrupted
    or failed build leaves no folder a later run could take for a complete image."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{destination.name}.build-", dir=destination.parent))
    try:
        rootfs = work / "rootfs"
        init = work / "guest_init.sh"
        init.write_bytes(guest_init_script())
        started = time.monotonic()
        _log(f"building the {release} image with mmdebstrap from {mirror} (takes 1-3 min)")
        cmd = mmdebstrap_command(release, mirror, rootfs, init)
        result = stoppable.run(cmd)  # a Ctrl-C lets mmdebstrap unmount what it mounted
        if result.returncode != 0:
            tail = "\n".join(result.stdout.splitlines()[-30:])
            raise RuntimeError(f"mmdebstrap failed with status {result.returncode}:\n{tail}")
        out = work / "image"
        out.mkdir()
        shutil.copy2(_one(rootfs, "vmlinuz-*"), out / "vmlinuz")
        shutil.copy2(_one(rootfs, "initrd.img-*"), out / "initrd.img")
        kernel_release = _one(rootfs, "vmlinuz-*").name.removeprefix("vmlinuz-")
        python = _guest_python(rootfs)
        size_mb = _dir_size(rootfs) * 13 // 10 // 1024**2 + 256
        subprocess.run(
            [
                "mkfs.ext4",
                "-q",
                "-F",
                "-L",
                "qpconform",
                "-d",
                str(rootfs),
                str(out / "root.img"),
                f"{size_mb}M",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        meta = {
            "release": release,
            "mirror": mirror,
            "kernel_release": kernel_release,
            "python": python,
            "built": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "build_seconds": round(time.monotonic() - started, 1),
        }
        (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        if destination.exists():
            shutil.rmtree(destination)
        os.replace(out, destination)
        _log(f"image ready in {meta['build_seconds']} s: {destination}")
        return Image(destination)
    finally:
        stoppable.remove_tree(work)


def remove_other_images(keep: Path) -> None:
    """Drop stale images of the same release so the cache does not grow forever."""
    release = keep.name.rsplit("-", 1)[0]
    for other in keep.parent.glob(f"{release}-*"):
        # trixie-KEY only: a trixie-backports-KEY image is another release's
        if other.name.rsplit("-", 1)[0] != release:
            continue
        if other != keep and other.is_dir() and not other.name.startswith("."):
            shutil.rmtree(other, ignore_errors=True)
