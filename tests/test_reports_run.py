"""Run records, the qualification report's data, `--compare` and the report CLI (no device).

The synthetic run drives the real reference model the way the checker does: each
step's rules are the model's own `Expectation.checked`, so the report is checked
against the rule ids and states a real run produces.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from models.enums import MTU, Attr, QPState, QPType
from models.qp import QPModel
from models.variant import variant
from qpconform.engine.records import Divergence
from reports import cli as report_cli
from reports import compare as report_compare
from reports.divergence import DivergenceStore
from reports.html import render_html, verdict_line, write_reports
from reports.qualification import KNOWN, NOT_CONFORMANT, build_report, model_rules
from reports.run_record import RunRecorder, load_run, merge_runs, run_path

S = QPState
IDENTITY = {
    "device": "rxe0",
    "vendor_id": "0xffffff",
    "vendor_part_id": "0",
    "fw_ver": "0.0.0",
    "node_guid": "5054:00ff:fe12:3456",
    "driver": "rdma_rxe",
    "kernel": "6.1.0-28-amd64",
    "rdma_core": "44.0",
    "pyverbs": "44.0",
    "link_layer": "Ethernet",
    "active_mtu": "1024",
    "port": "1",
    "gid_index": "1",
}
VALID = {
    "port_num": 1,
    "pkey_index": 0,
    "qkey": 0x11111111,
    "qp_access_flags": 0,
    "ah_port_num": 1,
    "ah_sgid_index": 0,
    "path_mtu": int(MTU.MTU_1024),
    "dest_qp_num": 17,
    "rq_psn": 0,
    "sq_psn": 0,
    "max_dest_rd_atomic": 1,
    "min_rnr_timer": 12,
    "timeout": 14,
    "retry_cnt": 7,
    "rnr_retry": 7,
    "max_rd_atomic": 1,
    "en_sqd_async_notify": 0,
}
PATH = (S.INIT, S.RTR, S.RTS, S.SQD, S.RTS, S.ERR, S.RESET)
UNKNOWN_QUIRK = "rxe-rc-refuses-sqd"
KNOWN_QUIRK = "rxe-uc-post-send-rtr"


def settings(qp_types: list[str]) -> dict[str, Any]:
    return {
        "variant": "linux",
        "hypothesis_profile": "ci",
        "seed": 20261101,
        "max_examples": 200,
        "qp_types": qp_types,
        "date": "2026-11-01",
    }


class _Walk:
    """Drives one QPModel like the checker does and tells a recorder about every step."""

    def __init__(self, rec: RunRecorder, qp_type: QPType, test: str) -> None:
        self.rec, self.qp_type, self.test = rec, qp_type, test
        self.model = QPModel(qp_type, "linux")
        self.steps: list[dict[str, Any]] = []

    def _record(
        self,
        verb: str,
        exp: Any,
        target: str | None,
        accepted: bool,
        result: str,
        attrs: dict | None = None,
        mask: Attr | None = None,
    ) -> None:
        before = exp.state_before.name
        self.rec.step(self.qp_type.name, verb, before, target, [r.id for r in exp.checked], result)
        mask_names = mask.names() if mask is not None else []
        self.steps.append(
            {
                "verb": verb,
                "attrs": attrs or {},
                "mask": mask_names,
                "expected": exp.outcome.value,
                "observed": "accepted" if accepted else "refused",
            }
        )
        self.model.apply(exp, accepted)

    def modify(
        self,
        nxt: QPState,
        result: str = "match",
        accepted: bool | None = None,
        mask: Attr | None = None,
    ) -> Any:
        entry = variant("linux").table.lookup(self.qp_type, self.model.state, nxt)
        if mask is None:
            mask = (entry.required if entry else Attr(0)) | Attr.STATE
        attrs = {**VALID, "qp_state": int(nxt)}
        exp = self.model.modify(attrs, mask)
        ok = (exp.outcome.value != "refuse") if accepted is None else accepted
        self._record("modify", exp, nxt.name, ok, result, attrs, mask)
        return exp

    def post(self, verb: str, result: str = "match", accepted: bool | None = None) -> Any:
        exp = self.model.post_send(1) if verb == "post_send" else self.model.post_recv(1)
        ok = (exp.outcome.value != "refuse") if accepted is None else accepted
        self._record(verb, exp, None, ok, result)
        return exp

    def divergence(
        self, out_dir: Path, exp: Any, known_quirk: str | None, observed: str,
        reproducer: str | None = None,
    ) -> dict[str, Any]:
        """A divergence of this walk, added to the store of the run in `out_dir`."""
        d = {
            "qp_type": self.qp_type.name,
            "state": exp.state_before.name,
            "verb": exp.verb,
            "attrs": self.steps[-1]["attrs"],
            "mask": self.steps[-1]["mask"],
            "expected": f"{exp.outcome.value}, state {exp.state_if_accepted.name}",
            "observed": observed,
            "rule_id": exp.rule.id,
            "rule_summary": exp.rule.summary,
            "source": str(exp.rule.source),
            "device": IDENTITY,
            "steps": list(self.steps),
            "known_quirk": known_quirk,
            "reproducer": reproducer,
            "test": self.test,
        }
        DivergenceStore(out_dir / "divergences.json").add(Divergence.from_dict(d))
        return d


def _full_walk(rec: RunRecorder, qp_type: QPType, test: str, rounds: int = 2) -> None:
    """Legal path through every state, invalid attempts, a post of each kind in each state."""
    for _ in range(rounds):
        w = _Walk(rec, qp_type, test)
        w.modify(S.RTS)  # RESET->RTS: invalid, refused
        w.modify(S.INIT, mask=Attr.STATE)  # required bits missing: refused
        for nxt in PATH:
            w.post("post_send")
            w.post("post_recv")
            w.modify(nxt)


def synthetic_run(out_dir: Path, *, unknown: bool = True, fixed_sqd: bool = False) -> list[Path]:
    """Two xdist workers' run records: RC+UC on gw0, UD (+ unsupported XRC_RECV) on gw1.

    gw0 holds a known divergence (UC post_send in RTR accepted, quirk) and, when
    `unknown`, an unknown one (RC RTS->SQD refused). gw1 reports both quirks as
    stale: only the one no worker matched may stay stale after the merge.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    types = ["RC", "UC", "UD", "XRC_RECV"]
    gw0 = RunRecorder(IDENTITY, settings(types), worker="gw0")
    _full_walk(gw0, QPType.RC, "suites/test_transitions.py::test_legal_paths[RC]")
    _full_walk(gw0, QPType.UC, "suites/test_transitions.py::test_legal_paths[UC]")
    # known divergence: UC post_send in RTR accepted although the model refuses it
    w = _Walk(gw0, QPType.UC, "suites/test_post.py::test_post_rules[UC]")
    w.modify(S.INIT)
    w.modify(S.RTR)
    exp = w.post("post_send", result="known", accepted=True)
    w.divergence(out_dir, exp, KNOWN_QUIRK, "accepted (0), the WR completed with WR_FLUSH_ERR")
    if unknown and not fixed_sqd:
        w = _Walk(gw0, QPType.RC, "suites/test_drain.py::test_sqd[RC]")
        for nxt in (S.INIT, S.RTR, S.RTS):
            w.modify(nxt)
        exp = w.modify(S.SQD, result="divergence", accepted=False)
        script = out_dir / "reproducers" / "rc-rts-sqd.py"
        script.parent.mkdir(exist_ok=True)
        script.write_text("#!/usr/bin/env python3\n# RC RTS->SQD refused\nimport pyverbs\n")
        w.divergence(out_dir, exp, None, "refused with EINVAL (22), state RTS", str(script))
    gw1 = RunRecorder(IDENTITY, settings(types), worker="gw1")
    gw1.qp_type_unsupported("XRC_RECV", "create_qp: EOPNOTSUPP (95)")
    _full_walk(gw1, QPType.UD, "suites/test_transitions.py::test_legal_paths[UD]", rounds=3)
    gw1.stale_quirk(KNOWN_QUIRK, "no UC QP in this worker")
    gw1.stale_quirk("rxe-sqd-no-drained-event", "SQ_DRAINED missing after RTS->SQD")
    gw1.quirk_not_applicable("rxe.only_new_kernels", "kernel 6.1.0-50-amd64 is outside >=6.4")
    return [gw0.write(run_path(out_dir, "gw0")), gw1.write(run_path(out_dir, "gw1"))]


