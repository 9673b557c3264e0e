"""The mutation run's bookkeeping (no VM): catalog checks, patching, verdicts, score, table."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from qpconform import cli
from qpconform.mutants import run
from qpconform.vm import drivers

SHIPPED = run.load_catalog("rxe")
SHIPPED_SIW = run.load_catalog("siw")
CATALOGS = {"rxe": SHIPPED, "siw": SHIPPED_SIW}


def write_catalog(base: Path, body: str, patches: dict[str, str] | None = None) -> None:
    (base / "rxe").mkdir(parents=True, exist_ok=True)
    (base / "rxe" / "catalog.toml").write_text(body)
    for rel, text in (patches or {}).items():
        (base / "rxe" / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / "rxe" / rel).write_text(text)


ENTRY = """
[[mutant]]
id = "m1"
category = "query"
summary = "s"
observable = "o"
kernels = ["6.1"]
"""


#: The categories of the operations a QP carries (issue 24): completion opcodes, RDMA READ,
#: immediate data, selective signaling.
OPERATION_CATEGORIES = {"opcode", "read", "imm", "unsignaled"}


def test_shipped_catalog_has_52_mutants_over_every_category_and_a_ci_sample():
    assert len(SHIPPED) >= 52
    assert {m.category for m in SHIPPED} == set(run.CATEGORIES)
    assert len([m for m in SHIPPED if m.ci]) >= 3
    for m in SHIPPED:
        assert m.kernels and set(m.kernels) <= {"6.1", "6.12"}, m.id


def test_srq_mutants_say_how_they_show_and_cover_both_kernels() -> None:
    """The shared receive queue paths (issue 24): the limit event early or not disarmed on
    both kernels, Last WQE Reached lost on 6.12 (6.1 never raises it: a quirk)."""
    srq = {m.id: m for m in SHIPPED if m.category == "srq"}
    assert set(srq) >= {"srq_limit_off_by_one", "srq_limit_not_disarmed", "last_wqe_not_raised"}
    assert srq["last_wqe_not_raised"].kernels == ("6.12",)
    assert all(m.observable and not m.ci for m in srq.values())


def test_operation_mutants_cover_both_kernels_say_how_they_show_and_stay_out_of_ci():
    """At least 12 mutants of the operations paths, each patched for 6.1 and 6.12, each
    naming what the suite sees (observable), none in the CI sample."""
    ops = [m for m in SHIPPED if m.category in OPERATION_CATEGORIES]
    assert len(ops) >= 12
    assert {m.category for m in ops} == OPERATION_CATEGORIES
    for m in ops:
        assert m.kernels == ("6.1", "6.12"), m.id
        assert m.observable and not m.ci, m.id


#: The issue 45 mutants (returned fields and bytes) and the rule each is caught by.
FIELD_MUTANTS = {
    "ud_src_qp_own_qpn": "pair.ud.wc.src_qp",
    "imm_flag_always_set": "pair.imm.delivered",
    "wc_byte_len_off_by_one": "pair.wc.byte_len",
    "inline_copied_from_resid": "pair.inline.delivered",
    "send_imm_from_unused_field": "ibta.post_send.unused_fields_ignored",
    "ud_too_long_truncated": "pair.unreliable.recv_too_short",
}


def test_field_mutants_name_the_rule_that_catches_them_on_both_kernels():
    """Issue 45 item 5: a mutant per newly checked field group, patched for 6.1 and 6.12,
    its observable naming the test and the rule that catches it; none in the CI sample.
    Each rule named exists in the model (a renamed rule fails here, not in a VM run)."""
    from models import catalog

    known = set(catalog.all_rules())
    by_id = {m.id: m for m in SHIPPED}
    for mutant_id, rule in FIELD_MUTANTS.items():
        m = by_id[mutant_id]
        assert m.kernels == ("6.1", "6.12") and not m.ci, mutant_id
        assert rule in m.observable and "test_" in m.observable, mutant_id
        assert rule in known, rule


def test_every_shipped_patch_names_its_mutant_driver_kernel_and_category():
    """The header line before the diff says which mutant, module, kernel and category it is
    (so a patch copied to the wrong folder or id is caught here, not in a VM run)."""
    for driver, catalog in CATALOGS.items():
        module = drivers.spec(driver).module
        for m in catalog:
            for series in m.kernels:
                first = run.patch_file(driver, series, m.id).read_text().splitlines()[0]
                assert first.startswith(
                    f"qpconform mutant {m.id} for {module} (Linux {series})"
                ), (driver, m.id, series, first)
                assert first.endswith(f"category {m.category}."), (m.id, series, first)


def test_shipped_siw_catalog_has_8_plus_mutants_on_both_kernels_none_in_ci():
    """The first siw catalog: each mutant patched for 6.1 and 6.12, saying what the iwarp
    suites see, none in the CI sample; its patches touch siw's files."""
    assert len(SHIPPED_SIW) >= 8
    assert {m.category for m in SHIPPED_SIW} <= set(run.CATEGORIES)
    for m in SHIPPED_SIW:
        assert m.kernels == ("6.1", "6.12"), m.id
        assert m.observable and not m.ci, m.id
        for series in m.kernels:
            text = run.patch_file("siw", series, m.id).read_text()
            assert all(
                line[len("--- a/"):].startswith("siw_")
                for line in text.splitlines() if line.startswith("--- a/")
            ), m.id
    assert run.Plan(driver="siw", ci_sample=True).selected(SHIPPED_SIW) == []


