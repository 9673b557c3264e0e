"""The model's rule registry (models/catalog.py) leaves no declared rule out.

The catalogue is built from the `RULES` tuple of each model module, so a rule
added to a module but not to its tuple would silently drop out of reports and
of the quirk files' check. Here, and only here, module globals are scanned.
"""

from __future__ import annotations

from types import ModuleType

import pytest

from models import catalog, pair, pair_checks, readback, rules, uverbs
from models.sources import Rule


def _declared(module: ModuleType) -> set[str]:
    """The ids of the Rule objects a module defines at top level (not imports)."""
    return {
        v.id
        for name, v in vars(module).items()
        if isinstance(v, Rule) and not name.startswith("_")
    }


@pytest.mark.parametrize("module", [rules, pair, readback, uverbs, pair_checks],
                         ids=lambda m: m.__name__)
def test_every_declared_rule_is_in_its_modules_rules_tuple(module: ModuleType) -> None:
    assert {r.id for r in module.RULES} == _declared(module)


def test_all_rules_has_every_variant_and_the_pair_checks() -> None:
    found = catalog.all_rules()
    for name in ("linux", "ibta", "iwarp"):
        assert set(catalog.variant_rules(name)) <= set(found)
    assert {r.id for r in pair_checks.RULES} <= set(found)
    assert not {r.id for r in pair_checks.RULES} & set(catalog.variant_rules("linux"))