@pytest.fixture
def run_files(tmp_path: Path) -> list[Path]:
    return synthetic_run(tmp_path / "out")


# ----------------------------------------------------------------------------- run records
def test_recorder_round_trip(tmp_path: Path) -> None:
    rec = RunRecorder({"name": "rxe0"}, {"variant": "linux"})
    rec.step("RC", "modify", "RESET", "INIT", ["linux.transition.RC.RESET->INIT"], "match")
    rec.step("RC", "modify", "RESET", "INIT", ["linux.transition.RC.RESET->INIT"], "match")
    rec.step("RC", "post_send", "RESET", None, ["ibta.post_send.RESET"], "divergence")
    path = rec.write(tmp_path / "run-main.json")
    data = load_run(path)
    assert data["schema"] == 2 and data["identity"] == {"name": "rxe0"}
    modify = next(s for s in data["steps"] if s["verb"] == "modify")
    assert modify["count"] == 2 and modify["rules"] == {"linux.transition.RC.RESET->INIT": 2}
    assert "divergences" not in data  # the store's (reports/divergence.py), never the record's
    with pytest.raises(ValueError):
        rec.step("RC", "modify", "RESET", "INIT", [], "maybe")


def test_merge_sums_counts_and_drops_quirks_matched_elsewhere(run_files: list[Path]) -> None:
    merged = merge_runs(run_files)
    single = [load_run(p) for p in run_files]
    assert sum(s["count"] for s in merged["steps"]) == sum(
        s["count"] for r in single for s in r["steps"]
    )
    assert merged["workers"] == ["gw0", "gw1"]
    assert [q["id"] for q in merged["stale_quirks"]] == ["rxe-sqd-no-drained-event"]
    assert merged["unsupported"] == {"XRC_RECV": "create_qp: EOPNOTSUPP (95)"}
    assert len(merged["divergences"]) == 2


