"""The pair suites' deterministic cases on a clean fake pair (no device).

Each case runs to its end with no divergence (so on a real device a failure is the
device's, not the case's), and together they exercise every rule of the wire model
(models/pair.py, models/operations.py) and of the SQD drain: a rule no deterministic case
reaches fails here, by name, instead of going unexercised on every device.
"""

from __future__ import annotations

import contextlib
import inspect
from collections import Counter

import pytest

from models import access, local_access, operations, pair_rules, qkey, shared_cq, srq
from models import rules as ib_rules
from models.enums import QPType
from models.variant import LINUX
from models.wire import WireSettings
from qpconform.engine.connect import FAST
from qpconform.engine.pair import PairHarness
from suites import (
    test_drain,
    test_error_handling,
    test_memory_protection,
    test_operations,
    test_shared_cq,
    test_srq,
)
from tests.fake_pair import FakePair
from tests.rule_log import RuleLog

SUITES = (test_operations, test_error_handling, test_drain, test_srq, test_shared_cq,
          test_memory_protection)
#: Rules the cases must exercise between them, on a device with every feature.
REQUIRED = {
    *(r.id for r in pair_rules.RULES),
    *(r.id for r in operations.RULES),
    *(r.id for r in srq.RULES),
    *(r.id for r in shared_cq.RULES),
    *(r.id for r in access.RULES),
    *(r.id for r in qkey.RULES),
    *(r.id for r in local_access.RULES),
    *(r.id for r in (
        ib_rules.FLUSH_ON_ERROR, ib_rules.DISCARD_ON_RESET, ib_rules.SQD_DRAINED_EVENT,
        ib_rules.SQD_DRAINED_UNASKED, ib_rules.SQD_DRAINED_OUTSIDE_SQD, ib_rules.SQD_DRAINED_ONCE,
        ib_rules.SQD_HOLDS_NEW_SENDS, ib_rules.SQE_ON_SEND_ERROR, ib_rules.ERR_ON_SEND_ERROR,
        ib_rules.ERR_ON_ASYNC_ERROR, ib_rules.MODIFY_NO_EVENT, ib_rules.CQ_NO_OVERRUN,
    )),
}
#: Required rules no deterministic case can reach on a correct device, and why.
UNREACHABLE = {
    "pair.unsignaled.flush_unretired":
        "a race: the fake finishes every WR at once, so no flush is ever unretired; the "
        "rule is consulted (counted) whenever ERR meets a silent WR, see test_watched_rules",
    "srq.resize.below_held":
        "a resize below the receives held is sent to no device (Linux 6.1's rxe frees the "
        "SRQ's queue when it fails): tests/test_srq_sizes.py checks it on the fake",
}


def _pair_maker(log: RuleLog):
    """The suites' make_pair fixture, over clean fake pairs recording into `log`."""

    def make_pair(
        qp_type: QPType, settings: WireSettings = FAST, connect: bool = True,
        srq_sides: tuple[str, ...] = (), shared_cq_sides: tuple[str, ...] = (),
    ):
        fake = FakePair(qp_type, settings=settings, srq_sides=frozenset(srq_sides),
                        shared_cq_sides=frozenset(shared_cq_sides))
        h = PairHarness(fake, settings, recorder=log, sink=log, time_scale=0.01)
        if connect:
            h.lifecycle.connect()
        return h

    return make_pair


def _run(case, kwargs: dict, log: RuleLog) -> None:
    """One case of a pair suite, as pytest would call it on an InfiniBand device."""
    if "variant" in inspect.signature(case).parameters:
        kwargs = {**kwargs, "variant": LINUX}
    case(_pair_maker(log), **kwargs)  # an iWARP-only case skips (reported), as on an IB device


def _calls():
    """Every case of the pair suites: (function, arguments) for each parametrization."""
    for suite in SUITES:
        for name, fn in inspect.getmembers(suite, inspect.isfunction):
            if not name.startswith("test_"):
                continue
            marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
            combos: list[dict] = [{}]
            for mark in marks:
                names = mark.args[0]
                names = [n.strip() for n in (names.split(",") if isinstance(names, str) else names)]
                combos = [
                    {**c, **dict(zip(names, v if len(names) > 1 else (v,), strict=True))}
                    for c in combos for v in mark.args[1]
                ]
            for kwargs in combos:
                label = "-".join(str(getattr(v, "name", v)) for v in kwargs.values())
                where = suite.__name__.split(".")[-1]
                yield pytest.param(fn, kwargs, id=f"{where}::{name}[{label}]")


CASES = list(_calls())


def pair_case_rules() -> Counter[str]:
    """Every case of the pair suites run once on a clean fake: the rules they exercised."""
    log = RuleLog(strict=True)
    for param in CASES:
        with contextlib.suppress(pytest.skip.Exception):
            _run(*param.values, log)
    return log.rules


@pytest.mark.parametrize(("case", "kwargs"), CASES)
def test_the_case_passes_on_a_clean_fake(case, kwargs) -> None:
    _run(case, kwargs, RuleLog(strict=True))


def test_the_cases_exercise_every_wire_and_drain_rule() -> None:
    """Runs the cases itself (an xdist worker may not have run the ones above)."""
    missing = sorted(REQUIRED - set(pair_case_rules()) - set(UNREACHABLE))
    assert not missing, f"no deterministic pair case exercises: {missing}"