def test_gate_command_for_rxe_uses_rxe0_alone(tmp_path):
    ko = tmp_path / "rdma_rxe.ko"
    cmd = run.gate_command(run.Plan(), "bookworm", ko, tmp_path / "out")
    vm = cmd[: cmd.index("--")]
    pytest_cmd = cmd[cmd.index("--") + 1 :]
    assert vm[1:4] == ["-m", "qpconform", "vm"]
    assert vm[vm.index("--driver") + 1] == "rxe" and vm[vm.index("--module") + 1] == str(ko)
    assert vm[vm.index("--release") + 1] == "bookworm"
    assert pytest_cmd[pytest_cmd.index("--device") + 1] == "rxe0"
    assert "--peer-device" not in pytest_cmd
    assert "--maxfail=1" in pytest_cmd and pytest_cmd[-2:] == ["-n", "2"]
    assert f"--junitxml={tmp_path / 'out' / 'junit.xml'}" in pytest_cmd


def test_gate_command_for_siw_uses_the_siw0_siw1_pair(tmp_path):
    """siw's pair tests need two devices (iWARP connects through rdma_cm): the gate runs
    the suite on siw0 -> siw1 with the siw module built from the mutant."""
    ko = tmp_path / "siw.ko"
    plan = run.Plan(driver="siw", pytest_args=("suites/test_operations.py",))
    cmd = run.gate_command(plan, "trixie", ko, tmp_path / "out")
    vm = cmd[: cmd.index("--")]
    pytest_cmd = cmd[cmd.index("--") + 1 :]
    assert vm[vm.index("--driver") + 1] == "siw" and vm[vm.index("--module") + 1] == str(ko)
    assert vm[vm.index("--release") + 1] == "trixie"
    at = pytest_cmd.index("--device")
    assert pytest_cmd[at : at + 4] == ["--device", "siw0", "--peer-device", "siw1"]
    assert pytest_cmd[3] == "suites/test_operations.py"
    assert run.device_args("siw") == ["--device", "siw0", "--peer-device", "siw1"]
    assert run.device_args("rxe") == ["--device", "rxe0"]


def test_cli_mutants_driver_siw_reaches_the_plan(monkeypatch):
    seen: list[run.Plan] = []
    monkeypatch.setattr(run, "main", lambda plan, output: seen.append(plan) or 0)
    assert cli.main(["mutants", "--driver", "siw", "--only", SHIPPED_SIW[0].id,
                     "--release", "trixie"]) == 0
    (plan,) = seen
    assert plan.driver == "siw" and plan.releases == ("trixie",)
    assert [m.id for m in plan.selected(run.load_catalog(plan.driver))] == [SHIPPED_SIW[0].id]