def test_report_accounts_for_every_quirk(run_files: list[Path], tmp_path: Path) -> None:
    report, html_path, _ = write_reports(run_files, tmp_path / "report")
    [matched] = report["quirk_matches"]
    assert matched["id"] == KNOWN_QUIRK and matched["matches"] == 1
    assert matched["tests"] == ["suites/test_post.py::test_post_rules[UC]"]
    assert [q["id"] for q in report["not_applicable_quirks"]] == ["rxe.only_new_kernels"]
    html = html_path.read_text()
    assert "What each quirk matched (1)" in html and "Quirks not applicable here (1)" in html
    assert "rxe.only_new_kernels" in html and "outside &gt;=6.4" in html


def test_report_tells_source_predictions_from_observations(tmp_path: Path) -> None:
    """A source entry that matched is confirmed (observed); one that matched nothing is a
    stale prediction; entries without a profile description count as observed."""
    out = tmp_path / "out"
    files = synthetic_run(out)
    gw2 = RunRecorder(IDENTITY, settings(["RC"]), worker="gw2")
    gw2.quirks_described({
        KNOWN_QUIRK: {"provenance": "source"},
        "rxe-sqd-no-drained-event": {"provenance": "source", "feature": "SQD"},
    })
    files.append(gw2.write(run_path(out, "gw2")))
    merged = merge_runs(files)
    assert merged["quirk_profile"][KNOWN_QUIRK] == {"provenance": "source"}
    report, html_path, _ = write_reports(files, tmp_path / "report")
    [matched] = report["quirk_matches"]
    assert (matched["provenance"], matched["provenance_label"]) == (
        "source", "predicted from source, confirmed (observed)")
    [stale] = report["stale_quirks"]
    assert (stale["id"], stale["provenance_label"], stale["feature"]) == (
        "rxe-sqd-no-drained-event", "predicted from source", "SQD")
    [na] = report["not_applicable_quirks"]
    assert (na["provenance"], na["provenance_label"]) == ("observed", "observed")
    html = html_path.read_text()
    assert "predicted from source, confirmed (observed)" in html
    assert "rxe-sqd-no-drained-event</span> (predicted from source, lacks SQD)" in html
    plain = build_report(merge_runs(files[:2]))  # no profile description: observed
    assert {q["provenance_label"] for q in plain["stale_quirks"] + plain["quirk_matches"]} == {
        "observed"}


