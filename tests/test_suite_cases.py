"""Host tests of the deterministic case generation (suites/cases.py): no device, no pyverbs.

The suites are only as good as their cases, so these check that every case says what the
model says: exact masks accepted, missing and extra bits refused, boundary values on the
right side of their rule, under both model variants.
"""

from collections import Counter

import pytest

from models.attributes import PSN_LIMIT, DeviceCaps
from models.enums import MTU, STATES, Attr, QPState, QPType
from models.outcomes import Expectation, Outcome
from models.qp import QPModel
from models.variant import variant
from suites import cases
from suites.cases import Bound, Case, Group

S, T = QPState, QPType
VARIANTS = ("linux", "ibta")

#: Valid values for every field (what a device's valid_attrs() gives, on port 1).
VALID: dict[str, int] = {
    "port_num": 1,
    "ah_port_num": 1,
    "ah_sgid_index": 0,
    "pkey_index": 0,
    "qkey": 0x11111111,
    "path_mtu": int(MTU.MTU_1024),
    "timeout": 14,
    "retry_cnt": 7,
    "rnr_retry": 7,
    "min_rnr_timer": 12,
    "sq_psn": 0,
    "rq_psn": 0,
    "dest_qp_num": 1,
    "max_rd_atomic": 1,
    "max_dest_rd_atomic": 1,
    "qp_access_flags": 0,
    "en_sqd_async_notify": 1,
    "path_mig_state": 0,
    "alt_port_num": 1,
    "alt_timeout": 14,
    "rate_limit": 0,
}


def _model_at(qp_type: QPType, state: QPState, var: str, caps: DeviceCaps) -> QPModel:
    """A model driven to `state` along the bring-up path, the way bring_to() does it."""
    model = QPModel(qp_type, var, caps)
    path = (S.INIT, S.ERR) if state == S.ERR else cases.forward_steps(S.RESET, state)
    for nxt in path:
        entry = model.table.lookup(qp_type, model.state, nxt)
        assert entry is not None
        exp = model.modify({**VALID, "qp_state": int(nxt)}, Attr.STATE | entry.required)
        assert exp.outcome is Outcome.ACCEPT, exp.rule
        model.apply(exp, accepted=True)
    assert model.state == state
    return model


def _outcome(case: Case, var: str, caps: DeviceCaps | None = None) -> Outcome:
    caps = caps or DeviceCaps()
    model = _model_at(case.qp_type, case.cur, var, caps)
    attrs = {**VALID, "qp_state": int(case.nxt), "cur_qp_state": int(case.cur)}
    attrs.update(case.overrides(caps))
    return model.modify(attrs, case.mask).outcome


def _by_id(groups: list[Group]) -> dict[str, Case]:
    return {c.id: c for g in groups for c in g.cases}


# ---------------------------------------------------------------------- transitions
def test_rc_init_rtr_exact_and_missing() -> None:
    by_id = _by_id(cases.transition_groups("linux", [T.RC]))
    exact = by_id["RC-INIT-RTR-exact"]
    assert exact.mask == (
        Attr.STATE
        | Attr.AV
        | Attr.PATH_MTU
        | Attr.DEST_QPN
        | Attr.RQ_PSN
        | Attr.MAX_DEST_RD_ATOMIC
        | Attr.MIN_RNR_TIMER
    )
    missing = [c for c in by_id.values() if c.id.startswith("RC-INIT-RTR-missing-")]
    assert len(missing) == 6
    assert "RC-INIT-RTR-missing-MIN_RNR_TIMER" in by_id
    for c in missing:
        assert c.bit is not None and c.mask == exact.mask & ~c.bit


@pytest.mark.parametrize("var", VARIANTS)
def test_extra_bits_are_outside_the_entry(var: str) -> None:
    table = variant(var).table
    extras = [c for g in cases.transition_groups(var) for c in g.cases if c.kind == "extra"]
    assert extras
    for c in extras:
        entry = table.lookup(c.qp_type, c.cur, c.nxt)
        assert entry is not None and c.bit is not None
        assert not c.bit & (entry.required | entry.optional | Attr.STATE | Attr.CUR_STATE)
        assert c.mask == Attr.STATE | entry.required | c.bit