def test_every_shipped_patch_is_a_unified_diff_that_changes_something():
    """Applying them to the stock source is the mutation run's job (it fails on any reject)."""
    for driver, catalog in CATALOGS.items():
        for m in catalog:
            for series in m.kernels:
                text = run.patch_file(driver, series, m.id).read_text()
                assert "\n--- a/" in "\n" + text and "\n+++ b/" in text, m.id
                assert any(
                    line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
                    for line in text.splitlines()
                ), f"{m.id} changes nothing"


def test_unknown_key_and_category_are_named(tmp_path):
    write_catalog(
        tmp_path, ENTRY.replace('category = "query"', 'category = "typo"'), {"6.1/m1.patch": ""}
    )
    with pytest.raises(run.MutantError, match="category 'typo' is not one of"):
        run.load_catalog("rxe", tmp_path)
    write_catalog(tmp_path, ENTRY + 'colour = "red"\n', {"6.1/m1.patch": ""})
    with pytest.raises(run.MutantError, match="keys must be"):
        run.load_catalog("rxe", tmp_path)


def test_missing_patch_is_named(tmp_path):
    write_catalog(tmp_path, ENTRY)
    with pytest.raises(run.MutantError, match=r"no 6\.1/m1\.patch"):
        run.load_catalog("rxe", tmp_path)


def test_unknown_driver_lists_the_known_ones(tmp_path):
    write_catalog(tmp_path, ENTRY, {"6.1/m1.patch": ""})
    with pytest.raises(run.MutantError, match=r"mutants exist for: \['rxe'\]"):
        run.load_catalog("siw", tmp_path)


def test_unknown_only_id_lists_the_known_ones():
    with pytest.raises(run.MutantError, match="unknown mutant"):
        run.Plan(only=("nope",)).selected(SHIPPED)
    assert [m.id for m in run.Plan(only=(SHIPPED[0].id,)).selected(SHIPPED)] == [SHIPPED[0].id]
    assert all(m.ci for m in run.Plan(ci_sample=True).selected(SHIPPED))


#: Stock rxe sources to apply the shipped patches to, when the host has them (a folder like
#: linux-source-6.1/drivers/infiniband/sw/rxe, from the guest kernel's linux-source package):
#: QPCONFORM_RXE_SOURCE_6_1 and QPCONFORM_RXE_SOURCE_6_12. Unset: the case is skipped.
_STOCK = {s: os.environ.get(f"QPCONFORM_RXE_SOURCE_{s.replace('.', '_')}") for s in ("6.1", "6.12")}


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs the patch tool")
@pytest.mark.parametrize("series", sorted(_STOCK))
def test_every_shipped_rxe_patch_applies_to_the_stock_source(tmp_path, series):
    """Each rxe mutant of `series` applies with --fuzz=0 to the stock source named by its
    environment variable (what `qpconform mutants` does in the VM run, caught here)."""
    stock = _STOCK[series]
    if not stock:
        pytest.skip(f"QPCONFORM_RXE_SOURCE_{series.replace('.', '_')} not set")
    for m in SHIPPED:
        if series in m.kernels:
            run.apply_patch(Path(stock), run.patch_file("rxe", series, m.id), tmp_path / m.id)


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs the patch tool")
def test_apply_patch_exactly_or_fail(tmp_path):
    stock = tmp_path / "stock"
    stock.mkdir()
    (stock / "a.c").write_text("one\ntwo\nthree\n")
    good = tmp_path / "good.patch"
    good.write_text("a mutant\n--- a/a.c\n+++ b/a.c\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n")
    out = run.apply_patch(stock, good, tmp_path / "m" / "rxe")
    assert (out / "a.c").read_text() == "one\nTWO\nthree\n"
    assert (stock / "a.c").read_text() == "one\ntwo\nthree\n"
    bad = tmp_path / "bad.patch"
    bad.write_text("--- a/a.c\n+++ b/a.c\n@@ -1,3 +1,3 @@\n one\n-zwei\n+TWO\n three\n")
    with pytest.raises(run.MutantError, match="does not apply"):
        run.apply_patch(stock, bad, tmp_path / "m2" / "rxe")


