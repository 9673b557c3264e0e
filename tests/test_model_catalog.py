"""The model's rule registry (models/catalog.py) leaves no declared rule out.

The catalogue is built from the `RULES` tuple of each model module, so a rule
added to a module but not to its tuple would silently drop out of reports and
of the quirk files' check. Here, and only here, module globals are scanned.
"""

from __future__ import annotations

import ast
import inspect
from types import ModuleType

import pytest

from models import (
    access,
    catalog,
    iwarp_pair,
    pair_checks,
    pair_rules,
    readback,
    rules,
    shared_cq,
    uverbs,
)
from models.sources import Rule


def _declared(module: ModuleType) -> set[str]:
    """The ids of the Rule objects a module assigns at top level (`NAME = Rule(...)`, not
    the ones it imports)."""
    tree = ast.parse(inspect.getsource(module))
    names = {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name) and not target.id.startswith("_")
    }
    return {v.id for name, v in vars(module).items() if name in names and isinstance(v, Rule)}


@pytest.mark.parametrize("module", [rules, pair_rules, readback, uverbs, pair_checks, iwarp_pair,
                                    shared_cq, access],
                         ids=lambda m: m.__name__)
def test_every_declared_rule_is_in_its_modules_rules_tuple(module: ModuleType) -> None:
    assert {r.id for r in module.RULES} == _declared(module)


def test_all_rules_has_every_variant_and_the_pair_checks() -> None:
    found = catalog.all_rules()
    for name in ("linux", "ibta", "iwarp"):
        assert set(catalog.variant_rules(name)) <= set(found)
    assert {r.id for r in pair_checks.RULES} <= set(found)
    assert {r.id for r in iwarp_pair.RULES} <= set(found)  # a siw quirk may name them
    assert not {r.id for r in pair_checks.RULES} & set(catalog.variant_rules("linux"))
