"""Put the driver under test of one run on the control share.

``--driver NAME`` picks the driver (rxe, siw); ``--driver-src DIR`` builds it
from a source folder against the guest kernel's headers; ``--module FILE.ko``
takes a module built elsewhere (its vermagic must match the guest kernel).
A driver Debian does not ship (siw) without either is built from the stock
source of the guest kernel.  Built modules are cached by source hash, so a
second run of the same source boots at once.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from qpconform.vm import buildenv, image
from qpconform.vm.drivers import (
    DRIVERS,
    DriverError,
    DriverSpec,
    DriverUnderTest,
    elf_build_id,
    file_hash,
    find_source_folder,
    spec,
    tree_hash,
)

#: Where the control share is mounted in the guest (qpconform/vm/guest_init.sh).
CTL_IN_GUEST = "/run/qpconform/ctl"
ENV_NAME = "QPCONFORM_DRIVER_UNDER_TEST"


def _note(msg: str) -> None:
    print(f"qpconform vm: {msg}", file=sys.stderr, flush=True)


def validate(
    driver: str, driver_src: Path | None, module: Path | None, kernel: Path | None
) -> None:
    """Option checks that need no image."""
    spec(driver)
    if driver_src is not None and module is not None:
        raise DriverError("give --driver-src DIR or --module FILE.ko, not both")
    if (driver_src is not None or module is not None) and kernel is not None:
        raise DriverError(
            "--driver-src and --module are built for the image's own kernel; with --kernel, "
            "put the module in the --modules tree instead"
        )
    if driver_src is not None and not driver_src.is_dir():
        raise DriverError(f"--driver-src {driver_src}: no such directory")
    if module is not None and not module.is_file():
        raise DriverError(f"--module {module}: no such file")


def _module_cache(root: Path, meta: dict) -> Path:
    return root / "modules" / f"{meta['release']}-{meta['kernel_release']}"


def build_from_source(
    driver: DriverSpec, folder: Path, img: image.Image, root: Path
) -> tuple[Path, str]:
    """The .ko for ``folder`` built against the image's kernel (cached by source hash)."""
    meta = img.meta
    digest = tree_hash(folder)
    cached = _module_cache(root, meta) / f"{driver.name}-{digest[:16]}" / f"{driver.module}.ko"
    if cached.is_file():
        _note(f"{driver.module}.ko of this source already built (cache {cached.parent})")
        return cached, digest
    env = buildenv.for_image(img, root)
    _note(f"building {driver.module}.ko from {folder} against {meta['kernel_release']}")
    built = buildenv.build_module(env, folder, driver, cached.parent)
    _note(f"built {driver.module}.ko in {built.seconds:.1f} s")
    return built.path, digest


def stock_source(driver: DriverSpec, img: image.Image, root: Path) -> Path:
    """The guest kernel's own source of ``driver``, fetched once into the cache."""
    meta = img.meta
    env = buildenv.for_image(img, root)
    sources = _module_cache(root, meta) / "source"
    folder = sources / driver.name
    if not folder.is_dir():  # one download gives every known driver's folder
        missing = [d for d in DRIVERS.values() if d != driver and not (sources / d.name).exists()]
        buildenv.fetch_source(env, driver, sources, *missing)
    return folder


def prepare(
    driver_name: str,
    driver_src: Path | None,
    module: Path | None,
    img: image.Image,
    root: Path,
    ctl: Path,
) -> DriverUnderTest:
    """Copy the module (if any) and driver.json to the control share; returns the identity."""
    driver = spec(driver_name)
    meta = img.meta
    dut = DriverUnderTest(driver)
    if driver_src is not None:
        folder = find_source_folder(driver_src.resolve(), driver)
        ko, dut.source_hash = build_from_source(driver, folder, img, root)
        dut.origin, dut.source = "out-of-tree", str(folder)
    elif module is not None:
        ko = module.resolve()
        dut.origin, dut.source, dut.source_hash = "out-of-tree", str(ko), file_hash(ko)
    elif not driver.stock:
        folder = stock_source(driver, img, root)
        ko, dut.source_hash = build_from_source(driver, folder, img, root)
        label = (
            (folder / ".qpconform-source").read_text().split()[0]
            if (folder / ".qpconform-source").is_file()
            else str(folder)
        )
        dut.origin, dut.source = "out-of-tree", f"stock source {label}"
    else:
        ko = None
    if ko is not None:
        dut.vermagic = buildenv.check_vermagic(ko, meta["kernel_release"])
        dut.module_hash = file_hash(ko)
        dut.extra["driver_build_id"] = elf_build_id(ko)
        (ctl / "driver").mkdir(exist_ok=True)
        shutil.copy2(ko, ctl / "driver" / ko.name)
        dut.module_file = Path(CTL_IN_GUEST) / "driver" / ko.name
    (ctl / "driver.json").write_text(json.dumps(dut.identity(), indent=2) + "\n")
    shutil.copy2(Path(__file__).with_name("guest_devices.sh"), ctl / "devices.sh")
    return dut


def config(dut: DriverUnderTest) -> dict[str, str]:
    """The config.sh variables of the guest device setup."""
    return {
        "DRIVER": dut.spec.name,
        "DRIVER_MODULE": dut.spec.module,
        "DRIVER_KO": str(dut.module_file or ""),
    }


def describe(dut: DriverUnderTest) -> str:
    if dut.origin == "stock":
        return f"stock {dut.spec.module}"
    return f"{dut.spec.module} out of tree from {dut.source} (sha256 {dut.source_hash[:12]})"