@pytest.mark.parametrize("var", VARIANTS)
def test_invalid_pairs_are_state_only(var: str) -> None:
    table = variant(var).table
    for g in cases.transition_groups(var):
        if g.skip is None and g.id.endswith("-invalid"):
            assert g.nxt is not None
            assert table.lookup(g.qp_type, g.cur, g.nxt) is None
            assert [c.mask for c in g.cases] == [Attr.STATE]


def test_counts_per_type() -> None:
    groups = cases.transition_groups("linux")
    per_type = Counter((g.qp_type, g.id.rsplit("-", 1)[-1]) for g in groups)
    for t in (T.RC, T.UC, T.UD):
        assert per_type[(t, "invalid")] == 23  # 6 reachable states x 7 - 19 valid pairs
        assert per_type[(t, "exact")] == 19
        assert per_type[(t, "all")] == 7  # the SQE row, skipped
    # required bits on RESET->INIT, INIT->RTR, RTR->RTS: RC 3+6+5, UC 3+4+1, UD 3+0+1
    missing = Counter(c.qp_type for g in groups for c in g.cases if c.kind == "missing")
    assert (missing[T.RC], missing[T.UC], missing[T.UD]) == (14, 8, 4)
    # RESET->ERR becomes valid under ibta
    ibta = _by_id(cases.transition_groups("ibta", [T.RC]))
    assert "RC-RESET-ERR-exact" in ibta and "RC-RESET-ERR-invalid" not in ibta
    assert "RC-RESET-ERR-invalid" in _by_id(cases.transition_groups("linux", [T.RC]))


def test_sqe_row_is_skipped_with_its_reason() -> None:
    sqe = [g for g in cases.transition_groups("linux") if g.cur == S.SQE]
    assert len(sqe) == 7 * len(QPType)
    assert all(g.skip == cases.SQE_SKIP for g in sqe)
    assert "error-handling suite" in cases.SQE_SKIP


@pytest.mark.parametrize("var", VARIANTS)
def test_ids_unique(var: str) -> None:
    groups = [
        *cases.transition_groups(var),
        *cases.attribute_groups(var),
        *cases.post_groups(var),
    ]
    group_ids = [g.id for g in groups]
    case_ids = [c.id for g in groups for c in g.cases]
    assert len(set(group_ids)) == len(group_ids)
    assert len(set(case_ids)) == len(case_ids)


def test_test_count_budget() -> None:
    """The whole sweep stays under 3000 tests (six types, both suites' biggest variant)."""
    total = sum(
        cases.counts(f("ibta"))["tests"]
        for f in (cases.transition_groups, cases.attribute_groups, cases.post_groups)
    )
    assert total < 3000


@pytest.mark.parametrize("var", VARIANTS)
@pytest.mark.parametrize("qp_type", [T.RC, T.UC, T.UD])
def test_transition_cases_agree_with_the_model(var: str, qp_type: QPType) -> None:
    table = variant(var).table
    for g in cases.transition_groups(var, [qp_type]):
        if g.skip is not None:
            continue
        for c in g.cases:
            got = _outcome(c, var)
            entry = table.lookup(c.qp_type, c.cur, c.nxt)
            if c.kind == "exact":
                assert got is Outcome.ACCEPT, c.id
            elif c.kind in ("missing", "invalid", "extra"):
                assert got is Outcome.REFUSE, c.id
            elif c.kind == "cur-right":
                assert entry is not None
                want = Outcome.ACCEPT if Attr.CUR_STATE in entry.optional else Outcome.REFUSE
                assert got is want, c.id


def test_cur_wrong_covers_every_other_state() -> None:
    by_id = _by_id(cases.transition_groups("linux", [T.RC]))
    wrong = [c for c in by_id.values() if c.id.startswith("RC-RTS-RTS-cur-wrong-")]
    assert sorted(dict(c.attrs)["cur_qp_state"] for c in wrong) == [
        int(s) for s in STATES if s != S.RTS
    ]
    # assumed RTR: the RTR->RTS required bits come along, so the lie is well-formed
    lie = by_id["RC-RTS-RTS-cur-wrong-RTR"]
    assert Attr.SQ_PSN in lie.mask and Attr.CUR_STATE in lie.mask
    assert _outcome(lie, "linux") is Outcome.EITHER


# ---------------------------------------------------------------------- attributes
#: Fields no Linux layer before the driver checks: refused or stored masked, either conforms.
_LEFT_TO_THE_DRIVER = (
    "timeout", "retry_cnt", "rnr_retry", "min_rnr_timer", "dest_qp_num", "qp_access_flags",
)


