"""Shared by the self-tests that boot the VM: the opt-in marker and one guest run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

#: VM tests run only when asked (CI sets it): each boots QEMU, minutes under TCG.
VM_ONLY = [
    pytest.mark.vm,
    pytest.mark.skipif(
        os.environ.get("QPCONFORM_VM_TESTS") not in ("1", "all"),
        reason="boots a QEMU VM (minutes on TCG): set QPCONFORM_VM_TESTS=1 to run (=all: "
        "also the variants CI's other phases cover)",
    ),
]


def out_dir(name: str) -> Path:
    """A fresh output folder under the project (the guest sees only the project)."""
    out = REPO / "reports" / "out" / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    return out


def run_in_vm(
    out: Path, script: str, *options: str, driver: str | None = None, timeout: int = 900
) -> subprocess.CompletedProcess:
    """`qpconform vm OPTIONS -- sh -c SCRIPT` with the run's records and logs in ``out``;
    prints the tail of its output (shown when the test fails). ``driver`` adds
    ``--driver NAME`` (e.g. siw); ``timeout`` bounds the guest command (seconds)."""
    cmd = [
        sys.executable,
        "-m",
        "qpconform",
        "vm",
        *(("--driver", driver) if driver else ()),
        *options,
        "--env",
        f"QPCONFORM_OUT_DIR={out}",
        "--log-dir",
        str(out),
        "--timeout",
        str(timeout),
        "--",
        "sh",
        "-c",
        script,
    ]
    result = subprocess.run(
        cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout + 300
    )
    print(result.stdout[-5000:])
    print(result.stderr[-2000:], file=sys.stderr)
    return result
