"""The software RDMA drivers the VM can run, and the driver under test of one run.

A run uses the stock module of the guest kernel (rxe only: Debian does not
build siw), a module built from a source folder (``--driver-src``) or a
prebuilt ``.ko`` (``--module``).  ``DriverUnderTest.identity`` is what the
report shows about it, so nobody mistakes a patched driver for the stock one.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from pathlib import Path

from qpconform.adapters.elf_note import note_build_id


@dataclass(frozen=True)
class DriverSpec:
    """How one software driver is built, loaded and given devices."""

    name: str  #: device family and ``rdma link add ... type NAME``
    module: str  #: kernel module name (``/sys/module/<module>``)
    folder: str  #: where its source lives in a kernel tree
    config: str  #: Kbuild symbol that builds it as a module
    stock: bool  #: whether Debian's kernel ships it


DRIVERS: dict[str, DriverSpec] = {
    "rxe": DriverSpec("rxe", "rdma_rxe", "drivers/infiniband/sw/rxe", "CONFIG_RDMA_RXE", True),
    "siw": DriverSpec("siw", "siw", "drivers/infiniband/sw/siw", "CONFIG_RDMA_SIW", False),
}


class DriverError(Exception):
    """A driver option the user can fix (message names the problem and the fix)."""


def spec(name: str) -> DriverSpec:
    """The spec of driver ``name``; the error lists the known ones."""
    try:
        return DRIVERS[name]
    except KeyError:
        raise DriverError(
            f"unknown driver {name!r}; choose from {', '.join(sorted(DRIVERS))}"
        ) from None


def tree_hash(folder: Path) -> str:
    """sha256 over the names and contents of the C sources, headers and Kbuild files.

    Build products (.o, .ko, .cmd) are left out, so a built folder hashes as
    its source does.
    """
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file() and (
            path.suffix in (".c", ".h") or path.name in ("Makefile", "Kbuild", "Kconfig")
        ):
            digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def elf_build_id(path: Path) -> str:
    """The GNU build id of an ELF64 little-endian file (a .ko), or "" when it has none.

    The kernel shows the same note of a loaded module in
    /sys/module/<name>/notes/.note.gnu.build-id, which proves which file is loaded.
    """
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return ""
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_offset = sections[shstrndx][4]
    for name, _kind, _flags, _addr, offset, size in sections:
        end = data.index(b"\0", names_offset + name)
        if data[names_offset + name : end] == b".note.gnu.build-id":
            return note_build_id(data[offset : offset + size])
    return ""


def find_source_folder(directory: Path, driver: DriverSpec) -> Path:
    """The driver's own folder: ``directory`` itself or its ``folder`` inside a kernel tree."""
    for candidate in (directory, directory / driver.folder):
        if (candidate / "Makefile").is_file() and any(candidate.glob("*.c")):
            return candidate
    raise DriverError(
        f"--driver-src {directory}: no {driver.name} driver source there (expected a Makefile "
        f"and *.c files, in the folder itself or in {driver.folder}); fetch the stock one "
        f"with: qpconform driver-source --driver {driver.name} DEST"
    )


@dataclass
class DriverUnderTest:
    """The driver one VM run loads, and how it got there."""

    spec: DriverSpec
    origin: str = "stock"  #: "stock" or "out-of-tree"
    module_file: Path | None = None  #: the .ko to insmod (None: modprobe the stock one)
    source: str = ""  #: --driver-src folder or --module file, as the user gave it
    source_hash: str = ""  #: tree_hash of the sources, or file_hash of a given .ko
    module_hash: str = ""
    vermagic: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    def identity(self) -> dict[str, str]:
        """Flat strings for the report's identity (``driver_*`` keys)."""
        found = {
            "driver_under_test": self.spec.module,
            "driver_origin": self.origin,
            "driver_source": self.source,
            "driver_source_sha256": self.source_hash,
            "driver_module_sha256": self.module_hash,
            "driver_vermagic": self.vermagic,
            **self.extra,
        }
        return {k: v for k, v in found.items() if v}
