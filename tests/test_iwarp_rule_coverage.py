"""Every applicable rule on every run, under the iwarp variant (issue 24): the deterministic
cases on clean siw-like fakes exercise every rule that applies to siw.

The lone suites (transitions, attributes, posts, and the create of each type iWARP lacks)
run on a siw-like FakeDevice; the pair cases marked iwarp_pair run on a clean iWARP fake
pair. Every rule of the iwarp variant that applies to an RC-only device without atomics
(models/catalog.py why_not() says "not_reached" when a run never exercised it) must be
exercised by one of them, or be listed below with the reason: a rule no deterministic case
reaches fails here by name instead of going unexercised on every siw run.
"""

from __future__ import annotations

import contextlib
import inspect
from collections import Counter

import pytest

from models import catalog
from models.capabilities import Capabilities
from models.enums import QPType
from models.variant import variant as parse_variant
from qpconform.engine.connect import FAST
from qpconform.engine.lone import Checker
from qpconform.engine.pair import PairHarness
from suites import test_transitions
from tests.fake_device import IWARP_STYLES, SIW_CAPS, FakeDevice
from tests.fake_pair import FakePair
from tests.rule_log import RuleLog
from tests.sequences import run_suites
from tests.test_pair_suites_fake import CASES

IWARP = parse_variant("iwarp")
RC = [QPType.RC]
#: siw: RC only, no atomics (atomic_cap NONE).
SIW_CAPABILITIES = Capabilities.of(IWARP, ["ATOMICS"])
#: Applicable rules no deterministic case reaches on a correct device, and why.
EXCLUDED: dict[str, str] = {
    "iwarp.query.state": "query_qp as a verb of its own: only the stateful lone machine "
                         "calls it; the cases read the state back within each modify",
    "srq.resize.below_held": "a resize below the receives held is sent to no device (Linux "
                             "6.1's rxe frees the SRQ's queue when it fails): "
                             "tests/test_srq_sizes.py checks it on the fake",
}


def _lone(log: RuleLog) -> None:
    device = FakeDevice(variant="iwarp", caps=SIW_CAPS, qp_types=RC, **IWARP_STYLES["siw-like"])
    checker = Checker(device, "iwarp", recorder=log, settle_window=0.0, must_wait=0.0,
                      sink=log)
    run_suites(checker, device, "iwarp", RC)
    test_transitions.test_types_the_variant_lacks_are_refused(checker, IWARP)
    checker.close()
    assert not device.live


def _pairs(log: RuleLog) -> None:
    def make_pair(qp_type: QPType, settings=FAST, connect: bool = True,
                  srq_sides: tuple[str, ...] = (), shared_cq_sides: tuple[str, ...] = ()):
        fake = FakePair(qp_type, settings=settings, iwarp=True, srq_sides=frozenset(srq_sides),
                        shared_cq_sides=frozenset(shared_cq_sides))
        h = PairHarness(fake, settings, recorder=log, sink=log, time_scale=0.01,
                        variant="iwarp")
        if connect:
            h.lifecycle.connect()
        return h

    for param in CASES:
        case, kwargs = param.values
        marks = {m.name for m in getattr(case, "pytestmark", [])}
        if "iwarp_pair" not in marks or kwargs.get("qp_type", QPType.RC) is not QPType.RC:
            continue
        if "variant" in inspect.signature(case).parameters:
            kwargs = {**kwargs, "variant": IWARP}
        with contextlib.suppress(pytest.skip.Exception):
            case(make_pair, **kwargs)


@pytest.fixture(scope="module")
def exercised() -> Counter[str]:
    log = RuleLog(strict=True)
    _lone(log)
    _pairs(log)
    return log.rules + log.chosen


def applicable() -> set[str]:
    return {
        rule_id
        for rule_id, rule in catalog.variant_rules(IWARP, ["RC"]).items()
        if catalog.why_not(rule, RC, SIW_CAPABILITIES) == catalog.NOT_REACHED
    }


def test_every_applicable_iwarp_rule_is_exercised_by_a_case(exercised: Counter[str]) -> None:
    missing = sorted(applicable() - set(exercised) - set(EXCLUDED))
    assert not missing, f"no deterministic case exercises under iwarp: {missing}"


def test_the_exclusions_still_apply_and_are_not_reached(exercised: Counter[str]) -> None:
    assert set(EXCLUDED) <= applicable()
    assert not [r for r in EXCLUDED if exercised[r]]
