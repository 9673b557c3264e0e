"""The import contracts can fail: pyproject.toml's own contracts, run on a skeleton of the
house with one planted import each, break exactly where the plant is.

`lint-imports` in scripts/test.sh proves the tree keeps the contracts; these prove a layer
jumped, a file circle (a TYPE_CHECKING one too), pyverbs outside the adapters or pytest in
the engine would be caught, so a contract weakened until it cannot fail shows up here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytest.importorskip("importlinter", reason="import-linter is a dev extra: pip install -e '.[dev]'")

ROOT = Path(__file__).resolve().parent.parent
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
LINT = Path(sys.executable).with_name("lint-imports")

#: Modules of the skeleton that are files, not packages (the rest named in the contracts are
#: packages).
FILES = {"qpconform.__main__", "qpconform.bench_guest", "qpconform.cli", "qpconform.soak",
         "qpconform.bench", "qpconform.run_suites"}


def _named_modules() -> set[str]:
    names: set[str] = set(CONFIG["root_packages"])
    for contract in CONFIG["contracts"]:
        for layer in contract.get("layers", []):
            names.update(m.strip() for m in layer.replace(":", "|").split("|"))
        names.update(contract.get("source_modules", []))
        names.update(contract.get("ancestors", []))
    return {n for n in names if n.split(".")[0] in CONFIG["root_packages"]}


def _skeleton(base: Path, plants: dict[str, str]) -> Path:
    """Every module the contracts name, empty, plus `plants` (module -> source)."""
    for name in sorted(_named_modules()):
        parts = name.split(".")
        for i in range(1, len(parts) + (name not in FILES)):
            package = base.joinpath(*parts[:i])
            package.mkdir(exist_ok=True)
            (package / "__init__.py").touch()
        if name in FILES:
            base.joinpath(*parts[:-1], parts[-1] + ".py").touch()
    for name, source in plants.items():
        base.joinpath(*name.split(".")).with_suffix(".py").write_text(source)
    lines = ["[tool.importlinter]",
             f"root_packages = {CONFIG['root_packages']!r}",
             "include_external_packages = true"]
    toml = "\n".join(lines) + "\n"
    for contract in CONFIG["contracts"]:
        toml += "\n[[tool.importlinter.contracts]]\n" + "".join(
            f"{key} = {_toml(value)}\n" for key, value in contract.items())
    (base / "pyproject.toml").write_text(toml)
    return base


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return '"' + str(value).replace('"', '\\"') + '"'


def _lint(base: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(base))
    return subprocess.run([str(LINT), "--no-logo", "--no-cache", "pyproject.toml"], cwd=base,
                          env=env, capture_output=True, text=True, timeout=120)


def test_the_skeleton_keeps_every_contract(tmp_path: Path) -> None:
    result = _lint(_skeleton(tmp_path, {}))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(CONFIG['contracts'])} kept, 0 broken." in result.stdout


@pytest.mark.parametrize(("plants", "broken", "names"), [
    ({"models.spec": "import qpconform.engine\n"}, "one stack", "models.spec -> qpconform.engine"),
    ({"qpconform.engine.judge": "import reports\n"}, "one stack", "qpconform.engine.judge"),
    ({"qpconform.vm.boot": "import fixtures\n"}, "one stack", "qpconform.vm.boot -> fixtures"),
    # the CLI's jobs sit beside the plugin, not on it
    ({"qpconform.soak": "import fixtures\n"}, "one stack", "qpconform.soak -> fixtures"),
    ({"qpconform.adapters.a": "import qpconform.adapters.b\n",
      "qpconform.adapters.b": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    import qpconform.adapters.a\n"},
     "no file circle", "qpconform.adapters"),
    ({"models.a": "import models.b\n", "models.b": "import models.a\n"},
     "no file circle", "models"),
    ({"fixtures.open": "import pyverbs\n"}, "only the device adapters import pyverbs",
     "fixtures.open -> pyverbs"),
    ({"qpconform.engine.core": "import pytest\n"}, "without", "qpconform.engine.core -> pytest"),
])
def test_a_planted_import_breaks_its_contract(
    tmp_path: Path, plants: dict[str, str], broken: str, names: str
) -> None:
    result = _lint(_skeleton(tmp_path, plants))
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "1 broken" in out, out
    section = out.split("Broken contracts", 1)[1]
    assert broken in section and names in section, out