def write_run(out: Path, failures: list[str], divergences: list[dict], seconds: float = 42.0):
    out.mkdir(parents=True, exist_ok=True)
    cases = "".join(
        f'<testcase classname="suites.test_x" name="{name}" time="1">'
        f'<failure message="DivergenceError: boom">trace</failure></testcase>'
        for name in failures
    )
    (out / "junit.xml").write_text(
        f'<testsuites><testsuite name="pytest" time="{seconds}">{cases}'
        '<testcase classname="suites.test_x" name="ok" time="1"/></testsuite></testsuites>'
    )
    (out / "divergences.json").write_text(json.dumps(divergences))


def div(rule: str, test: str, verbs: int, known: str | None = None) -> dict:
    steps = [{"verb": "modify"}] * verbs + [{"verb": "settle"}]
    return {"rule_id": rule, "test": test, "steps": steps, "known_quirk": known}


def test_a_failing_test_is_a_detection_with_its_rule_time_and_shrunk_length(tmp_path):
    write_run(
        tmp_path,
        ["test_machine"],
        [
            div("attr.earlier", "suites/test_attributes.py::test_attribute[RC]", 1),
        div("ibta.query.state", "suites/test_stateful.py::test_machine", 5),
            div("ibta.query.state", "suites/test_stateful.py::test_machine", 2),
            div("other", "suites/test_x.py::t", 1, known="rxe.some_quirk"),
        ],
    )
    o = run.judge("m1", "bookworm", "6.1.0-50-amd64", tmp_path, 1, 99.0, set())
    assert o.detected and o.how == "test failure"
    assert o.test == "suites.test_x::test_machine" and o.rule == "ibta.query.state"
    assert o.seconds_to_fail == 42.0 and o.shrunk_verbs == 2
    assert o.message.startswith("DivergenceError")


def test_a_passing_gate_is_a_survivor_and_known_only_when_it_matched_a_new_quirk(tmp_path):
    write_run(tmp_path, [], [div("r", "t", 1, known="rxe.base")])
    o = run.judge("m1", "bookworm", "k", tmp_path, 0, 10.0, {"rxe.base"})
    assert o.verdict == "survived" and not o.detected
    write_run(tmp_path, [], [div("r", "t", 1, known="rxe.base"), div("r", "t", 1, known="rxe.new")])
    o = run.judge("m1", "bookworm", "k", tmp_path, 0, 10.0, {"rxe.base"})
    assert o.verdict == "known-only" and o.new_known == ["rxe.new"] and not o.detected


def test_timeout_and_kernel_log_count_as_detected_and_runner_failure_as_error(tmp_path):
    write_run(tmp_path, [], [])
    assert run.judge("m", "b", "k", tmp_path, run.EXIT_TIMEOUT, 1, set()).detected
    log = run.judge("m", "b", "k", tmp_path, 1, 1, set())
    assert log.detected and "kernel log" in log.how
    assert run.judge("m", "b", "k", tmp_path, run.EXIT_INFRA, 1, set()).verdict == "error"


def test_score_counts_neither_baseline_nor_errors_and_table_shows_each_mutant(tmp_path):
    outcomes = [
        run.Outcome("baseline", "bookworm", "k", "passed"),
        run.Outcome("m1", "bookworm", "k", "detected", test="a::b", rule="r1", seconds_to_fail=3),
        run.Outcome("m2", "bookworm", "k", "survived"),
        run.Outcome("m3", "bookworm", "k", "error"),
    ]
    assert run.score(outcomes) == {"bookworm": {"detected": 1, "counted": 2, "score": 0.5}}
    table = run.markdown(outcomes, [run.Mutant("m1", "query", "s", "o", ("6.1",))])
    assert "| m1 | query | k | detected | `b`, `r1` | 3 |" in table
    assert "| m2 | - | k | survived |" in table
    assert "bookworm: 1/2 detected (50%)" in table


