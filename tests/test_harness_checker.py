"""The checker's bookkeeping, quirk matching, divergence records and messages (fake device)."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from fixtures.selection import QUIRKS_DIR
from models.enums import Attr, QPState, QPType
from qpconform.adapters.identity import driver_family
from qpconform.engine.judge import DivergenceError
from qpconform.engine.lone import Checker
from qpconform.engine.quirks import Quirks
from qpconform.engine.records import Divergence, DivergenceList
from qpconform.engine.text import mask_names
from reports.divergence import DivergenceStore, read_divergences
from tests.fake_device import FakeDevice

S = QPState

ILLEGAL_QUIRK = """
[[quirk]]
id = "fake.init_to_rts"
rule = "linux.transition.invalid.INIT->RTS"
qp_types = ["RC"]
kinds = ["outcome"]
observed = { outcome = "accepted" }
reason = "the fake skips the table for INIT->RTS"
evidence = ["tests/fake_device.py accept_illegal_transition"]

[[quirk]]
id = "fake.never_matches"
rule = "ibta.sqd.*"
reason = "nothing in these tests raises it"
evidence = ["none"]
"""


class Recorder:
    """A RunRecorder stand-in that keeps what it is told (steps; records are the sink's)."""

    def __init__(self) -> None:
        self.steps: list[tuple[Any, ...]] = []

    def step(self, *args: Any) -> None:
        self.steps.append(args)

    def choice(self, *args: Any) -> None:
        return None  # no characteristics kept here


def _checker(device: FakeDevice, **kw: Any) -> Checker:
    kw.setdefault("sink", DivergenceList())
    return Checker(device, settle_window=0.0, must_wait=0.0, **kw)


def _init_to_rts(qp: Any) -> None:
    qp.bring_to(S.INIT)
    attrs, mask = qp.values.transition_attrs(S.RTR)
    attrs["qp_state"] = int(S.RTS)
    qp.modify(attrs, mask)


# -------------------------------------------------------------------------- comparisons
def test_clean_walk_through_every_state_and_wr_fate() -> None:
    device = FakeDevice()
    recorder = Recorder()
    checker = _checker(device, recorder=recorder)
    qp = checker.open_qp(QPType.UD)
    qp.post_recv()  # refused in RESET: must never run
    qp.bring_to(S.RTS)
    qp.post_send()  # the fake completes it at once: an automatic completion
    qp.settle()
    qp.post_recv()
    qp.bring_to(S.SQD)
    qp.bring_to(S.ERR)  # the receive is flushed
    qp.post_send()  # flushed too
    qp.settle()
    assert qp.query().state == S.ERR
    qp.destroy()
    assert device.live == [] and checker.qps == []
    verbs = [s["verb"] for s in qp.steps]
    assert verbs.count("settle") == 2 and verbs[-1] == "destroy"
    assert {r[-1] for r in recorder.steps} == {"match"}
    assert ("UD", "modify", "RTS", "SQD") in {r[:4] for r in recorder.steps}


def test_path_to_goes_through_reset_when_it_must() -> None:
    checker = _checker(FakeDevice())
    qp = checker.open_qp(QPType.RC)
    qp.bring_to(S.ERR)
    assert qp.values.path_to(S.RTS) == [S.RESET, S.INIT, S.RTR, S.RTS]
    with pytest.raises(ValueError):
        qp.values.path_to(S.SQE)
    checker.close()


def test_divergence_message_is_a_readable_report() -> None:
    checker = _checker(FakeDevice(["accept_illegal_transition"]))
    qp = checker.open_qp(QPType.RC)
    with pytest.raises(DivergenceError) as caught:
        _init_to_rts(qp)
    text = str(caught.value)
    for part in ("RC in INIT, modify", "mask     : ", "expected : refused (EINVAL)",
                 "observed : accepted, state RTS", "linux.transition.invalid.INIT->RTS",
                 "qp_state_table[IB_QPS_INIT][IB_QPS_RTS]", "steps (2 verbs)",
                 "1. modify ACCESS_FLAGS|PKEY_INDEX|PORT|STATE"):
        assert part in text, part
    record = caught.value.record
    assert record.state == "INIT" and record.verb == "modify" and record.qp_num == qp.qp_num
    assert "STATE" in record.mask and record.attrs["qp_state"] == int(S.RTS)
    assert record.device["device"] == "fake0" and record.device["gid_index"] == "1"
    assert record.known_quirk is None and qp.broken
    checker.close()


def test_unknown_divergence_goes_to_the_sink_only() -> None:
    """The sink is the one record path: the recorder counts the step, keeps no record."""
    sink, recorder = DivergenceList(), Recorder()
    checker = _checker(FakeDevice(["lost_flush"]), sink=sink, recorder=recorder)
    qp = checker.open_qp(QPType.UC)
    qp.bring_to(S.INIT)
    qp.post_recv()
    qp.bring_to(S.ERR)
    with pytest.raises(DivergenceError, match="no such completion within"):
        qp.settle()
    assert [d.kind for d in sink.items] == ["missing_completion"]
    assert not hasattr(recorder, "divergences")
    qp.destroy()  # a broken QP is destroyed without another comparison
    assert checker.qps == []


def test_settle_waits_a_bounded_time_for_what_is_due() -> None:
    checker = Checker(FakeDevice(["lost_flush"]), settle_window=0.01, must_wait=0.05,
                      sink=DivergenceList())
    qp = checker.open_qp(QPType.RC)
    qp.bring_to(S.INIT)
    qp.post_recv()
    qp.bring_to(S.ERR)
    with pytest.raises(DivergenceError) as caught:
        qp.settle()
    waited = float(caught.value.record.observed.split("within ")[1].split(" s")[0])
    assert 0.05 <= waited < 1.0
    checker.close()


def test_mask_names_shows_undefined_bits() -> None:
    assert mask_names(int(Attr.STATE | Attr.PORT) | 1 << 22) == ["PORT", "STATE", "BIT22"]


# ------------------------------------------------------------------------------ quirks
def test_known_divergence_passes_and_model_follows_device() -> None:
    quirks = Quirks.from_toml(ILLEGAL_QUIRK, family="fake")
    recorder = Recorder()
    checker = _checker(FakeDevice(["accept_illegal_transition"]), quirks=quirks,
                       recorder=recorder)
    qp = checker.open_qp(QPType.RC)
    _init_to_rts(qp)  # accepted by the fake, known: no error
    assert qp.model.state == S.RTS  # the model followed the device
    qp.check_state()
    qp.bring_to(S.SQD)  # and the run goes on from there
    [known] = checker.known
    assert known.known_quirk == "fake.init_to_rts" and "outcome=accepted" in known.tags
    assert qp.steps[1]["known"] == ["fake.init_to_rts"]
    assert quirks.hits["fake.init_to_rts"] == 1
    assert [q.id for q in quirks.stale()] == ["fake.never_matches"]
    assert "known" in {r[-1] for r in recorder.steps}
    checker.close()


def test_quirk_conditions_restrict_the_match() -> None:
    quirks = Quirks.from_toml(ILLEGAL_QUIRK)
    checker = _checker(FakeDevice(["accept_illegal_transition"]), quirks=quirks)
    qp = checker.open_qp(QPType.UC)  # the quirk names RC only
    with pytest.raises(DivergenceError):
        _init_to_rts(qp)
    assert [q.id for q in quirks.stale()] == ["fake.init_to_rts", "fake.never_matches"]
    checker.close()


def test_known_missing_completion_is_excused_even_if_it_comes_late() -> None:
    quirks = Quirks.from_toml("""
[[quirk]]
id = "fake.flush_lost"
rule = "ibta.err.flush"
kinds = ["missing_completion"]
reason = "r"
evidence = ["e"]
""")
    checker = _checker(FakeDevice(["lost_flush"]), quirks=quirks)
    qp = checker.open_qp(QPType.RC)
    qp.bring_to(S.INIT)
    qp.post_recv()
    qp.bring_to(S.ERR)
    qp.settle()
    assert [d.kind for d in checker.known] == ["missing_completion"]
    assert quirks.stale() == []
    checker.close()


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('[[quirk]]\nid = "a"\nrule = "r"\nreason = "x"\nevidence = ["e"]\nverb = ["m"]\n',
         "unknown key"),
        ('[[quirk]]\nid = "a"\nrule = "r"\nreason = "x"\n', "evidence is required"),
        ('[[quirk]]\nid = "a"\nrule = 3\nreason = "x"\nevidence = ["e"]\n', "rule must be"),
    ],
)
def test_quirk_file_mistakes_are_named(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        Quirks.from_toml(text)


def test_shipped_quirk_files_load() -> None:
    files = sorted(QUIRKS_DIR.glob("*.toml"))
    assert files, "fixtures/quirks/ has no quirk file"
    for path in files:
        quirks = Quirks.load(path)
        assert all(q.evidence and q.reason for q in quirks)
    assert Quirks.load(QUIRKS_DIR / "rxe.toml").family == "rxe"
    assert driver_family("mlx5_0") == "mlx5" and driver_family("rxe0") == "rxe"


# ------------------------------------------------------------------------------ records
def _record(rule: str = "r.x") -> Divergence:
    return Divergence(
        qp_type="RC", state="INIT", verb="modify", attrs={"qp_state": 3}, mask=["STATE"],
        expected="refused", observed="accepted", rule_id=rule, rule_summary="s",
        source="src", device={"device": "fake0"}, steps=[{"verb": "modify"}],
    )


def test_record_round_trips_through_json(tmp_path: Path) -> None:
    path = tmp_path / "divergences.json"
    DivergenceStore(path).add(_record("a"))
    DivergenceStore(path).add(_record("b"))
    saved = read_divergences(path)
    assert [d["rule_id"] for d in saved] == ["a", "b"]
    again = Divergence.from_dict(json.loads(json.dumps(saved[0])))
    assert again == _record("a") and again.id == _record("a").id


def _append_many(path: str, worker: int) -> None:
    for i in range(20):
        DivergenceStore(path).add(_record(f"w{worker}.{i}"))


def test_concurrent_appends_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "divergences.json"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(str(path), w)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert len(read_divergences(path)) == 60


def test_divergence_list_keeps_the_shortest_of_each_kind() -> None:
    sink = DivergenceList(only_known=True)
    long = _record().with_(steps=[{"verb": "modify"}] * 3, known_quirk="q")
    short = _record().with_(known_quirk="q")
    for d in (long, short):
        sink.add(d)
    sink.add(_record())  # unknown: dropped
    assert sink.distinct() == [short]


SQD_EXIT_QUIRK = """
[[quirk]]
id = "fake.sqd_exit_refused"
rule = ["linux.transition.*.SQD->RESET", "linux.transition.*.SQD->RTS"]
observed = { errno = "EINVAL" }
reason = "planted"
evidence = ["tests/fake_device.py refuse_sqd_exit"]
"""


def test_bring_to_routes_around_a_hop_refused_as_a_known_quirk():
    """SQD->RESET and SQD->RTS refused (known): the walk to INIT goes through ERR instead."""
    quirks = Quirks.from_toml(SQD_EXIT_QUIRK)
    chk = Checker(FakeDevice(["refuse_sqd_exit"]), quirks=quirks, sink=DivergenceList(),
                  settle_window=0.0, must_wait=0.0)
    qp = chk.open_qp(QPType.RC)
    qp.bring_to(QPState.SQD)
    qp.bring_to(QPState.INIT)
    assert qp.model.state == QPState.INIT == qp.query().state
    targets = [s["expect"]["state_if_accepted"] for s in qp.steps if s["verb"] == "modify"]
    assert targets[-5:] == ["RESET", "RTS", "ERR", "RESET", "INIT"]  # two refused, then around
    assert quirks.hits["fake.sqd_exit_refused"] == 2


def test_bring_to_fails_on_an_unknown_refusal():
    chk = Checker(FakeDevice(["refuse_sqd_exit"]), sink=DivergenceList(), settle_window=0.0,
                  must_wait=0.0)
    qp = chk.open_qp(QPType.RC)
    qp.bring_to(QPState.SQD)
    with pytest.raises(DivergenceError, match="SQD->RESET"):
        qp.bring_to(QPState.INIT)


def test_delivery_delays_are_measured_for_completions_and_events() -> None:
    from qpconform.engine.timing import DeliveryLog

    log = DeliveryLog()
    chk = Checker(FakeDevice(), sink=DivergenceList(), settle_window=0.0,
                  must_wait=0.0, delivery=log)
    qp = chk.open_qp(QPType.RC)
    qp.bring_to(QPState.INIT)
    qp.post_recv()
    qp.post_recv()
    qp.bring_to(QPState.ERR)  # two flushes due
    qp.settle()
    qp2 = chk.open_qp(QPType.UD)
    qp2.bring_to(QPState.RTS)
    mask = Attr.STATE | Attr.EN_SQD_ASYNC_NOTIFY
    qp2.modify({**qp2.values.attrs_for(mask, QPState.SQD), "en_sqd_async_notify": 1}, mask)
    qp2.settle()  # SQ_DRAINED required
    chk.close()
    summary = log.summary()  # a lone QP's flushes: scoped apart from a pair's deliveries
    done, drained = summary["lone QP completion"], summary["lone QP event"]
    assert done["count"] == 2 and drained["count"] == 1
    assert 0 <= done["p50_ms"] <= done["max_ms"]
    assert log.text().startswith("lone QP completions: 2, p50 ")


def test_the_after_context_names_a_modify_into_the_state_the_qp_was_in() -> None:
    """RESET->RESET is an entry into RESET for a driver (irdma errors its hardware QP on any
    ->RESET): `after` names it, on a new QP and after an earlier entry, and forgets it once
    the QP enters RESET from elsewhere."""
    checker = Checker(FakeDevice(), settle_window=0.0, must_wait=0.0, sink=DivergenceList())
    qp = checker.open_qp(QPType.RC)
    assert qp.track.context(qp.track.last())["after"] == []
    qp.modify(qp.values.attrs_for(Attr.STATE, S.RESET), Attr.STATE)
    assert qp.track.context(qp.track.last())["after"] == ["RESET->RESET"]
    qp.bring_to(S.INIT)
    qp.bring_to(S.RESET)
    assert qp.track.context(qp.track.last())["after"] == ["INIT->RESET", "RESET->INIT"]
    qp.modify(qp.values.attrs_for(Attr.STATE, S.RESET), Attr.STATE)
    after = qp.track.context(qp.track.last())["after"]
    assert after == ["INIT->RESET", "RESET->INIT", "RESET->RESET"]
    qp.modify(qp.values.attrs_for(Attr.SQ_PSN), Attr.SQ_PSN)  # refused: no entry into anything
    assert qp.track.context(qp.track.last())["after"] == after
    checker.close()
