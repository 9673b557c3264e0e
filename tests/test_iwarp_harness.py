"""The iwarp variant end to end on fake devices: a device that behaves as the variant allows
passes every suite case and the stateful machine, and the variant hides no bug.

Two fakes stand for the Linux iWARP drivers where they differ: "siw-like" names IDLE INIT
(siw 6.12, cxgb4), refuses wherever the model lets it (siw's ENOTCONN posts) and stays put
where a "may" move lets it (siw keeps ERROR); "irdma-like" names each state as asked and
accepts. The planted siw 6.1 bug (query_qp never sets qp_state: RESET after RESET->INIT,
fixed by "RDMA/siw: Set qp_state in siw_query_qp") must be caught under iwarp too.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

from models.enums import STATES, Attr, QPState, QPType
from qpconform.engine.judge import DivergenceError
from qpconform.engine.lone import Checker
from qpconform.engine.records import DivergenceList
from reports.html import render_html
from reports.qualification import build_report
from reports.run_record import RunRecorder, merge_runs
from suites.cases import transition_groups
from tests.example_counts import PLANTED_RUN, examples, shrunk_within
from tests.fake_device import IWARP_STYLES, SIW_CAPS, FakeDevice
from tests.sequences import recv_in_err, run_iwarp_machine, run_iwarp_suites

S = QPState
RC = [QPType.RC]


def _device(style: str, faults: tuple[str, ...] = ()) -> FakeDevice:
    return FakeDevice(faults, variant="iwarp", caps=SIW_CAPS, qp_types=RC, **IWARP_STYLES[style])


def _checker(device: FakeDevice, recorder: RunRecorder | None = None) -> Checker:
    return Checker(
        device,
        variant="iwarp",
        recorder=recorder,
        settle_window=0.0,
        must_wait=0.0,
        sink=DivergenceList(),
    )


@pytest.mark.parametrize("style", sorted(IWARP_STYLES))
def test_a_device_that_behaves_like_the_variant_passes_the_suites(style: str) -> None:
    device = _device(style)
    checker = _checker(device)
    ran = run_iwarp_suites(checker, device)
    checker.close()
    assert checker.known == []
    assert device.live == []
    assert ran > 150  # every reachable pair, its masks, the boundaries and the posts


def test_the_suites_skip_what_iwarp_does_not_have() -> None:
    """UD, UC, XRC and RAW QPs: one reported skip each; RTS and beyond: not reachable."""
    skipped = [g for g in transition_groups("iwarp") if g.skip is not None]
    assert {g.qp_type for g in skipped if "no UD QPs" in g.skip} == {QPType.UD}
    reasons = {g.skip for g in transition_groups("iwarp", RC) if g.skip is not None}
    assert reasons == {
        "RTS is not reachable by modify_qp",
        "SQD is not reachable by modify_qp",
        SQE_SKIP,
    }


SQE_SKIP = "SQE is entered only by a send error: covered by the error-handling suite"


@pytest.mark.parametrize("style", sorted(IWARP_STYLES))
def test_a_device_that_behaves_like_the_variant_passes_the_machine(
    style: str, tmp_path: Path
) -> None:
    device = _device(style)
    known = run_iwarp_machine(device, tmp_path, max_examples=examples(120),
                              stateful_step_count=10)
    assert known == []
    assert device.live == []
    assert len(device.qps) > examples(120)


def test_siw_6_1_query_bug_is_caught_by_a_targeted_sequence() -> None:
    """A fresh QP reading RESET is one of IDLE's names; RESET after RESET->INIT is not."""
    device = _device("siw-like", ("query_state_unset",))
    checker = _checker(device)
    qp = checker.open_qp(QPType.RC)
    qp.query()  # fresh: RESET is a name of IDLE (irdma reports it too)
    with pytest.raises(DivergenceError) as caught:
        qp.bring_to(S.INIT)
    record = caught.value.record
    assert (record.rule_id, record.kind) == ("iwarp.transition.RC.RESET->INIT", "state")
    assert (record.rule_kind, record.rule_layer) == ("must", "driver")
    assert "state INIT" in record.expected and "state RESET" in record.observed
    checker.close()


def test_siw_6_1_query_bug_is_found_and_shrunk_by_the_machine(tmp_path: Path) -> None:
    device = _device("siw-like", ("query_state_unset",))
    with pytest.raises(DivergenceError) as caught:
        run_iwarp_machine(device, tmp_path, max_examples=300, stateful_step_count=8,
                          print_blob=False, **PLANTED_RUN)
    record = caught.value.record
    assert fnmatch.fnmatchcase(record.rule_id, "iwarp.transition.RC.*->INIT"), record.rule_id
    assert record.kind == "state"
    assert shrunk_within(record.verb_steps, 3), record.format()
    script = Path(record.reproducer)
    assert script.is_file() and "RESET" in script.read_text()


def _posts_then_err(qp) -> None:
    qp.post_send()  # refused by the siw-like fake
    qp.post_recv()
    qp.post_recv()
    qp.bring_to(S.ERR)
    qp.settle()