def _expected(c: Case, var: str, caps: DeviceCaps | None = None) -> Outcome:
    field = c.attrs[0][0] if c.attrs else ""
    roce = (caps or DeviceCaps()).link_layer == "ethernet"
    if var == "linux" and c.bit == Attr.ALT_PATH and roce:
        return Outcome.REFUSE  # uverbs refuses a bad port first, the core any APM on RoCE
    if field == "path_mig_state" and not c.in_range:
        return Outcome.EITHER  # ARMED: left to the driver under every variant
    if c.in_range:
        return Outcome.ACCEPT
    if var == "linux" and field in ("sq_psn", "rq_psn"):
        return Outcome.ACCEPT  # the kernel masks PSNs to 24 bits instead of refusing them
    if var == "linux" and field in _LEFT_TO_THE_DRIVER:
        return Outcome.EITHER
    return Outcome.REFUSE


@pytest.mark.parametrize("var", VARIANTS)
@pytest.mark.parametrize(
    "caps",
    [
        DeviceCaps(),
        DeviceCaps(max_mtu=MTU.MTU_1024, pkey_tbl_len=64, phys_port_cnt=2),
        DeviceCaps(link_layer="infiniband", phys_port_cnt=2),
    ],
    ids=["default-caps", "mtu1024-2ports", "ib-2ports"],
)
def test_boundaries_fall_on_the_right_side(var: str, caps: DeviceCaps) -> None:
    seen = 0
    for g in cases.attribute_groups(var):
        if g.qp_type not in (T.RC, T.UC, T.UD):
            continue
        (c,) = g.cases
        if c.unfit_reason(caps) is not None:
            continue
        got = _outcome(c, var, caps)
        assert got is _expected(c, var, caps), (c.id, var)
        seen += 1
    assert seen > 50


def test_boundaries_sit_at_the_transition_that_takes_them() -> None:
    by_id = _by_id(cases.attribute_groups("linux"))
    assert "RC-RTR-RTS-timeout-32" in by_id
    assert "RC-INIT-RTR-min_rnr_timer-32" in by_id
    assert "UD-RESET-INIT-pkey_index-pkey_tbl_len" in by_id
    assert "UD-RTR-RTS-sq_psn-0x1000000" in by_id
    assert "RC-INIT-RTR-dest_qp_num-0xffffff" in by_id
    assert "RC-RESET-INIT-qp_access_flags-0x40000000" in by_id
    assert "RC-RTR-RTS-max_rd_atomic-max_qp_init_rd_atom+1" in by_id
    assert "UC-INIT-RTR-ah_sgid_index-gid_tbl_len" in by_id
    assert "RC-RTR-RTS-cur_qp_state-7" in by_id
    assert not [i for i in by_id if i.startswith("UD-") and "timeout" in i]  # UD has none
    assert not [i for i in by_id if i.startswith("UC-") and "max_rd_atomic" in i]
    for c in by_id.values():
        assert c.bit is not None and c.mask & c.bit == c.bit


#: What SoftRoCE (rxe) reports: one RoCE port, RD atomic depths of 128, a 1024 netdev MTU.
RXE_LIKE = DeviceCaps(
    link_layer="ethernet", phys_port_cnt=1, max_qp_rd_atom=128, max_qp_init_rd_atom=128,
    active_mtu=MTU.MTU_1024, max_mtu=MTU.MTU_4096,
)


def _expectation(case: Case, var: str, caps: DeviceCaps) -> tuple[QPModel, Expectation]:
    """The model's expectation for a case, the model driven to case.cur as bring_to() does."""
    model = _model_at(case.qp_type, case.cur, var, caps)
    attrs = {**VALID, "qp_state": int(case.nxt), "cur_qp_state": int(case.cur)}
    attrs.update(case.overrides(caps))
    return model, model.modify(attrs, case.mask)


