"""Each source-predicted profile against a fake device written from its driver's code.

tests/driver_fakes.py has one fake per NIC driver (mlx5, bnxt_re, irdma, efa, hns), its
behaviour taken from the code the profile cites, not from the model. With its profile the
fake runs the linux suites (transition, attribute and post cases) and the stateful machine
with no unknown divergence, matches exactly the entries it exercises (an entry it cannot
reach is named below with why), and the report shows the features it lacks and what it
chose where the model lets a driver choose. Without the profile each deviation is the
divergence its entry names; with the profile it is known, once. A fake with one deviation
bent (another errno, another state) is not covered.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fixtures.selection import QUIRKS_DIR
from models.enums import MTU, Attr, QPState, QPType
from qpconform.engine.judge import DivergenceError
from qpconform.engine.lone import CheckedQP, Checker
from qpconform.engine.quirks import Quirk, Quirks
from qpconform.engine.records import DivergenceList
from reports.divergence import DivergenceStore
from reports.qualification import build_report
from reports.run_record import RunRecorder, merge_runs
from suites import steps
from suites.cases import attribute_groups, post_groups, transition_groups
from tests.driver_fakes import (
    ETHERNET_1500,
    JUMBO,
    K612,
    RDMA_CORE,
    RDMA_CORE_OLD,
    DriverFake,
    driver_fake,
)
from tests.sequences import drain, extra_bit_without_state, recv_in_err, run_stateful, run_suites

S = QPState
T = QPType
UNDEFINED_ACCESS_BIT = 1 << 30
NO_BITS = Attr(0)


@dataclass(frozen=True)
class Run:
    """One driver fake under one rdma-core release (libbnxt_re changed its post checks)."""

    driver: str
    rdma_core: str = RDMA_CORE
    netdev_mtu: MTU = JUMBO

    def device(self, bend: str | None = None, delay: float = 0.0) -> DriverFake:
        return driver_fake(self.driver, rdma_core=self.rdma_core, bend=bend, delay=delay,
                           netdev_mtu=self.netdev_mtu)

    def quirks(self) -> Quirks:
        """The driver's profile, as a run on this kernel and rdma-core loads it."""
        whole = Quirks.load(QUIRKS_DIR / f"{self.driver}.toml")
        return whole.for_run({"kernel": K612, "rdma_core": self.rdma_core})


RUNS = {
    "mlx5": Run("mlx5"),
    "bnxt_re": Run("bnxt_re"),
    "bnxt_re-rdma-core-46": Run("bnxt_re", RDMA_CORE_OLD),
    "irdma": Run("irdma"),
    "efa": Run("efa"),
    "hns": Run("hns"),
    # a plain 1500-byte Ethernet netdev: active_mtu 1024 below max_mtu 4096
    "mlx5-netdev-1500": Run("mlx5", netdev_mtu=ETHERNET_1500),
    "bnxt_re-netdev-1500": Run("bnxt_re", netdev_mtu=ETHERNET_1500),
    "hns-netdev-1500": Run("hns", netdev_mtu=ETHERNET_1500),
}
#: Runs on a 1500-byte netdev and the run they otherwise equal.
NETDEV_1500 = {"mlx5-netdev-1500": "mlx5", "bnxt_re-netdev-1500": "bnxt_re",
               "hns-netdev-1500": "hns"}