def test_merge_refuses_other_files(tmp_path: Path) -> None:
    bad = tmp_path / "run-x.json"
    bad.write_text(json.dumps({"kind": "something"}))
    with pytest.raises(ValueError):
        merge_runs([bad])
    with pytest.raises(ValueError):
        merge_runs([])


# ----------------------------------------------------------------------------- report data
def test_model_rules_come_from_the_model() -> None:
    rules = model_rules("linux", ["RC", "UD"])
    assert "linux.transition.RC.RTR->RTS" in rules
    assert "linux.transition.RC.INIT->RTR.required" in rules
    assert "linux.transition.invalid.RESET->ERR" in rules
    assert "attr.timeout.width" in rules and "ibta.post_send.INIT" in rules
    assert "attr.timeout.range" not in rules  # strict only in the ibta variant
    assert "attr.timeout.range" in model_rules("ibta")
    assert "linux.transition.UC.RTR->RTS" not in rules  # UC not in this run
    assert "ibta.transition.invalid.RESET->RTS" in model_rules("ibta")
    assert "linux.transition.invalid.RESET->ERR" not in model_rules("ibta")


def test_report_verdict_matrix_and_divergences(run_files: list[Path]) -> None:
    report = build_report(merge_runs(run_files), base=run_files[0].parent)
    assert report["verdict"]["code"] == NOT_CONFORMANT
    assert report["verdict"]["divergences"] == 1 and report["verdict"]["known"] == 1

    by_type = {m["qp_type"]: m for m in report["transitions"]}
    assert list(by_type) == ["RC", "UC", "UD", "XRC_RECV"]
    rc = by_type["RC"]["cells"]
    # two full walks + the drain test's walk up to RTS
    assert rc["RTR"]["RTS"] == {**rc["RTR"]["RTS"], "total": 3, "match": 3, "status": "match"}
    assert rc["RTS"]["SQD"]["divergence"] == 1 and rc["RTS"]["SQD"]["status"] == "divergence"
    assert rc["RESET"]["RTS"]["legal"] is False and rc["RESET"]["RTS"]["total"] == 2
    assert rc["RESET"]["INIT"]["total"] == 5  # 2 walks x (refused + accepted) + drain test
    assert by_type["UD"]["cells"]["RTR"]["RTS"]["total"] == 3
    assert by_type["XRC_RECV"]["unsupported"] and by_type["XRC_RECV"]["totals"]["total"] == 0
    assert rc["INIT"]["SQD"]["status"] == "unexercised"

    post = report["post"]["cells"]
    assert post["post_send"]["RTR"]["known"] == 1 and post["post_send"]["RTR"]["short"] == "refused"
    assert post["post_send"]["RESET"]["total"] == 3 + 4  # RC, UC 2 walks each, UD 3
    assert post["post_recv"]["ERR"]["short"] == "flushed"

    [div] = report["divergences"]
    assert div["rule_id"] == "linux.transition.RC.RTS->SQD" and div["qp_type"] == "RC"
    assert div["reproducer_text"].startswith("#!/usr/bin/env python3")
    assert [k["known_quirk"] for k in report["known"]] == [KNOWN_QUIRK]
    assert [q["id"] for q in report["stale_quirks"]] == ["rxe-sqd-no-drained-event"]

    cov = report["coverage"]
    counts = {r["id"]: r["count"] for r in cov["rules"]}
    assert counts["linux.transition.RC.RTR->RTS"] == 3
    assert counts["linux.transition.invalid.RESET->RTS"] == 7  # 2 + 2 + 3 walks
    assert "linux.transition.RC.INIT->INIT" in cov["never"]
    assert 0 < cov["exercised"] < cov["total"] and not cov["outside_model"]


def test_verdicts(tmp_path: Path) -> None:
    files = synthetic_run(tmp_path, unknown=False)
    report = build_report(merge_runs(files))
    assert report["verdict"]["code"] == KNOWN
    empty = RunRecorder(IDENTITY, settings(["RC"]))
    assert (
        build_report(load_run(empty.write(tmp_path / "e" / "run-main.json")))["verdict"]["code"]
        == "inconclusive"
    )
    clean = RunRecorder(IDENTITY, settings(["RC"]))
    _full_walk(clean, QPType.RC, "t")
    assert (
        build_report(load_run(clean.write(tmp_path / "c" / "run-main.json")))["verdict"]["code"]
        == "conformant"
    )


