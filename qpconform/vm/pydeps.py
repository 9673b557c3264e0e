"""Pure-Python packages Debian lacks, installed on the host for the guest's Python.

``pip install --target`` with ``--python-version`` and ``--only-binary=:all:``
picks wheels for the guest's interpreter; the directory is cached and shared
into the guest (which adds its own bytecode once), where it is on PYTHONPATH.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DEFAULT_PACKAGES = ("allure-pytest", "pytest-xdist", "pytest-timeout", "hypothesis")

# Bump when the pip invocation changes.
RECIPE_VERSION = 2


class PydepsError(Exception):
    """pip could not provide the guest's packages."""


def cache_key(python_version: str, packages: list[str] | tuple[str, ...]) -> str:
    blob = json.dumps(
        {"python": python_version, "packages": sorted(packages), "recipe": RECIPE_VERSION},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def pip_command(
    target: Path, python_version: str, packages: list[str] | tuple[str, ...]
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-warn-script-location",
        "--target",
        str(target),
        "--python-version",
        python_version,
        "--implementation",
        "py",
        "--abi",
        "none",
        "--platform",
        "any",
        "--only-binary=:all:",
        *packages,
    ]


def ensure(
    python_version: str, packages: list[str] | tuple[str, ...], root: Path, rebuild: bool = False
) -> Path:
    """The cached --target directory for these packages, installing it if needed."""
    directory = root / "pydeps" / f"py{python_version}-{cache_key(python_version, packages)}"
    if (directory / ".complete").is_file() and not rebuild:
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
    try:
        print(
            f"qpconform vm: pip install --target for Python {python_version}: "
            + " ".join(packages),
            file=sys.stderr,
            flush=True,
        )
        # The host's pip constraints are for the host, not the guest.
        env = {k: v for k, v in os.environ.items() if k != "PIP_CONSTRAINT"}
        env["PIP_CONSTRAINT"] = ""
        result = subprocess.run(
            pip_command(work, python_version, packages),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        if result.returncode != 0:
            raise PydepsError(
                f"pip install --target for the guest failed (status {result.returncode}):\n"
                + "\n".join(result.stdout.splitlines()[-20:])
                + "\n(use --no-pip to run without these packages)"
            )
        (work / ".complete").write_text(" ".join(packages) + "\n")
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(work, directory)
        return directory
    finally:
        shutil.rmtree(work, ignore_errors=True)