#: The entries the suites match on each fake (exactly these).
SUITES: dict[str, set[str]] = {
    "mlx5": {"mlx5.no_rts_to_sqd", "mlx5.post_below_rts_accepted"},
    "bnxt_re": {
        "bnxt_re.attr_only_modify_not_table_checked", "bnxt_re.cur_state_ignored",
        "bnxt_re.max_rd_atomic_capped", "bnxt_re.max_dest_rd_atomic_checked_against_init_rd_atom",
        "bnxt_re.path_mtu_zero_accepted", "bnxt_re.pkey_index_unchecked",
        "bnxt_re.post_below_rts_accepted", "bnxt_re.max_rd_atomic_reads_back_capped",
    },
    "irdma": {
        "irdma.attr_only_modify_not_table_checked", "irdma.cur_state_ignored",
        "irdma.path_mtu_unchecked", "irdma.post_below_rts_accepted",
    },
    "efa": {
        "efa.unsupported_mask_bits_eopnotsupp", "efa.pkey_index_nonzero_eopnotsupp",
        "efa.post_send_refused_in_err", "efa.post_recv_refused_in_err",
    },
    "hns": {"hns.no_rts_to_sqd"},
}
SUITES["bnxt_re-rdma-core-46"] = (
    SUITES["bnxt_re"] - {"bnxt_re.post_below_rts_accepted"} | {"bnxt_re.post_in_err_refused"}
)
#: Entries only the stateful machine reaches (every case of the suites uses a fresh QP and
#: asks for no SQ_DRAINED): it must match them; it may match any of SUITES too.
MACHINE: dict[str, set[str]] = {
    "mlx5": set(),
    "bnxt_re": {"bnxt_re.sq_drained_never_raised"},
    "bnxt_re-rdma-core-46": {"bnxt_re.sq_drained_never_raised"},
    "irdma": {"irdma.reset_is_hw_error_reinit_refused", "irdma.sq_drained_never_raised"},
    "efa": {"efa.sq_drained_never_raised"},
    "hns": set(),
}
_ACCESS = (
    "its rule attr.qp_access_flags.defined is the ibta variant's: under linux an undefined "
    "access bit falls under the may rule attr.qp_access_flags.driver, so accepting it is a "
    "characteristic, not a divergence (covered under ibta by test_without_the_profile...)"
)
#: Applicable entries neither the suites nor the machine match on the fake, and why.
UNREACHED: dict[str, dict[str, str]] = {
    "mlx5": {
        "mlx5.reset_drops_unpolled_completions": (
            "intermittent: the suites settle after every post and the machine after every "
            "rule, so no completion is ever unpolled when ->RESET comes (a targeted sequence "
            "below moves ERR->RESET before polling)"
        ),
    },
    "bnxt_re": {"bnxt_re.access_flags_unchecked": _ACCESS},
    "bnxt_re-rdma-core-46": {"bnxt_re.access_flags_unchecked": _ACCESS},
    "irdma": {"irdma.access_flags_unchecked": _ACCESS},
    "efa": {},
    "hns": {"hns.access_flags_unchecked": _ACCESS},
}
_WIDTHS = {f"attr.{f}.width": {"accepted"}
           for f in ("dest_qp_num", "min_rnr_timer", "retry_cnt", "rnr_retry", "timeout")}
_RC_CHOICES = {
    **_WIDTHS, "attr.qp_access_flags.driver": {"accepted"},
    "attr.path_mig_state.armed": {"accepted"},
}
#: What each fake chose where the model lets the driver choose (the report's
#: characteristics): mlx5 and efa pass an asserted CUR_STATE to the firmware (the model's
#: accept); bnxt_re and irdma check the table from their own state, so a wrong CUR_STATE is
#: accepted or refused; hns refuses any CUR_STATE but its own. No driver refuses an
#: over-wide timeout, retry count or QPN, nor an undefined access bit; the RC fakes take
#: path_mig_state ARMED (mlx5 stores it; rdmavt, not faked here, refuses it).
#: query_qp's cur_qp_state: the state (mlx5, bnxt_re, irdma, hns), or 0 (efa's memset).
_CUR = {"query.cur_qp_state": {"as qp_state"}}
CHOICES: dict[str, dict[str, set[str]]] = {
    "mlx5": {**_RC_CHOICES, **_CUR, "linux.cur_state.assumed": {"accepted"}},
    "bnxt_re": {**_RC_CHOICES, **_CUR,
                "linux.cur_state.assumed": {"accepted", "refused (EINVAL)"}},
    "irdma": {**_RC_CHOICES, **_CUR, "linux.cur_state.assumed": {"accepted", "refused (EINVAL)"}},
    "efa": {"linux.cur_state.assumed": {"accepted"},
            "query.cur_qp_state": {"RESET (not written)"}},
    "hns": {**_RC_CHOICES, **_CUR, "linux.cur_state.assumed": {"refused (EINVAL)"}},
}
CHOICES["bnxt_re-rdma-core-46"] = CHOICES["bnxt_re"]
#: A path MTU above the netdev's (2048, 4096 over 1500 bytes): mlx5 takes it, bnxt_re
#: (at ->RTR) and hns refuse it; both conform (attr.path_mtu.above_active).
_ABOVE_ACTIVE = {"mlx5": "accepted", "bnxt_re": "refused (EINVAL)", "hns": "refused (EINVAL)"}
for _run, _base in NETDEV_1500.items():
    SUITES[_run], MACHINE[_run], UNREACHED[_run] = SUITES[_base], MACHINE[_base], UNREACHED[_base]
    CHOICES[_run] = {**CHOICES[_base], "attr.path_mtu.above_active": {_ABOVE_ACTIVE[_base]}}
