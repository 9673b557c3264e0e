"""The operations suite's cases on a clean fake pair (no device): each runs to its end with
no divergence, so on a real device a failure is the device's, not the case's."""

from __future__ import annotations

import inspect

import pytest

from models.enums import QPType
from models.pair import WireSettings
from qpconform.engine.connect import FAST
from qpconform.engine.pair import PairHarness
from suites import test_operations as suite
from tests.fake_pair import FakePair


def _make_pair(qp_type: QPType, settings: WireSettings = FAST, connect: bool = True):
    h = PairHarness(FakePair(qp_type, settings=settings), settings, sink=None, time_scale=0.01)
    if connect:
        h.connect()
    return h


def _calls():
    """Every case of the suite: (test name, arguments) for each parametrization."""
    for name, fn in inspect.getmembers(suite, inspect.isfunction):
        if not name.startswith("test_"):
            continue
        marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
        combos: list[dict] = [{}]
        for mark in marks:
            names = [n.strip() for n in (mark.args[0].split(",") if isinstance(mark.args[0], str)
                                         else mark.args[0])]
            combos = [
                {**c, **dict(zip(names, v if len(names) > 1 else (v,), strict=True))}
                for c in combos for v in mark.args[1]
            ]
        for kwargs in combos:
            yield pytest.param(fn, kwargs, id=f"{name}[{'-'.join(map(str, kwargs.values()))}]")


@pytest.mark.parametrize(("case", "kwargs"), list(_calls()))
def test_the_case_passes_on_a_clean_fake(case, kwargs) -> None:
    case(_make_pair, **kwargs)
