"""pyverbs_compat: enum lookup across pyverbs layouts, errno extraction, missing pyverbs."""

import enum
import sys
import types
from collections.abc import Iterator

import pytest

from qpconform.adapters import pyverbs_compat as pc
from qpconform.adapters.identity import driver_family
from qpconform.engine.device import UsageError

_MODULES = ("device", "pd", "cq", "mr", "qp", "addr", "wr", "pyverbs_error")


@pytest.fixture
def fake_pyverbs(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, types.ModuleType]]:
    """A pyverbs made of empty modules; the test adds the enums module it wants."""
    mods = {"pyverbs": types.ModuleType("pyverbs")}
    for name in _MODULES:
        mods[f"pyverbs.{name}"] = types.ModuleType(f"pyverbs.{name}")
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    for name in ("pyverbs.enums", "pyverbs.libibverbs_enums", "pyverbs.xrcd"):
        monkeypatch.setitem(sys.modules, name, None)  # None in sys.modules: ImportError
    pc.load.cache_clear()
    yield mods
    pc.load.cache_clear()


def test_flat_names_of_pyverbs_enums(fake_pyverbs, monkeypatch) -> None:
    flat = types.ModuleType("pyverbs.enums")
    flat.IBV_PORT_ACTIVE = 4
    monkeypatch.setitem(sys.modules, "pyverbs.enums", flat)
    assert pc.const("IBV_PORT_ACTIVE") == 4


def test_enum_classes_of_libibverbs_enums(fake_pyverbs, monkeypatch) -> None:
    mod = types.ModuleType("pyverbs.libibverbs_enums")

    class ibv_wr_opcode(enum.IntEnum):
        IBV_WR_SEND = 2

    mod.ibv_wr_opcode = ibv_wr_opcode
    monkeypatch.setitem(sys.modules, "pyverbs.libibverbs_enums", mod)
    assert pc.const("IBV_WR_SEND") == 2
    assert pc.const("IBV_SEND_SIGNALED") == 2  # not in the module: the ABI fallback


def test_no_enums_module_falls_back(fake_pyverbs) -> None:
    assert pc.load().enums is None
    assert pc.const("IBV_LINK_LAYER_ETHERNET") == 2


def test_missing_pyverbs_is_a_usage_error(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pyverbs", None)
    monkeypatch.setitem(sys.modules, "pyverbs.device", None)
    pc.load.cache_clear()
    try:
        with pytest.raises(UsageError, match="apt-get install python3-pyverbs"):
            pc.load()
        assert not pc.available()
    finally:
        pc.load.cache_clear()


@pytest.mark.parametrize(
    ("code", "expected"), [(95, 95), (-1, None), ("x", None), (None, None), (0, None)]
)
def test_error_code(code, expected) -> None:
    exc = Exception("boom")
    exc.error_code = code  # type: ignore[attr-defined]
    assert pc.error_code(exc) == expected


@pytest.mark.parametrize(
    ("name", "family"), [("rxe0", "rxe"), ("mlx5_0", "mlx5"), ("siw12", "siw"), ("efa_1", "efa")]
)
def test_driver_family(name, family) -> None:
    assert driver_family(name) == family