#: The optional features each fake lacks (capability rows, from matched feature entries).
MISSING = {"mlx5": {"SQD": "mlx5.no_rts_to_sqd"}, "hns": {"SQD": "hns.no_rts_to_sqd"}}
#: Machine size: enough for every MACHINE entry, derandomized (about a second per fake).
MACHINE_EXAMPLES, MACHINE_STEPS = 80, 10


def _checker(device: DriverFake, quirks: Quirks | None, variant: str = "linux",
             recorder: RunRecorder | None = None, sink: Any = None) -> Checker:
    return Checker(device, variant=variant, quirks=quirks, recorder=recorder,
                   settle_window=0.0, must_wait=0.0,
                   sink=sink if sink is not None else DivergenceList())


# ----------------------------------------------------------------------- with the profile
@pytest.mark.parametrize("run_id", RUNS)
def test_every_applicable_entry_is_exercised_or_named(run_id: str) -> None:
    """The fake accounts for its whole profile: each applicable entry is matched by the
    suites or the machine, or named in UNREACHED with why (never two of these)."""
    ids = {q.id for q in RUNS[run_id].quirks()}
    parts = [SUITES[run_id], MACHINE[run_id], set(UNREACHED[run_id])]
    assert set().union(*parts) == ids
    assert sum(len(p) for p in parts) == len(ids)


@pytest.mark.parametrize("run_id", RUNS)
def test_the_suites_know_every_divergence_and_report_lacks_and_choices(
    run_id: str, tmp_path: Path
) -> None:
    """Every linux suite case on the fake's QP types: no unknown divergence, exactly the
    entries SUITES names matched; the report's capability rows (features the fake lacks)
    and characteristics (its choices under may rules) are the driver's; the groups that
    start in a state the fake cannot reach (SQD on mlx5 and hns) are skips saying so."""
    run = RUNS[run_id]
    device = run.device()
    quirks = run.quirks()
    recorder = RunRecorder(device.identity(), {"variant": "linux"})
    recorder.quirks_described(quirks.described)
    store = DivergenceStore(tmp_path / "divergences.json")  # the run's, beside its record
    checker = _checker(device, quirks, recorder=recorder, sink=store)
    types = device.supported_qp_types()
    done = run_suites(checker, device, "linux", types)  # fails on an unknown divergence
    checker.close()
    assert done.ran > 600
    assert {d.known_quirk for d in checker.known} == SUITES[run_id]

    report = build_report(merge_runs([recorder.write(tmp_path / "run-main.json")]))
    assert report["verdict"]["code"] == "conformant-with-known-divergences"
    lacks = MISSING.get(run.driver, {})
    assert {r["feature"]: r["quirk"] for r in report["missing_features"]} == lacks
    assert {f for f, has in report["capabilities"].items() if not has} == set(lacks)
    choices = {r["rule"]: set(r["choices"]) for r in report["choices"]}
    assert choices == CHOICES[run_id]

    # the groups a missing SQD keeps from running are skips saying so; nothing else is
    groups = [*transition_groups("linux", types), *attribute_groups("linux", types),
              *post_groups("linux", types)]
    from_sqd = {g.id for g in groups if g.skip is None and g.cur == S.SQD}
    lacking = {gid for gid, why in done.skipped.items() if "not supported" in why}
    assert lacking == (from_sqd if "SQD" in lacks else set())
    assert all("cannot reach SQD" in done.skipped[gid] for gid in lacking)
    unfit = set(done.skipped) - lacking
    assert all(g.cases[0].unfit_reason(device.caps) for g in groups if g.id in unfit)


