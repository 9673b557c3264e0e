"""Check (and on request install) what the VM runner needs on the host.

Each failure names the Debian package or the fix, so a user never has to read
a traceback to learn that ``mmdebstrap`` is missing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

# program -> Debian package that ships it
BUILD_TOOLS = {"mmdebstrap": "mmdebstrap", "mkfs.ext4": "e2fsprogs"}
BOOT_TOOLS = {"qemu-system-x86_64": "qemu-system-x86", "qemu-img": "qemu-utils"}
DEBIAN_PACKAGES = ["qemu-system-x86", "qemu-utils", "mmdebstrap", "e2fsprogs"]

BUILD_SPACE_BYTES = 3 * 1024**3  # rootfs directory + ext4 image while building


class PrereqError(Exception):
    """A host prerequisite is missing; the message says how to fix it."""


def _which(program: str) -> str | None:
    # mkfs.ext4 lives in /usr/sbin, which is not on every user's PATH.
    extra = os.pathsep.join(["/usr/sbin", "/sbin"])
    return shutil.which(program, path=os.environ.get("PATH", "") + os.pathsep + extra)


def find_tool(program: str) -> str:
    """Absolute path of ``program`` or a PrereqError naming its package."""
    path = _which(program)
    if path is None:
        package = {**BUILD_TOOLS, **BOOT_TOOLS}.get(program, program)
        raise PrereqError(
            f"{program} not found: install the Debian package {package} "
            f"(as root: qpconform vm --install-deps)"
        )
    return path


def check_tools(tools: dict[str, str]) -> None:
    """Raise one PrereqError listing every missing program of ``tools``."""
    missing = sorted({pkg for prog, pkg in tools.items() if _which(prog) is None})
    if missing:
        raise PrereqError(
            "missing host packages: "
            + " ".join(missing)
            + " (as root: qpconform vm --install-deps, or apt-get install "
            + " ".join(missing)
            + ")"
        )


def check_disk_space(directory: Path, needed: int = BUILD_SPACE_BYTES) -> None:
    """Fail early instead of halfway through a 2-minute image build."""
    directory.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(directory).free
    if free < needed:
        raise PrereqError(
            f"not enough disk space in {directory}: {free / 1024**3:.1f} GiB free, "
            f"{needed / 1024**3:.1f} GiB needed (set XDG_CACHE_HOME to a larger disk)"
        )


def check_mirror_reachable(mirror: str, timeout: float = 10.0) -> None:
    """Open a TCP connection to the mirror so a missing route fails fast and clearly."""
    parsed = urlparse(mirror)
    if parsed.scheme == "file":
        return
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise PrereqError(f"mirror {mirror!r} is not an http(s):// or file:// URI")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname, port), timeout=timeout):
            pass
    except OSError as exc:
        raise PrereqError(
            f"no route to the package mirror {parsed.hostname}:{port} ({exc}); "
            f"check the network or pass --mirror URI"
        ) from None


def check_root_for_build() -> None:
    """mmdebstrap in root mode and mkfs.ext4 -d need root to keep file ownership."""
    if os.geteuid() != 0:
        raise PrereqError(
            "building the VM image needs root (mmdebstrap must create root-owned "
            "files); run this once as root, e.g. sudo qpconform vm --build-only"
        )


def install_deps() -> int:
    """apt-get update + install of the host packages; needs root."""
    if os.geteuid() != 0:
        print(
            "qpconform vm: --install-deps needs root; run:\n  apt-get update && "
            "apt-get install -y --no-install-recommends " + " ".join(DEBIAN_PACKAGES),
            file=sys.stderr,
        )
        return 1
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    steps = [
        ["apt-get", "update"],
        ["apt-get", "install", "-y", "--no-install-recommends", *DEBIAN_PACKAGES],
    ]
    for cmd in steps:
        print("qpconform vm: " + " ".join(cmd), file=sys.stderr, flush=True)
        rc = subprocess.call(cmd, env=env)
        if rc != 0:
            print(f"qpconform vm: {cmd[0]} {cmd[1]} failed with status {rc}", file=sys.stderr)
            return rc
    return 0