def _parts_of(cmd: list[str]) -> tuple[list[str], list[str]]:
    at = cmd.index("--")
    return cmd[:at], cmd[at + 1:]


def test_gate_on_host_runs_every_suite_here_against_the_guest_lone_ones_first(tmp_path):
    """The host engine's gate: this host's pytest on every suite (the lone-QP ones first,
    where most mutants are caught), one executor session per worker, the first device alone
    (the executor's pairs are loopback pairs), its logs apart."""
    out, ko = tmp_path / "out", tmp_path / "siw.ko"
    vm, host = _parts_of(run.gate_command(run.Plan(driver="siw"), "bookworm", ko, out, True))
    assert vm[vm.index("--host-engine") + 1] == "2"
    assert vm[vm.index("--module") + 1] == str(ko)
    assert vm[vm.index("--log-dir") + 1] == str(out / "host-engine")
    assert host[:3] == [run.sys.executable, "-m", "pytest"]
    suites = run.ALL_SUITES
    assert tuple(host[3:3 + len(suites)]) == suites
    assert host[host.index("--device") + 1] == "siw0" and "--peer-device" not in host
    assert f"--junitxml={out / 'junit.xml'}" in host and "--maxfail=1" in host


def test_gate_on_host_runs_a_selection_of_yours_as_given(tmp_path):
    """A shrink measurement's selection (one suite, a plugin) runs on the host as the main
    job does, not inside."""
    plan = run.Plan(pytest_args=("suites/test_stateful.py", "-p", "scripts.shrink_time"))
    assert plan.uses_host_engine
    vm, host = _parts_of(run.gate_command(plan, "bookworm", tmp_path / "k.ko", tmp_path, True))
    assert "--host-engine" in vm
    assert host[3:6] == ["suites/test_stateful.py", "-p", "scripts.shrink_time"]
    assert set(run.ALL_SUITES) & set(host) == {"suites/test_stateful.py"}


def test_gate_in_guest_runs_the_selection_inside_as_its_run(tmp_path):
    out = tmp_path / "out"
    plan = run.Plan(pytest_args=("suites/test_srq.py",))
    vm, guest = _parts_of(run.gate_command(plan, "bookworm", tmp_path / "k.ko", out, False,
                                           "RUN-1"))
    assert "--host-engine" not in vm
    assert "QPCONFORM_RUN_ID=RUN-1" in vm and f"QPCONFORM_OUT_DIR={out}" in vm
    assert guest[:4] == ["python3", "-m", "pytest", "suites/test_srq.py"]
    assert f"--junitxml={out / 'junit.xml'}" in guest


@pytest.mark.parametrize(
    ("plan", "on_host"),
    [
        (run.Plan(), True),
        (run.Plan(host_engine=False), False),  # --in-guest
        (run.Plan(pytest_args=("suites/test_srq.py",)), True),  # a selection of yours too
        (run.Plan(driver="siw"), False),  # not a host-engine driver yet (qpconform.vm.host_engine)
    ],
)
def test_gate_boots_once_with_the_engine_where_the_plan_says(tmp_path, monkeypatch, plan,
                                                            on_host):
    plan.out_root = tmp_path
    ran: list[list[str]] = []

    def fake_run(cmd, **kwargs):
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 3)

    monkeypatch.setattr(run.subprocess, "run", fake_run)
    status, _, out_dir = run.gate(plan, "bookworm", "m1", tmp_path / "k.ko")
    assert status == 3 and len(ran) == 1
    assert ("--host-engine" in ran[0]) is on_host
    assert (out_dir / "console.txt").is_file()


def test_cli_in_guest_reaches_the_plan(monkeypatch):
    seen: list[run.Plan] = []
    monkeypatch.setattr(run, "main", lambda plan, output: seen.append(plan) or 0)
    assert cli.main(["mutants", "--ci-sample"]) == 0
    assert cli.main(["mutants", "--ci-sample", "--in-guest"]) == 0
    assert cli.main(["mutants", "--driver", "siw"]) == 0  # inside (qpconform/vm/host_engine.py)
    assert [plan.uses_host_engine for plan in seen] == [True, False, False]