@pytest.mark.parametrize("run_id", RUNS)
def test_the_stateful_machine_knows_every_divergence(run_id: str, tmp_path: Path) -> None:
    """Random sequences (derandomized) on the fake: no unknown divergence; the entries only
    the machine reaches (a QP reused after RESET, a drain asking for SQ_DRAINED) match, and
    nothing outside the entries the fake exercises does."""
    run = RUNS[run_id]
    device = run.device()
    known = run_stateful(device, tmp_path, "linux", device.supported_qp_types(), run.quirks(),
                         max_examples=MACHINE_EXAMPLES, stateful_step_count=MACHINE_STEPS)
    matched = {d.known_quirk for d in known}
    assert MACHINE[run_id] <= matched <= SUITES[run_id] | MACHINE[run_id]


# --------------------------------------------------------- each deviation, one at a time
def _modify(cur: QPState, nxt: QPState, extra: Attr = NO_BITS, **values: int
            ) -> Callable[[CheckedQP], None]:
    """Bring a QP to `cur`, then cur->nxt with the required mask | extra, and `values`."""
    def sequence(qp: CheckedQP) -> None:
        steps.bring_to(qp, cur)
        attrs, mask = qp.values.transition_attrs(nxt)
        attrs.update(qp.values.attrs_for(mask | extra, nxt))
        attrs.update(values)
        qp.modify(attrs, mask | extra)
    return sequence


def _post(verb: str, state: QPState) -> Callable[[CheckedQP], None]:
    def sequence(qp: CheckedQP) -> None:
        steps.bring_to(qp, state)
        getattr(qp, verb)()
        qp.settle()
    return sequence


def _drained_event(qp: CheckedQP) -> None:
    drain(qp, notify=True)
    qp.settle()


def _reset_then_init(qp: CheckedQP) -> None:
    qp.bring_to(S.INIT)
    qp.bring_to(S.RESET)
    qp.modify(*qp.values.transition_attrs(S.INIT))


def _flush_then_reset(qp: CheckedQP) -> None:
    """A receive flushed by ->ERR, then ->RESET before anything polled the CQ."""
    qp.bring_to(S.INIT)
    qp.post_recv()
    qp.bring_to(S.ERR)
    qp.bring_to(S.RESET)
    qp.settle()


@dataclass(frozen=True)
class Deviation:
    """A sequence that shows one entry's behaviour, and the record it gives."""

    run: str
    quirk: str
    sequence: Callable[[CheckedQP], None]
    kind: str
    rule: str
    variant: str = "linux"