#: Planted faults that are bugs on an iWARP QP too: (style, fault, sequence, rule, kind).
IWARP_BUGS = [
    ("siw-like", "run_failed_post", _posts_then_err, "iwarp.post_send.RESET", "completion"),
    ("irdma-like", "flush_out_of_order", _posts_then_err, "iwarp.err.flush", "order"),
    ("irdma-like", "duplicate_completion", _posts_then_err, "iwarp.err.flush", "completion"),
    (
        "irdma-like",
        "recv_in_err_unflushed",
        recv_in_err,
        "iwarp.post_recv.ERR",
        "missing_completion",
    ),
    (
        "siw-like",
        "query_state_unset",
        lambda qp: qp.bring_to(S.INIT),
        "iwarp.transition.RC.RESET->INIT",
        "state",
    ),
]


@pytest.mark.parametrize(
    ("style", "fault", "sequence", "rule", "kind"), IWARP_BUGS, ids=[b[1] for b in IWARP_BUGS]
)
def test_the_variant_hides_no_bug(style, fault, sequence, rule, kind) -> None:
    checker = _checker(_device(style, (fault,)))
    with pytest.raises(DivergenceError) as caught:
        sequence(checker.open_qp(QPType.RC))
    assert (caught.value.record.rule_id, caught.value.record.kind) == (rule, kind)
    checker.close()


def test_an_accepted_modify_to_rts_is_caught() -> None:
    """A driver that lets a plain modify bring an iWARP QP to RTS (no connection)."""
    device = _device("irdma-like", ("accept_illegal_transition",))
    checker = _checker(device)
    qp = checker.open_qp(QPType.RC)
    qp.bring_to(S.INIT)
    with pytest.raises(DivergenceError) as caught:
        qp.modify(qp.values.attrs_for(Attr.STATE, S.RTS), Attr.STATE)
    assert caught.value.record.rule_id == "iwarp.transition.invalid.INIT->RTS"
    assert caught.value.record.kind == "outcome"
    checker.close()


def test_the_report_names_the_variant_and_the_devices_naming(tmp_path: Path) -> None:
    recorder = RunRecorder(
        {"device": "siw0"},
        {"variant": "iwarp", "variant_reason": "auto: node type RNIC", "qp_types": ["RC"]},
    )
    checker = _checker(_device("siw-like"), recorder)
    qp = checker.open_qp(QPType.RC)
    for state in (S.INIT, S.RTR, S.RESET):
        qp.bring_to(state)
    qp.query()
    checker.close()
    report = build_report(merge_runs([recorder.write(tmp_path / "run-main.json")]))
    assert report["settings"]["variant"] == "iwarp"
    assert report["settings"]["variant_reason"] == "auto: node type RNIC"
    assert "variant_reason" not in {row["key"] for row in report["setting_rows"]}
    rows = {r["rule"]: r for r in report["choices"]}
    assert rows["iwarp.query.idle_state"]["choices"] == {"as INIT": 3}
    assert report["verdict"]["code"] == "conformant"
    # what the iwarp variant rules out, at a glance (models/capabilities.py)
    assert {f for f, has in report["capabilities"].items() if not has} == {
        "ALT_PATH", "XRC", "RAW_PACKET", "RATE_LIMIT", "ATOMICS"
    }
    rc = next(m for m in report["transitions"] if m["qp_type"] == "RC")
    assert not rc["cells"]["INIT"]["RTS"]["legal"]
    assert rc["cells"]["INIT"]["RTS"]["rule"] == "iwarp.transition.invalid.INIT->RTS"
    assert {s.name for s in STATES} == set(rc["cells"])
    page = render_html(report)
    assert "Model variant <b>iwarp</b> (auto: node type RNIC)" in page


def test_a_type_iwarp_lacks_must_be_refused_at_create(tmp_path: Path) -> None:
    """suites/test_transitions.py asks the device to create each type iWARP has none of:
    a refusal is exercised (the run record counts iwarp.qp_type.rc_only), a device that
    creates a UD QP under the iwarp variant diverges by that rule, with a reproducer, and
    what it created is destroyed."""
    from reports.reproducer import write_reproducer
    from suites.test_transitions import test_types_the_variant_lacks_are_refused as case

    rec = RunRecorder({"device": "fake0"}, {"variant": "iwarp", "qp_types": ["RC"]})
    device = _device("siw-like")
    case(_checker(device, rec), _checker(device).variant)
    report = build_report(merge_runs([rec.write(tmp_path / "run-main.json")]))
    row = next(r for r in report["coverage"]["rules"] if r["id"] == "iwarp.qp_type.rc_only")
    assert row["count"] == 5  # UC, UD, RAW_PACKET, XRC_SEND, XRC_RECV

    lax = FakeDevice(variant="iwarp", caps=SIW_CAPS, qp_types=[QPType.RC, QPType.UD],
                     **IWARP_STYLES["siw-like"])
    sink = DivergenceList()
    checker = Checker(lax, variant="iwarp", settle_window=0.0, must_wait=0.0, sink=sink,
                      reproducers=lambda d: write_reproducer(d, tmp_path / "rep"))
    with pytest.raises(DivergenceError, match=r"iwarp\.qp_type\.rc_only") as caught:
        case(checker, checker.variant)
    assert caught.value.record.qp_type == "UD"
    assert caught.value.record.verb == "create"
    assert Path(caught.value.record.reproducer).exists()
    assert lax.live == []