@pytest.mark.parametrize(
    ("case_id", "outcome", "decided_by"),
    [
        # a valid alternate path: only the core's RoCE ban refuses it
        ("RC-INIT-RTR-alt_port_num-phys_port_cnt", Outcome.REFUSE, "attr.alt_path.roce"),
        ("UC-INIT-RTR-alt_port_num-phys_port_cnt", Outcome.REFUSE, "attr.alt_path.roce"),
        # a bad port: uverbs refuses it before the core looks at the link layer
        ("RC-INIT-RTR-alt_port_num-0", Outcome.REFUSE, "attr.alt_port_num.range"),
        ("RC-INIT-RTR-alt_port_num-phys_port_cnt+1", Outcome.REFUSE, "attr.alt_port_num.range"),
        ("RC-INIT-RTR-alt_ah_port_num-0", Outcome.REFUSE, "attr.alt_ah_port_num.match"),
        ("UC-INIT-RTR-alt_ah_port_num-phys_port_cnt+1", Outcome.REFUSE,
         "attr.alt_ah_port_num.match"),
        ("RC-RTR-RTS-path_mig_state-2", Outcome.EITHER, "attr.path_mig_state.armed"),
        ("UC-RTR-RTS-path_mig_state-1", Outcome.ACCEPT, "linux.transition.UC.RTR->RTS"),
    ],
)
def test_rxe_like_cases_exercise_the_alternate_path_and_migration_rules(
    case_id: str, outcome: Outcome, decided_by: str
) -> None:
    """Every ALT_PATH value rule is consulted on a RoCE port (uverbs' port checks come
    before the core's RoCE ban), and PATH_MIG_STATE's rule wherever the bit is set."""
    case = _by_id(cases.attribute_groups("linux", [T.RC, T.UC]))[case_id]
    _, exp = _expectation(case, "linux", RXE_LIKE)
    assert (exp.outcome, exp.rule.id) == (outcome, decided_by)
    checked = {r.id for r in exp.checked}
    if case.bit == Attr.ALT_PATH:
        assert {"attr.alt_port_num.range", "attr.alt_ah_port_num.match",
                "attr.alt_path.roce"} <= checked
    else:
        assert "attr.path_mig_state.armed" in checked


@pytest.mark.parametrize(
    ("case_id", "field"),
    [
        ("RC-RTR-RTS-max_rd_atomic-max_qp_init_rd_atom-1", "max_rd_atomic"),
        ("RC-INIT-RTR-max_dest_rd_atomic-max_qp_rd_atom-1", "max_dest_rd_atomic"),
    ],
)
def test_rxe_like_cases_exercise_the_rounded_rd_atomic_read_back(case_id: str, field: str) -> None:
    """127 (one below rxe's 128) is accepted and may read back as 64 or 128: the modify that
    sets it is checked against attr.readback.rd_atomic_rounded right after it."""
    case = _by_id(cases.attribute_groups("linux", [T.RC]))[case_id]
    assert case.overrides(RXE_LIKE) == {field: 127}
    model, exp = _expectation(case, "linux", RXE_LIKE)
    assert exp.outcome is Outcome.ACCEPT
    assert "attr.readback.rd_atomic_rounded" in {r.id for r in exp.checked}
    model.apply(exp, accepted=True)
    assert model.stored.fields[field].values == {64, 127, 128}
    # a power of two reads back as set: the plain rule, not the rounded one
    limit = _by_id(cases.attribute_groups("linux", [T.RC]))[case_id[: -len("-1")]]
    _, exp = _expectation(limit, "linux", RXE_LIKE)
    assert "attr.readback.rd_atomic_rounded" not in {r.id for r in exp.checked}


def test_alternate_path_and_migration_cases_are_where_the_types_take_them() -> None:
    linux = _by_id(cases.attribute_groups("linux"))
    alt = {i for i in linux if "-alt_" in i}
    assert {i.split("-", 1)[0] for i in alt} == {"RC", "UC", "XRC_SEND", "XRC_RECV"}  # not UD
    assert all("-INIT-RTR-" in i for i in alt)  # where a QP first takes an alternate path
    mig = {i for i in linux if "-path_mig_state-" in i}
    assert mig and all("-RTR-RTS-" in i for i in mig)
    # the alternate AV's port is a uverbs check: the ibta variant has no rule for it
    ibta = _by_id(cases.attribute_groups("ibta"))
    assert not [i for i in ibta if "alt_ah_port_num" in i]
    assert "RC-INIT-RTR-alt_port_num-0" in ibta


def test_unknown_mask_bits_are_refused_with_eopnotsupp() -> None:
    import errno

    for c in _by_id(cases.attribute_groups("linux", [T.RC])).values():
        if c.kind == "unknown-bit":
            model = QPModel(T.RC)
            exp = model.modify({**VALID, "qp_state": int(S.INIT)}, c.mask)
            assert exp.outcome is Outcome.REFUSE and exp.errnos == {errno.EOPNOTSUPP}


