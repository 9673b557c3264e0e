"""The package as a user installs it: a wheel in a fresh venv, run from outside the clone.

Catches a shipped module that imports the test files (suites/, tests/), a package or a
data file missing from pyproject, and a CLI that only works from the clone's folder.
Dependencies (pytest, Hypothesis, Jinja2...) come from this interpreter's
site-packages through a .pth line, so the test needs no network; qpconform itself
comes from the wheel only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from reports.run_record import RunRecorder
from tests.fake_device import FakeDevice
from tests.remote_fake import listening

ROOT = Path(__file__).resolve().parent.parent


#: The wheel is built and installed in a fresh venv once for the module (tens of seconds):
#: CI's full set runs these, the everyday loop leaves them out.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel built from this clone installed (no deps: see above)."""
    base = tmp_path_factory.mktemp("wheel")
    # a copy of the sources: setuptools' build/ in the clone would keep deleted modules
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "out", "*.egg-info", "__pycache__", ".hypothesis",
        ".scratch*", ".*_cache"))
    dist = base / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(dist), str(source)],
        check=True, cwd=base, capture_output=True, text=True,
    )
    (wheel,) = dist.glob("qpconform-*.whl")
    env_dir = base / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip())
    # the wheel, unpacked where pip would put it (pip's own install needs a pip in the venv)
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(site), str(wheel)], check=True, capture_output=True, text=True)
    deps = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    (site / "_qpconform_deps.pth").write_text("".join(f"{p}\n" for p in deps))
    return env_dir


def _run(env_dir: Path, cwd: Path, *args: str,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "QPCONFORM_OUT_DIR", "QPCONFORM_EXECUTORS")
           and not k.startswith("PYTEST_XDIST")}
    return subprocess.run([str(env_dir / "bin" / "python"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_the_installed_package_is_the_wheel_and_imports_no_test_files(
    installed: Path, tmp_path: Path
) -> None:
    code = ("import sys, qpconform, qpconform.bench, qpconform.machines.lone, "
            "qpconform.machines.pair, fixtures.plugin, reports.html, qpconform.vm.runner, "
            "qpconform.mutants.run; "
            "print(qpconform.__file__); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('suites', 'tests')))")
    result = _run(installed, tmp_path, "-c", code)
    assert result.returncode == 0, result.stderr
    where, test_modules = result.stdout.splitlines()
    assert Path(where).is_relative_to(installed), where  # not the clone
    assert test_modules == "[]"


def test_the_wheel_installs_only_the_design_cards_packages(installed: Path) -> None:
    site = next(installed.glob("lib/python*/site-packages"))
    tops = sorted(p.name for p in site.iterdir()
                  if p.is_dir() and (p / "__init__.py").is_file())
    assert tops == ["fixtures", "models", "qpconform", "reports", "suites"]
    assert (site / "qpconform" / "mutants" / "run.py").is_file()
    assert (site / "qpconform" / "vm" / "guest_init.sh").is_file()  # the guest's data too
    assert (site / "fixtures" / "windows.toml").is_file()
    # the mutant catalogue's patches, kernel series folders and all
    shipped = sorted(p.relative_to(site) for p in (site / "qpconform" / "mutants").rglob("*.patch"))
    ours = sorted(p.relative_to(ROOT) for p in (ROOT / "qpconform" / "mutants").rglob("*.patch"))
    assert shipped == ours and ours


def test_pytest_finds_the_plugin_by_its_entry_point(installed: Path, tmp_path: Path) -> None:
    result = _run(installed, tmp_path, "-m", "pytest", "--help")
    assert result.returncode == 0, result.stderr
    assert "--device" in result.stdout and "--quirks" in result.stdout  # the plugin's options


@pytest.mark.parametrize(("faults", "status", "verdict"), [
    ((), 0, "qpconform verdict for fake0: CONFORMANT"),
    (("accept_illegal_transition",), 1, "NOT CONFORMANT"),  # the gate can fail from the wheel
])
def test_qpconform_run_runs_a_suite_from_the_wheel_against_the_fake_device(
    installed: Path, tmp_path: Path, faults: tuple[str, ...], status: int, verdict: str
) -> None:
    sock = tmp_path / "executor.sock"
    with listening(FakeDevice(list(faults)), str(sock)):
        result = _run(installed, tmp_path, "-m", "qpconform", "run", "--device", "fake0",
                      "--suite", "transitions", "--out", "out", "--",
                      "--executor", str(sock), "--hypothesis-profile", "ci", "-q", "-k", "RC",
                      timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == status, out[-3000:]
    assert verdict in out, out[-3000:]
    assert (tmp_path / "out" / "run-host-main.json").is_file()  # here, not in the venv


@pytest.mark.parametrize("command", [["bench", "--help"], ["vm", "--help"]])
def test_the_cli_helps_from_outside_the_clone(
    installed: Path, tmp_path: Path, command: list[str]
) -> None:
    result = _run(installed, tmp_path, "-m", "qpconform", *command)
    assert result.returncode == 0, result.stderr
    assert f"usage: qpconform {command[0]}" in result.stdout


def test_the_report_of_a_recorded_run_from_outside_the_clone(
    installed: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    rec = RunRecorder({"device": "rxe0", "driver": "rdma_rxe"}, {"variant": "linux",
                                                                 "qp_types": ["RC"]})
    rec.step("RC", "modify", "RESET", "INIT", ["ibta.modify.reset_to_init"], "match")
    rec.write(run / "run-main.json")
    result = _run(installed, tmp_path, "-m", "qpconform", "report", "--input", str(run),
                  "--output", str(tmp_path / "out"))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["device_name"] == "rxe0" and report["identity"]["driver"] == "rdma_rxe"
    assert "<html" in (tmp_path / "out" / "report.html").read_text().lower()  # templates shipped