def test_write_reports_html_and_json(run_files: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "report"
    report, html_path, json_path = write_reports([run_files[0].parent], out)
    assert json.loads(json_path.read_text())["verdict"]["code"] == NOT_CONFORMANT
    page = html_path.read_text()
    assert "Not conformant" in page and "linux.transition.RC.RTS-&gt;SQD" in page
    assert "<script" not in page and "http" not in page.split("<body>")[0]  # self-contained
    [div] = report["divergences"]
    assert (out / div["reproducer_href"]).resolve() == Path(div["reproducer"]).resolve()
    assert "NOT CONFORMANT" in verdict_line(report)
    # the page renders from report.json alone
    assert render_html(json.loads(json_path.read_text())).count("<article") == 2


def test_a_divergence_found_in_a_parked_pair_says_it_was_not_shrunk(
    run_files: list[Path],
) -> None:
    """A divergence a parked pair showed after its case or example ended (qpconform/engine/
    park.py) could not be shrunk: its card says so instead of "Shrunk step sequence"."""
    from qpconform.engine.park import AFTER_END

    report = build_report(merge_runs(run_files), base=run_files[0].parent)
    div = report["divergences"][0]
    div.update(context={"after_end": AFTER_END}, reproducer_href=div["reproducer"])
    page = render_html(report)
    assert f"Found late: {AFTER_END}." in page and "Step sequence, not shrunk" in page
    assert "Shrunk step sequence" in page  # the known one's card is unchanged


# ----------------------------------------------------------------------------- compare
def test_compare_finds_new_and_fixed_divergences(tmp_path: Path) -> None:
    before = synthetic_run(tmp_path / "a")
    _, _, a_json = write_reports([tmp_path / "a"], tmp_path / "a")
    # B: the RC SQD divergence is fixed, a UD divergence is new, UD walked less
    rec = RunRecorder({**IDENTITY, "fw_ver": "0.0.1"}, settings(["RC", "UD"]))
    _full_walk(rec, QPType.RC, "t")
    w = _Walk(rec, QPType.UD, "suites/test_post.py::test_post_rules[UD]")
    exp = w.post("post_recv", result="divergence", accepted=False)
    w.divergence(tmp_path / "b", exp, None, "refused with EINVAL (22)")
    b_run = rec.write(tmp_path / "b" / "run-main.json")
    _, _, b_json = write_reports([b_run], tmp_path / "b")

    diff = report_compare.compare(
        report_compare.load_report(a_json), report_compare.load_report(b_json)
    )
    assert [d["key"] for d in diff["new_divergences"]] == [
        "UD | post_recv | ibta.post_recv.RESET | RESET"
    ]
    assert [d["key"] for d in diff["fixed_divergences"]] == [
        "RC | modify | linux.transition.RC.RTS->SQD | RTS"
    ]
    assert diff["identity_changes"] == {"fw_ver": ["0.0.0", "0.0.1"]}
    assert "linux.transition.UC.RTR->RTS" in diff["coverage"]["no_longer_exercised"]
    assert [k["key"] for k in diff["gone_known"]] == ["UC | post_send | ibta.post_send.RTR | RTR"]
    text = report_compare.format_text(diff)
    assert "NEW divergences (1)" in text and "FIXED divergences (1)" in text
    # run records are accepted too, and a run compared with itself has no differences
    same = report_compare.compare(
        report_compare.load_report(before[0]), report_compare.load_report(before[0])
    )
    assert not report_compare.has_changes(same)


# ----------------------------------------------------------------------------- CLI
def _run_cli(argv: list[str]) -> int:
    return report_cli.main(argv)


def test_cli_report_and_compare(
    run_files: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cli"
    assert _run_cli(["--input", str(run_files[0].parent), "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "NOT CONFORMANT" in printed and (out / "report.html").is_file()
    assert (
        _run_cli(
            ["--compare", str(out / "report.json"), str(out / "report.json"), "--output", str(out)]
        )
        == 0
    )
    assert "no differences" in capsys.readouterr().out
    assert (out / "compare.txt").is_file() and (out / "compare.json").is_file()
    assert _run_cli(["--input", str(tmp_path / "nothing"), "--output", str(out)]) == 2
    assert "no run records" in capsys.readouterr().err


# ----------------------------------------------------------------------------- a checker run
def checker_run(out_dir: Path) -> Path:
    """A run record written by the real Checker on the fake device with a planted fault.

    The fake device accepts INIT->RTS (an illegal transition): one divergence per QP type.
    """
    from qpconform.engine.judge import DivergenceError
    from qpconform.engine.lone import Checker
    from tests.fake_device import FakeDevice

    device = FakeDevice(faults={"accept_illegal_transition"})
    rec = RunRecorder(device.identity(), settings(["RC", "UC", "UD"]))
    chk = Checker(
        device, recorder=rec, sink=DivergenceStore(out_dir / "divergences.json"),
        settle_window=0.0,
    )
    try:
        for qp_type in (QPType.RC, QPType.UC, QPType.UD):
            qp = chk.open_qp(qp_type)
            qp.bring_to(S.RTS)
            qp.post_send()
            qp.post_recv()
            qp.settle()
            qp = chk.open_qp(qp_type)
            qp.bring_to(S.INIT)
            with pytest.raises(DivergenceError):
                qp.modify({"qp_state": int(S.RTS)}, Attr.STATE)
    finally:
        chk.close()
    return rec.write(run_path(out_dir))


def test_report_from_a_checker_run(tmp_path: Path) -> None:
    report, _, _ = write_reports([checker_run(tmp_path)], tmp_path)
    assert report["verdict"]["code"] == NOT_CONFORMANT
    assert report["device_name"] == "fake0"
    for matrix in report["transitions"]:
        cell = matrix["cells"]["INIT"]["RTS"]
        assert (cell["legal"], cell["divergence"], cell["status"]) == (False, 1, "divergence")
        assert matrix["cells"]["RTR"]["RTS"]["match"] == 1
    assert {d["qp_type"] for d in report["divergences"]} == {"RC", "UC", "UD"}
    assert {d["rule_id"] for d in report["divergences"]} == {"linux.transition.invalid.INIT->RTS"}
    assert report["post"]["cells"]["post_send"]["RTS"]["match"] == 3
    assert not report["coverage"]["outside_model"]


def test_records_of_two_runs_are_never_merged(tmp_path: Path) -> None:
    from reports.run_record import merge_runs

    for name, run_id in (("run-gw0.json", "20261201T100000Z-aaaaaa"),
                         ("run-gw1.json", "20261201T110000Z-bbbbbb")):
        RunRecorder({"device": "rxe0"}, {"run_id": run_id}).write(tmp_path / name)
    with pytest.raises(ValueError, match=r"come from 2 different runs .*run-gw0\.json.*run-gw1"):
        merge_runs(sorted(tmp_path.glob("run-*.json")))


# ----------------------------------------------------------------------------- replay, quirks
def _replay_settings(batches: str, spent: str) -> dict[str, Any]:
    """A worker's settings as the plugin writes them: its own stateful tests only."""
    from fixtures import seeds

    replay = seeds.replay_args(7, "default", batches)
    return {**settings(["RC"]), "hypothesis_profile": "default", "hypothesis_seed": 7,
            "stateful_batches": batches, "stateful_spent": spent, "replay": replay,
            "seed": seeds.describe(7, "default", replay)}


def test_the_merged_record_names_every_workers_batches(tmp_path: Path) -> None:
    """Under xdist each worker ran some stateful tests: the merged replay line names all."""
    gw0 = RunRecorder(IDENTITY, _replay_settings(
        "lone=4,traffic-UD=1", "lone: 4 batches, 40 examples, 9 steps, 3 s; traffic-UD: "
        "1 batches, 6 examples, 1 s"), worker="gw0")
    gw1 = RunRecorder(IDENTITY, _replay_settings(
        "traffic-RC=3", "traffic-RC: 3 batches, 18 examples, 2 s"), worker="gw1")
    gw2 = RunRecorder(IDENTITY, _replay_settings("", ""), worker="gw2")  # no stateful test
    merged = merge_runs([gw0.write(tmp_path / "run-gw0.json"), gw1.write(tmp_path / "run-gw1.json"),
                         gw2.write(tmp_path / "run-gw2.json")])["settings"]
    spec = "lone=4,traffic-RC=3,traffic-UD=1"
    assert merged["stateful_batches"] == spec
    assert merged["replay"] == (
        f"--hypothesis-seed=7 --hypothesis-profile=default --stateful-batches {spec}")
    assert merged["seed"] == f"7 (replay: {merged['replay']})"
    assert merged["stateful_spent"].split("; ") == [
        "lone: 4 batches, 40 examples, 9 steps, 3 s", "traffic-RC: 3 batches, 18 examples, 2 s",
        "traffic-UD: 1 batches, 6 examples, 1 s"]
    report = build_report({"settings": merged})
    rows = {row["key"]: row for row in report["setting_rows"]}
    assert rows["replay"]["value"] == merged["replay"] and not rows["replay"]["missing"]
    assert "hypothesis_seed" not in rows  # shown as the seed
    from reports.html import replay_line

    assert replay_line(report) == f"qpconform: replay these sequences with: {merged['replay']}"


def test_an_older_record_without_replay_keeps_its_seed(run_files: list[Path]) -> None:
    merged = merge_runs(run_files)["settings"]
    assert merged["seed"] == 20261101 and "replay" not in merged
    from reports.html import replay_line

    assert replay_line(build_report(merge_runs(run_files))) is None


def _not_provoked_run(out: Path) -> list[Path]:
    """The synthetic run, its gw1 a random-profile worker: its unmatched quirks were not
    provoked (one of them matched on gw0)."""
    files = synthetic_run(out)
    gw1 = load_run(files[1])
    gw1["not_provoked_quirks"] = gw1.pop("stale_quirks")
    files[1].write_text(json.dumps(gw1))
    return files


def test_a_quirk_a_random_run_did_not_provoke_is_not_stale(tmp_path: Path) -> None:
    files = _not_provoked_run(tmp_path / "out")
    merged = merge_runs(files)
    assert merged["stale_quirks"] == []
    assert [q["id"] for q in merged["not_provoked_quirks"]] == ["rxe-sqd-no-drained-event"]
    report, html_path, _ = write_reports(files, tmp_path / "report")
    assert report["verdict"]["stale_quirks"] == 0
    assert report["verdict"]["not_provoked_quirks"] == 1
    assert [q["id"] for q in report["not_provoked_quirks"]] == ["rxe-sqd-no-drained-event"]
    assert "0 stale quirk(s), 1 not provoked in this run;" in verdict_line(report)
    page = html_path.read_text()
    assert "Quirks not provoked in this run (1)" in page and "Stale quirks (0)" in page
    assert "1</b> quirk(s) not provoked in this run" in page
    from fixtures.verdict import strict_failure

    assert strict_failure(report, strict=True) is None  # only a stale quirk fails strict


def test_reports_without_not_provoked_quirks_still_read(run_files: list[Path],
                                                        tmp_path: Path) -> None:
    """Records and reports written before the key: no "not provoked" list, same verdict."""
    report, _, json_path = write_reports(run_files, tmp_path / "report")
    assert report["not_provoked_quirks"] == [] and "not provoked" not in verdict_line(report)
    old = json.loads(json_path.read_text())
    del old["not_provoked_quirks"]
    del old["verdict"]["not_provoked_quirks"]
    assert "not provoked" not in render_html(old) and "NOT CONFORMANT" in verdict_line(old)
    diff = report_compare.compare(old, old)
    assert diff["new_not_provoked_quirks"] == [] and not report_compare.has_changes(diff)


def test_compare_names_quirks_b_did_not_provoke_without_calling_them_stale(
    tmp_path: Path,
) -> None:
    synthetic_run(tmp_path / "a")
    _, _, a_json = write_reports([tmp_path / "a"], tmp_path / "a")
    _not_provoked_run(tmp_path / "b")
    _, _, b_json = write_reports([tmp_path / "b"], tmp_path / "b")
    a, b = report_compare.load_report(a_json), report_compare.load_report(b_json)
    diff = report_compare.compare(a, b)
    assert diff["new_stale_quirks"] == []
    assert diff["new_not_provoked_quirks"] == ["rxe-sqd-no-drained-event"]
    assert not report_compare.has_changes(diff)  # the next random run may provoke it
    text = report_compare.format_text(diff)
    assert "quirks not provoked in B's run (random profile: not stale) (1):" in text
    assert "newly stale" not in text
