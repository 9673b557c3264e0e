"""Characteristics (what a device chose under "may" rules) and capability rows, from the engine
to the merged run record and the report."""

from __future__ import annotations

from pathlib import Path

from models.enums import Attr, QPState, QPType
from qpconform.engine.lone import Checker
from reports.divergence import DivergenceList
from reports.qualification import choice_rows, missing_features
from reports.run_record import RunRecorder, merge_runs
from tests.fake_device import FakeDevice


def test_a_may_outcome_is_recorded_as_the_devices_choice() -> None:
    recorder = RunRecorder({"device": "fake0"}, {})
    checker = Checker(FakeDevice(), recorder=recorder, settle_window=0.0, must_wait=0.0,
                      sink=DivergenceList(), reproducer_dir=None)
    qp = checker.open_qp(QPType.RC)
    qp.bring_to(QPState.RTR)
    attrs, mask = qp.transition_attrs(QPState.RTS)
    attrs["timeout"] = 40  # beyond the 5-bit field: a "may" rule in the linux variant
    qp.modify(attrs, mask | Attr.TIMEOUT)
    checker.close()
    assert recorder.choices == {"attr.timeout.width": {"accepted": 1}}


def test_choices_merge_across_workers_and_flag_mixed_outcomes(tmp_path: Path) -> None:
    for worker, chosen in (("gw0", "accepted"), ("gw1", "refused (EINVAL)")):
        rec = RunRecorder({"device": "x"}, {}, worker=worker)
        rec.choice("attr.timeout.width", chosen)
        rec.choice("attr.retry_cnt.width", "accepted")
        rec.divergences.append({"id": worker, "known_quirk": None})
        rec.write(tmp_path / f"run-{worker}.json")
    merged = merge_runs(sorted(tmp_path.glob("run-*.json")))
    assert [d["id"] for d in merged["divergences"]] == ["gw0", "gw1"]
    assert merged["choices"]["attr.retry_cnt.width"] == {"accepted": 2}
    rows = {r["rule"]: r for r in choice_rows(merged["choices"], {})}
    assert rows["attr.retry_cnt.width"]["consistent"]
    assert not rows["attr.timeout.width"]["consistent"]


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