def test_values_that_do_not_fit_their_c_field_are_unfit() -> None:
    rxe_like = DeviceCaps(gid_tbl_len=1024, max_qp_rd_atom=255)
    assert cases.resolve("timeout", 32, rxe_like) == 32
    with pytest.raises(ValueError, match="uint8"):
        cases.resolve("ah_sgid_index", Bound("gid_tbl_len"), rxe_like)
    with pytest.raises(ValueError, match="uint8"):
        cases.resolve("max_dest_rd_atomic", Bound("max_qp_rd_atom", 1), rxe_like)
    with pytest.raises(ValueError, match="4096"):
        cases.resolve("path_mtu", Bound("max_mtu", 1), DeviceCaps())
    assert cases.resolve("path_mtu", Bound("max_mtu", 1), DeviceCaps(max_mtu=MTU.MTU_1024)) == 4
    assert cases.resolve("dest_qp_num", PSN_LIMIT, rxe_like) == PSN_LIMIT


# --------------------------------------------------------------------------- posts
def test_post_cases_and_their_skips() -> None:
    groups = {g.id: g for g in cases.post_groups("linux", [T.RC])}
    assert len(groups) == 14
    runnable = sorted(i for i, g in groups.items() if g.skip is None)
    assert runnable == sorted(
        [f"RC-{s}-post_recv" for s in ("RESET", "INIT", "RTR", "RTS", "SQD", "ERR")]
        + [f"RC-{s}-post_send" for s in ("RESET", "INIT", "RTR", "ERR")]
    )
    assert "traffic suite" in (groups["RC-RTS-post_send"].skip or "")
    assert groups["RC-SQE-post_recv"].skip == cases.SQE_SKIP


@pytest.mark.parametrize("var", VARIANTS)
def test_post_outcomes_and_the_fate_of_the_wr(var: str) -> None:
    """Refused posts leave a never_run WR; accepted ones end flushed after the follow-up path."""
    for g in cases.post_groups(var, [T.RC, T.UC, T.UD]):
        if g.skip is not None:
            continue
        (c,) = g.cases
        model = _model_at(c.qp_type, c.cur, var, DeviceCaps())
        exp = getattr(model, c.kind)(42)
        model.apply(exp, accepted=exp.outcome is Outcome.ACCEPT)
        refused = c.cur == S.RESET or (c.kind == "post_send" and c.cur in (S.INIT, S.RTR))
        assert (exp.outcome is Outcome.REFUSE) == refused, c.id
        flushed = list(exp.completions)
        for nxt in cases.after_post_path(c.cur):
            entry = model.table.lookup(c.qp_type, model.state, nxt)
            assert entry is not None
            step = model.modify({**VALID, "qp_state": int(nxt)}, Attr.STATE | entry.required)
            model.apply(step, accepted=True)
            flushed += step.completions
        assert model.state == S.ERR
        ids = [done.wr_id for done in flushed]
        assert ids == ([] if refused else [42]), c.id
        assert (42 in model.queues.never_run) == refused, c.id


def test_after_post_path() -> None:
    assert cases.after_post_path(S.RESET) == (S.INIT, S.RTR, S.RTS, S.ERR)
    assert cases.after_post_path(S.RTR) == (S.RTS, S.ERR)
    assert cases.after_post_path(S.SQD) == (S.ERR,)
    assert cases.after_post_path(S.ERR) == ()


def test_attribute_only_cases_catch_a_driver_that_skips_the_table_without_state() -> None:
    from qpconform.engine.lone import Checker
    from qpconform.engine.records import DivergenceList
    from suites import steps
    from tests.fake_device import FakeDevice

    groups = [g for g in cases.transition_groups("linux") if g.id.endswith("attr-only")]
    assert {g.cur for g in groups} >= {QPState.RESET, QPState.INIT, QPState.RTS, QPState.ERR}
    for faults, caught in (([], False), (["accept_attr_only_modify"], True)):
        device = FakeDevice(faults)
        checker = Checker(device, settle_window=0.0, must_wait=0.0, sink=DivergenceList())
        failed = []
        for group in groups:
            if group.qp_type != QPType.RC:
                continue
            try:
                steps.run_group(checker, group,
                                lambda qp, case, d=device: steps.run_modify_case(qp, d, case))
            except pytest.fail.Exception as exc:
                failed.append(str(exc))
        assert bool(failed) is caught, failed[:1]
        assert all("linux.transition." in f for f in failed)