_CUR_INIT = _modify(S.RTR, S.RTS, Attr.CUR_STATE, cur_qp_state=int(S.INIT))
_RTS_TO_SQD = _modify(S.RTS, S.SQD)
_UNDEFINED_ACCESS = _modify(S.RESET, S.INIT, qp_access_flags=UNDEFINED_ACCESS_BIT)
_PKEY_PAST_TABLE = _modify(S.RESET, S.INIT, pkey_index=1)
DEVIATIONS = [
    Deviation("mlx5", "mlx5.no_rts_to_sqd", _RTS_TO_SQD, "outcome",
              "linux.transition.RC.RTS->SQD"),
    Deviation("mlx5", "mlx5.post_below_rts_accepted", _post("post_send", S.INIT), "outcome",
              "ibta.post_send.INIT"),
    Deviation("mlx5", "mlx5.reset_drops_unpolled_completions", _flush_then_reset,
              "missing_completion", "ibta.err.flush"),
    Deviation("bnxt_re", "bnxt_re.attr_only_modify_not_table_checked", extra_bit_without_state,
              "outcome", "linux.transition.RC.INIT->INIT.extra"),
    Deviation("bnxt_re", "bnxt_re.cur_state_ignored", _CUR_INIT, "outcome",
              "linux.cur_state.allowed"),
    Deviation("bnxt_re", "bnxt_re.max_rd_atomic_capped",
              _modify(S.RTR, S.RTS, max_rd_atomic=17), "outcome", "attr.max_rd_atomic.range"),
    Deviation("bnxt_re", "bnxt_re.max_rd_atomic_reads_back_capped",
              _modify(S.RTR, S.RTS, max_rd_atomic=16), "readback", "attr.readback"),
    Deviation("bnxt_re", "bnxt_re.max_dest_rd_atomic_checked_against_init_rd_atom",
              _modify(S.INIT, S.RTR, max_dest_rd_atomic=9), "outcome",
              "attr.max_dest_rd_atomic.range"),
    Deviation("bnxt_re", "bnxt_re.path_mtu_zero_accepted", _modify(S.INIT, S.RTR, path_mtu=0),
              "outcome", "attr.path_mtu.range"),
    Deviation("bnxt_re", "bnxt_re.pkey_index_unchecked", _PKEY_PAST_TABLE, "outcome",
              "attr.pkey_index.range"),
    Deviation("bnxt_re", "bnxt_re.access_flags_unchecked", _UNDEFINED_ACCESS, "outcome",
              "attr.qp_access_flags.defined", "ibta"),
    Deviation("bnxt_re", "bnxt_re.post_below_rts_accepted", _post("post_send", S.RTR),
              "outcome", "ibta.post_send.RTR"),
    Deviation("bnxt_re-rdma-core-46", "bnxt_re.post_in_err_refused", recv_in_err, "outcome",
              "ibta.post_recv.ERR"),
    Deviation("bnxt_re", "bnxt_re.sq_drained_never_raised", _drained_event, "missing_event",
              "ibta.sqd.drained_event"),
    Deviation("irdma", "irdma.reset_is_hw_error_reinit_refused", _reset_then_init, "outcome",
              "linux.transition.RC.RESET->INIT"),
    Deviation("irdma", "irdma.attr_only_modify_not_table_checked", extra_bit_without_state,
              "outcome", "linux.transition.RC.INIT->INIT.extra"),
    Deviation("irdma", "irdma.cur_state_ignored", _CUR_INIT, "outcome",
              "linux.cur_state.allowed"),
    Deviation("irdma", "irdma.path_mtu_unchecked", _modify(S.INIT, S.RTR, path_mtu=6),
              "outcome", "attr.path_mtu.range"),
    Deviation("irdma", "irdma.access_flags_unchecked", _UNDEFINED_ACCESS, "outcome",
              "attr.qp_access_flags.defined", "ibta"),
    Deviation("irdma", "irdma.post_below_rts_accepted", _post("post_recv", S.RESET),
              "outcome", "ibta.post_recv.RESET"),
    Deviation("irdma", "irdma.sq_drained_never_raised", _drained_event, "missing_event",
              "ibta.sqd.drained_event"),
    Deviation("efa", "efa.unsupported_mask_bits_eopnotsupp",
              _modify(S.RESET, S.INIT, Attr.PATH_MTU), "outcome",
              "linux.transition.UD.RESET->INIT.extra"),
    Deviation("efa", "efa.pkey_index_nonzero_eopnotsupp", _PKEY_PAST_TABLE, "outcome",
              "attr.pkey_index.range"),
    Deviation("efa", "efa.post_send_refused_in_err", _post("post_send", S.ERR), "outcome",
              "ibta.post_send.ERR"),
    Deviation("efa", "efa.post_recv_refused_in_err", recv_in_err, "outcome",
              "ibta.post_recv.ERR"),
    Deviation("efa", "efa.sq_drained_never_raised", _drained_event, "missing_event",
              "ibta.sqd.drained_event"),
    Deviation("hns", "hns.no_rts_to_sqd", _RTS_TO_SQD, "outcome",
              "linux.transition.RC.RTS->SQD"),
    Deviation("hns", "hns.access_flags_unchecked", _UNDEFINED_ACCESS, "outcome",
              "attr.qp_access_flags.defined", "ibta"),
]


def _entry(run: Run, quirk_id: str) -> Quirk:
    return next(q for q in run.quirks() if q.id == quirk_id)


