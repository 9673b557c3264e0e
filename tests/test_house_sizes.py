"""The shipped code stays readable: no module over 500 lines, no class over 30 methods.

A class's count is every method (properties included) it has from itself and from the
project's own base classes, which is what a reader must hold in mind to change it; a part
it composes counts for itself. Hypothesis' and the standard library's bases are not
counted. Going over is a signal to split by job (a new part, a new module), not to raise
the limit.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ("models", "qpconform", "reports", "fixtures", "suites")
MAX_LINES = 500
MAX_METHODS = 30


def shipped_files() -> list[Path]:
    return sorted(p for pkg in SHIPPED for p in (ROOT / pkg).rglob("*.py"))


def shipped_modules() -> list[str]:
    names = []
    for pkg in SHIPPED:
        names.append(pkg)
        for info in pkgutil.walk_packages([str(ROOT / pkg)], prefix=f"{pkg}."):
            if not info.name.endswith("__main__"):
                names.append(info.name)
    return names


def _is_method(value: object) -> bool:
    return inspect.isfunction(value) or isinstance(value, (property, staticmethod, classmethod))


def method_count(cls: type) -> int:
    """Methods of `cls` and of its bases from the shipped packages, each name once."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] in SHIPPED:
            names |= {n for n, v in vars(klass).items() if _is_method(v)}
    return len(names)


def shipped_classes() -> list[type]:
    found = []
    for name in shipped_modules():
        module = importlib.import_module(name)
        found += [v for v in vars(module).values()
                  if inspect.isclass(v) and v.__module__ == name]
    return found


def test_no_shipped_module_is_over_500_lines() -> None:
    over = {str(p.relative_to(ROOT)): n for p in shipped_files()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines (split them by job): {over}"


def test_no_shipped_class_has_over_30_methods() -> None:
    classes = shipped_classes()
    assert len(classes) > 100  # the walk found the house, not an empty tree
    over = {f"{c.__module__}.{c.__qualname__}": n for c in classes
            if (n := method_count(c)) > MAX_METHODS}
    assert not over, f"classes over {MAX_METHODS} methods (compose them of parts): {over}"


def test_the_count_includes_the_projects_own_bases_and_mixins() -> None:
    """Methods a mixin brings count: a mixin is not a way under the limit."""
    from qpconform.engine.core import Engine
    from qpconform.engine.lone import Checker

    own = {n for n, v in vars(Checker).items() if _is_method(v)}
    assert method_count(Checker) > len(own)
    assert method_count(Checker) == len(own | {n for n, v in vars(Engine).items()
                                               if _is_method(v)})


def test_a_class_one_method_over_is_counted_over() -> None:
    methods = {f"m{i}": (lambda self: None) for i in range(MAX_METHODS + 1)}
    big = type("Big", (), {**methods, "__module__": "qpconform.example"})
    assert method_count(big) == MAX_METHODS + 1
