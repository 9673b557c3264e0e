"""`qpconform run`: the conformance suites against a device, from wherever qpconform is
installed (a wheel on a lab host: no clone needed).

pytest runs the installed `suites` package with the installed plugin (entry point
`pytest11`); the rootdir is the folder holding `suites`, so the plugin knows the suite
tests as in the clone. Records and reports go to --out (default reports/out under the
current folder), never into the installation.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path


class NoSuites(Exception):
    """The suites are not installed beside qpconform (message says so)."""


def suites_dir() -> Path:
    """The installed `suites` package's folder, found without importing it (it sits above
    the CLI: pytest imports it)."""
    spec = importlib.util.find_spec("suites")
    if spec is None or not spec.submodule_search_locations:
        raise NoSuites("the conformance suites (package `suites`) are not installed: "
                       "reinstall the qpconform wheel")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def command(device: str, suites: list[str], pytest_args: list[str]) -> list[str]:
    """The pytest command line: the named suites (test_NAME.py) or all of them."""
    where = suites_dir()
    paths = [str(where / f"test_{name}.py") for name in suites] or [str(where)]
    return [sys.executable, "-m", "pytest", *paths, "--rootdir", str(where.parent),
            "-p", "no:cacheprovider", "--device", device, *pytest_args]


def main(device: str, suites: list[str], out: Path, pytest_args: list[str]) -> int:
    """Run pytest; its exit status is the verdict's (0 conformant, 1 divergences...)."""
    try:
        argv = command(device, suites, pytest_args)
    except NoSuites as exc:
        print(f"qpconform run: {exc}", file=sys.stderr)
        return 4
    env = dict(os.environ, QPCONFORM_OUT_DIR=str(out.resolve()))
    return subprocess.run(argv, env=env).returncode
