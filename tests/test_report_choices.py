"""Characteristics (what a device chose under "may" rules) and capability rows, from the engine
to the merged run record and the report."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from fixtures.verdict import inconsistency_failure
from models.enums import Attr, QPState, QPType
from models.outcomes import Expectation
from qpconform.engine.judge import DivergenceError
from qpconform.engine.lone import Checker
from qpconform.engine.quirks import Quirks
from qpconform.engine.records import DivergenceList
from reports.qualification import verdict
from reports.report_rows import choice_rows, missing_features, unreported_inconsistencies
from reports.run_record import RunRecorder, merge_runs
from tests.fake_device import Behaviour, FakeDevice, FakeQP, Verdict


def test_a_may_outcome_is_recorded_as_the_devices_choice() -> None:
    recorder = RunRecorder({"device": "fake0"}, {})
    checker = Checker(FakeDevice(), recorder=recorder, settle_window=0.0, must_wait=0.0,
                      sink=DivergenceList())
    qp = checker.open_qp(QPType.RC)
    qp.bring_to(QPState.RTR)
    attrs, mask = qp.values.transition_attrs(QPState.RTS)
    attrs["timeout"] = 40  # beyond the 5-bit field: a "may" rule in the linux variant
    qp.modify(attrs, mask | Attr.TIMEOUT)
    checker.close()
    # every query_qp outside RESET also records how the fake fills cur_qp_state (INIT, RTR,
    # RTS: query.cur_qp_state, models/returned.py)
    assert recorder.choices == {"attr.timeout.width": {"accepted": 1},
                                "query.cur_qp_state": {"as qp_state": 3}}


def _book(tmp_path: Path, per_worker: dict[str, list[tuple[str, str, str]]]) -> dict:
    """Run records of workers that each chose (rule, situation, chosen), merged."""
    for worker, chosen in per_worker.items():
        rec = RunRecorder({"device": "x"}, {}, worker=worker)
        for rule_id, where_key, what in chosen:
            rec.choice(rule_id, what, where_key, f"{worker} test")
        rec.write(tmp_path / f"run-{worker}.json")
    (tmp_path / "divergences.json").write_text(json.dumps(  # the run's store
        [{"id": worker, "known_quirk": None} for worker in per_worker]))
    return merge_runs(sorted(tmp_path.glob("run-*.json")))


def test_choices_merge_across_workers_and_flag_one_situation_chosen_both_ways(
    tmp_path: Path,
) -> None:
    same = "RC modify RTR->RTS mask=STATE|TIMEOUT timeout=40"
    merged = _book(tmp_path, {
        "gw0": [("attr.timeout.width", same, "accepted"),
                ("attr.retry_cnt.width", "RC retry_cnt=8", "accepted"),
                ("attr.path_mtu.above_active", "RC path_mtu=4", "accepted")],
        "gw1": [("attr.timeout.width", same, "refused (EINVAL)"),
                ("attr.retry_cnt.width", "RC retry_cnt=8", "accepted"),
                ("attr.path_mtu.above_active", "RC path_mtu=5", "refused (EINVAL)")],
    })
    assert [d["id"] for d in merged["divergences"]] == ["gw0", "gw1"]
    assert merged["choices"]["attr.retry_cnt.width"] == {"accepted": 2}
    rows = {r["rule"]: r for r in choice_rows(merged["choices"], {}, merged["situations"])}
    assert rows["attr.retry_cnt.width"]["consistent"]
    assert not rows["attr.retry_cnt.width"]["by_situation"]
    assert rows["attr.path_mtu.above_active"]["consistent"]  # by value: two situations
    assert rows["attr.path_mtu.above_active"]["by_situation"]
    assert not rows["attr.timeout.width"]["consistent"]
    assert rows["attr.timeout.width"]["inconsistent_situations"] == [same]
    found = unreported_inconsistencies(merged)
    assert found == [{"rule": "attr.timeout.width", "situation": same,
                      "choices": {"accepted": "gw0 test", "refused (EINVAL)": "gw1 test"}}]
    assert verdict(merged)["divergences"] == 2 + 1  # the two records and the mixed choice
    failure = inconsistency_failure({"inconsistent_choices": found})
    assert failure is not None and same in failure and "gw1 test" in failure


def test_an_inconsistency_a_worker_reported_is_not_counted_twice(tmp_path: Path) -> None:
    same = "UD modify INIT->INIT mask=ACCESS_FLAGS qp_access_flags=16"
    merged = _book(tmp_path, {"gw0": [("attr.qp_access_flags.driver", same, "accepted"),
                                      ("attr.qp_access_flags.driver", same, "refused (EINVAL)")]})
    merged["divergences"].append({"kind": "inconsistent", "rule_id": "attr.qp_access_flags.driver",
                                  "context": {"situation": same}, "known_quirk": None})
    assert unreported_inconsistencies(merged) == []


class _FlipsOnce(Behaviour):
    """Refuses a wide timeout after having accepted it once (a driver whose check depends
    on something the verb does not say: stale firmware state, a race)."""

    def __init__(self) -> None:
        self.seen = 0

    def modify(self, qp: FakeQP, exp: Expectation, attrs: dict, mask: Attr) -> Verdict | None:
        if Attr.TIMEOUT in mask and attrs["timeout"] > 31:
            self.seen += 1
            return None if self.seen == 1 else Verdict(False, errno.EINVAL)
        return None


class _ByValue(Behaviour):
    """Stores timeouts up to 40 masked and refuses larger ones: a choice by value."""

    def modify(self, qp: FakeQP, exp: Expectation, attrs: dict, mask: Attr) -> Verdict | None:
        if Attr.TIMEOUT in mask and attrs["timeout"] > 40:
            return Verdict(False, errno.EINVAL)
        return None


def _wide_timeouts(behaviour: Behaviour, timeouts: list[int], quirks: Quirks | None = None):
    recorder = RunRecorder({"device": "fake0"}, {})
    checker = Checker(FakeDevice(behaviour=behaviour), recorder=recorder, settle_window=0.0,
                      must_wait=0.0, sink=DivergenceList(), quirks=quirks)
    try:
        for timeout in timeouts:
            qp = checker.open_qp(QPType.RC)
            qp.bring_to(QPState.RTR)
            attrs, mask = qp.values.transition_attrs(QPState.RTS)
            attrs["timeout"] = timeout
            qp.modify(attrs, mask | Attr.TIMEOUT)
    finally:
        checker.close()
    return recorder, checker


def test_the_same_modify_accepted_then_refused_is_an_inconsistent_divergence() -> None:
    with pytest.raises(DivergenceError) as caught:
        _wide_timeouts(_FlipsOnce(), [40, 40])
    d = caught.value.record
    assert (d.kind, d.rule_id, d.rule_kind) == ("inconsistent", "attr.timeout.width", "may")
    assert d.observed == "refused (EINVAL)" and "accepted" in d.expected
    assert "timeout=40" in d.context["situation"]


def test_a_choice_by_value_is_consistent() -> None:
    recorder, _ = _wide_timeouts(_ByValue(), [40, 50, 40, 50])
    assert recorder.choices["attr.timeout.width"] == {"accepted": 2, "refused (EINVAL)": 2}
    assert recorder.situations.inconsistent() == []


_ENTRY = """
[[quirk]]
id = "{id}"
rule = "attr.timeout.width"
kinds = ["{kind}"]
reason = "why"
evidence = ["seen"]
provenance = "observed"
"""


def test_a_quirk_of_kind_inconsistent_knows_it_and_nothing_else() -> None:
    quirks = Quirks.from_toml(_ENTRY.format(id="fake.timeout_flips", kind="inconsistent"))
    _, checker = _wide_timeouts(_FlipsOnce(), [40, 40], quirks)
    assert [d.known_quirk for d in checker.judge.known] == ["fake.timeout_flips"]
    near_miss = Quirks.from_toml(_ENTRY.format(id="fake.timeout_refused", kind="outcome"))
    with pytest.raises(DivergenceError):
        _wide_timeouts(_FlipsOnce(), [40, 40], near_miss)


def test_a_matched_feature_quirk_is_one_capability_row() -> None:
    profile = {"mlx5.no_rts_to_sqd": {"provenance": "source", "feature": "SQD"},
               "mlx5.other": {"provenance": "source"}}
    divs = [{"known_quirk": "mlx5.no_rts_to_sqd"}, {"known_quirk": "mlx5.no_rts_to_sqd"},
            {"known_quirk": "mlx5.other"}, {"known_quirk": None}]
    assert missing_features(divs, profile) == [
        {"feature": "SQD", "quirk": "mlx5.no_rts_to_sqd", "provenance": "source"}
    ]


def test_delivery_delays_of_all_workers_make_one_summary(tmp_path: Path) -> None:
    for worker, delays in (("gw0", [0.001, 0.002]), ("gw1", [0.050])):
        rec = RunRecorder({"device": "x"}, {"delivery_latency": f"only {worker}"}, worker=worker)
        rec.delivery = {"completion": delays}
        rec.write(tmp_path / f"run-{worker}.json")
    merged = merge_runs(sorted(tmp_path.glob("run-*.json")))
    assert merged["settings"]["delivery_latency"].startswith("completions: 3,")
    assert "max 50.0 ms" in merged["settings"]["delivery_latency"]
