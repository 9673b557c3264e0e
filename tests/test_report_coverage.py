"""Why the report says each never-exercised rule was not (issue 24): a QP type the device
refused or the run did not select, an optional feature it lacks, or simply not reached;
the applicable count in report.json, the verdict line and the page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from models.enums import QPType
from reports.html import render_html, verdict_line, write_reports
from reports.qualification import build_report
from reports.run_record import RunRecorder, load_run, merge_runs, run_path
from tests.test_reports_run import IDENTITY, KNOWN_QUIRK, _full_walk, settings, synthetic_run


def _run_lacking_sqd(out: Path) -> list[Path]:
    """The synthetic run (XRC_RECV refused by the device), its matched quirk saying the
    device lacks SQD."""
    files = synthetic_run(out)
    gw2 = RunRecorder(IDENTITY, settings(["RC"]), worker="gw2")
    gw2.quirks_described({KNOWN_QUIRK: {"provenance": "observed", "feature": "SQD"}})
    files.append(gw2.write(run_path(out, "gw2")))
    return files


def _rules(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in report["coverage"]["rules"]}


def test_each_unexercised_rule_says_why(tmp_path: Path) -> None:
    report = build_report(merge_runs(_run_lacking_sqd(tmp_path / "out")))
    assert report["capabilities"]["SQD"] is False
    rules = _rules(report)
    # a type the device refused (before the feature it also lacks)
    xrc = rules["linux.transition.XRC_RECV.RTS->SQD"]
    assert (xrc["count"], xrc["why_not"]) == (0, "type_unsupported")
    assert xrc["why_not_detail"] == "XRC_RECV: unsupported by the device"
    assert rules["linux.transition.XRC_RECV.RESET->INIT"]["why_not"] == "type_unsupported"
    # an optional feature the device lacks
    for rule_id in ("linux.transition.RC.SQD->SQD", "ibta.sqd.drained_event.once"):
        assert rules[rule_id]["why_not"] == "feature_missing", rule_id
        assert rules[rule_id]["why_not_detail"] == "the device lacks SQD"
    # applicable, not reached
    for rule_id in ("linux.transition.RC.INIT->INIT", "linux.transition.UD.RTS->RTS",
                    "pair.rc.retry_exc", "ibta.cq.no_overrun"):
        assert rules[rule_id]["why_not"] == "not_reached", rule_id
    # exercised rules need no reason, whatever their scope
    sqd = rules["linux.transition.RC.RTS->SQD"]
    assert sqd["count"] and "why_not" not in sqd

    cov = report["coverage"]
    never = [r for r in cov["rules"] if not r["count"]]
    assert sum(cov["why_not"].values()) == len(never) == len(cov["never"])
    assert cov["why_not"] == {
        k: sum(1 for r in never if r["why_not"] == k)
        for k in ("not_reached", "type_unsupported", "feature_missing", "device_chose")
    }
    assert all(cov["why_not"][k] for k in ("not_reached", "type_unsupported", "feature_missing"))
    assert cov["applicable"] == cov["exercised"] + cov["why_not"]["not_reached"]
    assert cov["applicable"] + cov["not_applicable"] == cov["total"]
    assert cov["available_qp_types"] == ["RC", "UC", "UD"]
    assert sum(g["applicable"] for g in cov["groups"]) == cov["applicable"]
    assert sum(g["not_reached"] for g in cov["groups"]) == cov["why_not"]["not_reached"]


def test_a_type_the_run_did_not_select(tmp_path: Path) -> None:
    rec = RunRecorder(IDENTITY, settings(["UD"]))
    _full_walk(rec, QPType.UD, "t")
    report = build_report(load_run(rec.write(tmp_path / "run-main.json")))
    rules = _rules(report)
    assert rules["pair.rc.retry_exc"]["why_not"] == "type_unsupported"
    assert rules["pair.rc.retry_exc"]["why_not_detail"] == "RC: not selected"
    assert rules["pair.unreliable.dropped"]["why_not"] == "not_reached"  # UC or UD
    assert rules["uverbs.modify_qp.av_port"]["why_not"] == "type_unsupported"  # no AV on UD
    assert report["coverage"]["why_not"]["feature_missing"] == 0


def test_the_verdict_line_gives_the_applicable_figure(tmp_path: Path) -> None:
    report = build_report(merge_runs(_run_lacking_sqd(tmp_path / "out")))
    cov = report["coverage"]
    line = verdict_line(report)
    assert (
        f"; {cov['exercised']}/{cov['total']} model rules exercised, {cov['exercised']} of "
        f"{cov['applicable']} applicable, {cov['not_applicable']} not applicable to this "
        "device)"
    ) in line
    assert cov["exercised"] < cov["applicable"] < cov["total"]
    # a report written before `applicable` keeps the old wording
    old = json.loads(json.dumps(report))
    for key in ("applicable", "not_applicable", "applicable_percent", "why_not"):
        del old["coverage"][key]
    assert verdict_line(old).endswith(f"{cov['exercised']}/{cov['total']} model rules exercised)")


def test_the_page_shows_each_reason_and_the_applicable_count(tmp_path: Path) -> None:
    report, html_path, json_path = write_reports(
        _run_lacking_sqd(tmp_path / "out"), tmp_path / "report")
    cov, page = report["coverage"], html_path.read_text()
    why = cov["why_not"]

    def item(rule_id: str) -> str:
        start = page.index(f'<li><span class="mono">{rule_id.replace(">", "&gt;")}</span>')
        return page[start:page.index("</li>", start)]

    assert '<span class="why type_unsupported">type unsupported</span>' in item(
        "linux.transition.XRC_RECV.RTS->SQD")
    assert "(XRC_RECV: unsupported by the device)" in item("linux.transition.XRC_RECV.RTS->SQD")
    assert '<span class="why feature_missing">feature missing</span>' in item(
        "linux.transition.RC.SQD->SQD")
    assert "(the device lacks SQD)" in item("ibta.sqd.drained_event.once")
    assert '<span class="why not_reached">not reached</span>' in item(
        "linux.transition.RC.INIT->INIT")
    assert (
        f"Rules never exercised ({len(cov['never'])}: {why['not_reached']} not reached, "
        f"{why['type_unsupported']} type unsupported, {why['feature_missing']} feature missing)"
    ) in page
    assert f"<b>{cov['exercised']}/{cov['applicable']}</b> of the rules applicable" in page
    assert f"{cov['applicable']} of the {cov['total']} rules apply to this device" in page
    # a report.json written before the reasons still renders, without them
    old = json.loads(json_path.read_text())
    for key in ("applicable", "not_applicable", "applicable_percent", "why_not"):
        del old["coverage"][key]
    for rule in old["coverage"]["rules"]:
        rule.pop("why_not", None)
        rule.pop("why_not_detail", None)
    for group in old["coverage"]["groups"]:
        del group["applicable"], group["not_reached"]
    old_page = render_html(old)
    assert "Rules never exercised" in old_page and 'class="why' not in old_page


def test_a_rule_the_device_chose_under_is_exercised(tmp_path: Path) -> None:
    """A "may" rule seen only as a choice (iwarp.query.idle_state: the name an idle QP reads
    back as, recorded by the checker and in no step's rule list) counts as exercised; a
    rule with neither steps nor choices still does not."""
    rec = RunRecorder(IDENTITY, {**settings(["RC"]), "variant": "iwarp"})
    rec.step("RC", "modify", "RESET", "INIT", ["iwarp.transition.RC.RESET->INIT"], "match")
    rec.choice("iwarp.query.idle_state", "as INIT")
    rec.choice("iwarp.query.idle_state", "as INIT")
    rules = _rules(build_report(load_run(rec.write(tmp_path / "run-main.json"))))
    assert rules["iwarp.query.idle_state"]["count"] == 2
    assert "why_not" not in rules["iwarp.query.idle_state"]
    assert rules["iwarp.qp_type.rc_only"]["count"] == 0


def test_a_rule_the_device_broke_is_exercised(tmp_path: Path) -> None:
    """A rule whose only trace is a divergence (rxe's unasked SQ_DRAINED: a stray event no
    step lists) counts as exercised, known or not."""
    rec = RunRecorder(IDENTITY, settings(["RC"]))
    rec.step("RC", "modify", "RESET", "INIT", ["linux.transition.RC.RESET->INIT"], "match")
    (tmp_path / "divergences.json").write_text(json.dumps([  # the run's store
        {"qp_type": "RC", "verb": "event", "kind": "event",
         "rule_id": "ibta.sqd.drained_event.unasked", "known_quirk": "q.known"}]))
    rules = _rules(build_report(merge_runs([rec.write(tmp_path / "run-main.json")])))
    assert rules["ibta.sqd.drained_event.unasked"]["count"] == 1
    assert rules["ibta.sqd.drained_event.once"]["count"] == 0


def test_a_path_only_a_may_choice_leads_to_is_not_applicable_when_never_chosen(
    tmp_path: Path,
) -> None:
    """pair.rc.atomic_misaligned follows only an accepted misaligned atomic: a device that
    refused every one at post (rdma-core's rxe provider) never takes it, and the report
    says so instead of "not reached"; a device that never met the choice at all still has
    it not reached, and one that accepted once has it applicable."""
    from models.catalog import DEVICE_CHOSE, NOT_REACHED

    def row(choices: dict[str, int] | None) -> dict[str, Any]:
        rec = RunRecorder(IDENTITY, settings(["RC"]))
        rec.step("RC", "modify", "RESET", "INIT", ["linux.transition.RC.RESET->INIT"], "match")
        for chosen, n in (choices or {}).items():
            for _ in range(n):
                rec.choice("pair.atomic.misaligned.post", chosen)
        out = tmp_path / f"run-{len(list(tmp_path.iterdir()))}.json"
        return _rules(build_report(load_run(rec.write(out))))["pair.rc.atomic_misaligned"]

    refused = row({"refused (EINVAL)": 2})
    assert refused["why_not"] == DEVICE_CHOSE
    assert refused["why_not_detail"] == (
        "only 'accepted' under pair.atomic.misaligned.post leads here; the device chose "
        "refused (EINVAL) 2x")
    assert row(None)["why_not"] == NOT_REACHED
    assert row({"refused (EINVAL)": 1, "accepted": 1})["why_not"] == NOT_REACHED