def _qp(checker: Checker) -> CheckedQP:
    """A QP of the fake's first QP type (RC, or UD on efa)."""
    return checker.open_qp(checker.device.supported_qp_types()[0])


def test_every_entry_has_its_sequence() -> None:
    """Each entry of every profile has a deviation sequence (under some rdma-core)."""
    shown = {d.quirk for d in DEVIATIONS}
    for run in RUNS.values():
        assert {q.id for q in run.quirks()} <= shown, run


@pytest.mark.parametrize("dev", DEVIATIONS, ids=[d.quirk for d in DEVIATIONS])
def test_without_the_profile_each_deviation_is_reported_with_its_rule(dev: Deviation) -> None:
    """Without quirks the first divergence is the one the entry names (and the entry
    covers it); with the profile the same sequence runs through, known exactly once."""
    run = RUNS[dev.run]
    bare = _checker(run.device(), None, dev.variant)
    with pytest.raises(DivergenceError) as caught:
        dev.sequence(_qp(bare))
    bare.close()
    record = caught.value.record
    assert (record.kind, record.rule_id) == (dev.kind, dev.rule)
    assert record.known_quirk is None
    assert _entry(run, dev.quirk).matches(record)

    known = _checker(run.device(), run.quirks(), dev.variant)
    dev.sequence(_qp(known))
    known.close()
    assert [d.known_quirk for d in known.known] == [dev.quirk]


NEAR_MISSES = [
    # (run, the deviation bent, sequence, kind and rule of the unknown divergence)
    ("mlx5", "no_rts_to_sqd", _RTS_TO_SQD, "outcome", "linux.transition.RC.RTS->SQD"),
    ("bnxt_re", "max_rd_atomic_capped", _modify(S.RTR, S.RTS, max_rd_atomic=17), "outcome",
     "attr.max_rd_atomic.range"),
    ("irdma", "reset_is_hw_error_reinit_refused", lambda qp: qp.bring_to(S.INIT), "outcome",
     "linux.transition.RC.RESET->INIT"),
    ("efa", "post_send_refused_in_err", _post("post_send", S.ERR), "outcome",
     "ibta.post_send.ERR"),
    ("hns", "no_rts_to_sqd", _RTS_TO_SQD, "state", "linux.transition.RC.RTS->SQD"),
    ("bnxt_re", "dest_rd_atomic_read_back_capped",
     _modify(S.INIT, S.RTR, max_dest_rd_atomic=8), "readback", "attr.readback"),
]


@pytest.mark.parametrize(("run_id", "bend", "sequence", "kind", "rule"), NEAR_MISSES,
                         ids=[f"{n[0]}-{n[1]}" for n in NEAR_MISSES])
def test_a_bent_deviation_is_not_covered(
    run_id: str, bend: str, sequence: Callable[[CheckedQP], None], kind: str, rule: str
) -> None:
    """The same fake with one deviation bent (EBUSY for EINVAL, EOPNOTSUPP for a silent
    cap, a refusal on a QP never reset, ENOMEM for EINVAL, a move that does not happen)
    is an unknown divergence under the profile."""
    run = RUNS[run_id]
    checker = _checker(run.device(bend=bend), run.quirks())
    with pytest.raises(DivergenceError) as caught:
        sequence(_qp(checker))
    checker.close()
    record = caught.value.record
    assert record.known_quirk is None
    assert (record.kind, record.rule_id) == (kind, rule)


def test_irdma_errors_a_new_qp_on_reset_to_reset_too() -> None:
    """irdma_modify_qp_roce() moves the hardware QP to ERROR on any ->RESET, RESET->RESET of
    a new QP included: the INIT that follows is refused, and the entry's after =
    RESET->RESET covers it (the engine names that self-move in the context)."""
    run = RUNS["irdma"]
    checker = _checker(run.device(), run.quirks())
    qp = _qp(checker)
    qp.modify(qp.values.attrs_for(Attr.STATE, S.RESET), Attr.STATE)
    qp.modify(*qp.values.transition_attrs(S.INIT))
    checker.close()
    assert [d.known_quirk for d in checker.known] == ["irdma.reset_is_hw_error_reinit_refused"]
    assert checker.known[0].context["after"] == ["RESET->RESET"]
