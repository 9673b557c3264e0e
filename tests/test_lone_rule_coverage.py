"""Every applicable rule on every run (issue 24): the deterministic lone cases on a clean fake.

Every case of the transition, attribute and post suites (suites/cases.py, run by
suites/steps.py exactly as the suites run them) goes through the checker
(qpconform/engine/lone.py) on a fake lone device with the capabilities of SoftRoCE (rxe):
one RoCE port, RD atomic depths of 128, RC, UC and UD QPs, no SQE. A recorder collects
the rules each step checked (what the run record counts, reports/qualification.py
coverage()). Every rule of the linux variant that applies to such a device
(models/catalog.py why_not() says "not_reached" when a run never exercised it) must be
exercised by at least one case, or be listed below with the reason no lone case can
reach it: a rule no deterministic case reaches fails here, by name, instead of going
unexercised on every device.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from models import (
    access,
    catalog,
    local_access,
    operations,
    pair_rules,
    qkey,
    shared_cq,
    srq,
    srq_sizes,
    unused_fields,
)
from models.attributes import DeviceCaps
from models.capabilities import Capabilities
from models.enums import MTU, QPType
from models.variant import LINUX
from qpconform.engine.lone import Checker
from suites import steps
from suites.cases import attribute_groups, post_groups, transition_groups
from tests.fake_device import FakeDevice
from tests.rule_log import RuleLog

T = QPType
TYPES = (T.RC, T.UC, T.UD)
#: What SoftRoCE (rxe) reports: one RoCE port, RD atomic depths of 128, a 1024 netdev MTU.
RXE_LIKE = DeviceCaps(
    link_layer="ethernet", phys_port_cnt=1, max_qp_rd_atom=128, max_qp_init_rd_atom=128,
    active_mtu=MTU.MTU_1024, max_mtu=MTU.MTU_4096,
)
#: rxe has no SQE (fixtures/quirks/rxe.toml) and neither XRC nor RAW_PACKET QPs.
RXE_CAPABILITIES = Capabilities.of(LINUX, ["SQE", "XRC", "RAW_PACKET"])

#: Every rule of the wire model needs a peer: the pair suites reach them all
#: (tests/test_pair_suites_fake.py requires each one).
PAIR_ONLY = {r.id for r in (*pair_rules.RULES, *operations.RULES, *srq.RULES, *shared_cq.RULES,
                              *access.RULES, *qkey.RULES, *unused_fields.RULES,
                              *srq_sizes.RULES, *local_access.RULES)}
#: The other applicable rules no lone case can reach, each with the reason.
EXCLUDED: dict[str, str] = {
    "ibta.send.complete": "a send completes successfully only with a peer: the pair suites",
    "ibta.recv.complete": "a receive completes only when a peer sends: the pair suites",
    "ibta.post_send.RTS": "post_send in RTS needs a peer: the post suite skips it "
                          "(POST_SEND_SKIP), the traffic suite posts",
    "ibta.sqd.hold": "post_send in SQD needs a peer (POST_SEND_SKIP): the drain suite",
    "ibta.sqd.drained_event.unasked": "watched while a send queue drains: the drain suite",
    "ibta.sqd.drained_event.outside_sqd": "watched around a drain with WRs in flight: the "
                                          "drain suite",
    "ibta.sqd.drained_event.once": "a second SQ_DRAINED needs a drain that ends: the drain "
                                   "suite",
    "ibta.cq.no_overrun": "watched while completions arrive on a pair's CQs: the pair suites",
    "ibta.err.send_error": "a send completing in error needs a peer to fail against: the "
                           "error-handling suite",
    "ibta.err.async_error": "an asynchronous error comes from the wire: the error-handling "
                            "suite",
    "ibta.destroy.discard": "the lone checker stops watching a QP at destroy_qp and notes no "
                            "step for it; the pair harness notes each destroy",
    "ibta.query.state": "query_qp as a verb of its own: only the stateful lone machine "
                        "(qpconform/machines/lone.py) calls it; the cases read the state back "
                        "within each modify",
    "ibta.err.recv_error": "a lone QP receives nothing: the pair suites reach it (an RC "
                           "SEND longer than the receive, pair.rc.recv_too_short)",
}
#: The exclusions the pair suites must reach (the rest: the stateful machine, or nobody).
NOT_BY_PAIRS = {"ibta.query.state"}


def lone_rules(caps: DeviceCaps = RXE_LIKE) -> Counter[str]:
    """Run every deterministic lone case of the linux variant on a clean fake with `caps`,
    as suites/test_transitions.py, test_attributes.py and test_post_rules.py run them;
    the rules their steps checked."""
    device = FakeDevice(caps=caps, qp_types=TYPES)
    log = RuleLog()
    checker = Checker(device, LINUX, recorder=log, settle_window=0.0, must_wait=0.0,
                      sink=log)

    def modify(qp: Any, case: Any) -> None:
        steps.run_modify_case(qp, device, case)

    suites = (
        (transition_groups, modify, None, True),  # test_transition
        (attribute_groups, modify, caps, True),  # test_attribute
        (post_groups, steps.run_post_case, None, False),  # test_post
    )
    failed = []
    for groups, body, group_caps, reuse in suites:
        for group in groups(LINUX, TYPES):
            if group.skip is not None:
                continue
            try:
                steps.run_group(checker, group, body, caps=group_caps, reuse_refused=reuse)
            except pytest.skip.Exception:
                continue  # a value the device's C field cannot hold: skipped on a device too
            except pytest.fail.Exception as exc:
                failed.append(f"{group.id}: {exc}")
    assert not failed, f"a clean fake diverged: {failed[:3]}"
    assert not log.divergences
    assert not device.live
    return log.rules


def applicable(capabilities: Capabilities = RXE_CAPABILITIES) -> set[str]:
    """The linux rules a run on RC, UC and UD with `capabilities` is expected to exercise."""
    names = [t.name for t in TYPES]
    return {
        rule_id
        for rule_id, rule in catalog.variant_rules(LINUX, names).items()
        if catalog.why_not(rule, TYPES, capabilities) == catalog.NOT_REACHED
    }


@pytest.fixture(scope="module")
def exercised() -> Counter[str]:
    return lone_rules()


def test_every_applicable_rule_is_exercised_by_a_lone_case(exercised: Counter[str]) -> None:
    missing = sorted(applicable() - set(exercised) - PAIR_ONLY - set(EXCLUDED))
    assert not missing, f"no deterministic lone case exercises: {missing}"


def test_the_exclusions_are_applicable_and_not_reached_by_lone_cases(
    exercised: Counter[str],
) -> None:
    """An exclusion a lone case now reaches, or that no longer applies, must go."""
    rules = applicable()
    assert set(EXCLUDED) <= rules, sorted(set(EXCLUDED) - rules)
    reached = sorted(r for r in (*EXCLUDED, *PAIR_ONLY) if exercised[r])
    assert not reached, f"lone cases exercise these now: drop them from the exclusions {reached}"


def test_the_pair_suites_reach_what_the_lone_cases_leave_to_them() -> None:
    """The exclusions said to be the pair suites' are exercised by their deterministic
    cases on a clean fake pair (tests/test_pair_suites_fake.py runs them)."""
    from tests import test_pair_suites_fake as pairs

    rules = pairs.pair_case_rules()
    owed = (set(EXCLUDED) - NOT_BY_PAIRS) | (PAIR_ONLY - set(pairs.UNREACHABLE))
    missing = sorted(r for r in owed if not rules[r])
    assert not missing, f"left to the pair suites, but no pair case exercises: {missing}"
    assert not [r for r in NOT_BY_PAIRS if rules[r]], "a pair case reaches it now"
