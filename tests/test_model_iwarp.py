"""The iwarp variant of the model: its table, its rules and what QPModel expects under it.

The expected verdicts are written here from the sources (siw, cxgb4 and irdma's iWARP path,
iwcm.c), not read from models/table.py: IDLE is RESET, INIT and RTR; RTS needs a connection;
"must" where the three drivers agree, "may" where they differ. The InfiniBand variants are
checked not to have moved (tests/test_model_table.py holds them to the kernel's table).
"""

from __future__ import annotations

import errno
from functools import reduce

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models import rules
from models.attributes import DeviceCaps
from models.enums import STATES, Attr, EventType, QPState, QPType, WCStatus
from models.outcomes import Outcome
from models.qp import QPModel
from models.sources import DRIVER, KINDS, LAYERS, MAY, MUST, PROVIDER
from models.variant import VARIANTS, variant
from reports.qualification import model_rules
from tests.sequences import VALID_ATTRS

S = QPState
A = Attr
IDLE = (S.RESET, S.INIT, S.RTR)
FAST = settings(max_examples=80, deadline=None)
SIW_CAPS = DeviceCaps(pkey_tbl_len=0, gid_tbl_len=1)  # siw_query_port(): no P_Key table

#: (cur, next) -> (kind, where an accepted modify leaves the QP), from the driver sources.
#: Absent: refused by every iWARP driver (IDLE -> RTS needs a connection).
EXPECTED: dict[tuple[QPState, QPState], tuple[str, QPState]] = {}
for _cur in IDLE:
    for _nxt in IDLE:
        EXPECTED[(_cur, _nxt)] = (MUST, _nxt)  # all IDLE: siw/cxgb4 no-op, irdma IDLE
    EXPECTED[(_cur, S.ERR)] = (MUST, S.ERR)  # siw, cxgb4, irdma: IDLE -> ERROR
    EXPECTED[(_cur, S.SQD)] = (MAY, _cur)  # siw, irdma ignore it; cxgb4 -EINVAL
    EXPECTED[(_cur, S.SQE)] = (MAY, _cur)  # siw ignores it; cxgb4 -EINVAL
EXPECTED[(S.RTS, S.RTS)] = (MAY, S.RTS)  # irdma -EINVAL
EXPECTED[(S.RTS, S.SQD)] = (MUST, S.SQD)  # CLOSING everywhere
EXPECTED[(S.RTS, S.SQE)] = (MUST, S.SQE)  # TERMINATE everywhere
EXPECTED[(S.RTS, S.ERR)] = (MUST, S.ERR)  # abortive close everywhere
for _nxt in IDLE:
    EXPECTED[(S.RTS, _nxt)] = (MAY, S.RTS)  # siw ignores it; cxgb4, irdma refuse
EXPECTED[(S.SQD, S.SQD)] = (MUST, S.SQD)
EXPECTED[(S.SQD, S.ERR)] = (MAY, S.ERR)  # cxgb4 refuses a user QP's move out of CLOSING
EXPECTED[(S.SQE, S.ERR)] = (MAY, S.ERR)
for _nxt in (S.RESET, S.INIT):
    EXPECTED[(S.SQD, _nxt)] = (MAY, _nxt)  # siw CLOSING -> IDLE; cxgb4, irdma refuse
for _nxt in (S.RTR, S.RTS, S.SQE):
    EXPECTED[(S.SQD, _nxt)] = (MAY, S.SQD)
for _nxt in (*IDLE, S.RTS, S.SQD, S.SQE):
    EXPECTED[(S.SQE, _nxt)] = (MAY, S.SQE)
EXPECTED[(S.ERR, S.ERR)] = (MUST, S.ERR)
EXPECTED[(S.ERR, S.RESET)] = (MUST, S.RESET)  # cxgb4 ERROR -> IDLE, irdma; not siw (quirk)
EXPECTED[(S.ERR, S.INIT)] = (MAY, S.INIT)  # cxgb4 IDLE, siw stays ERROR, irdma -EINVAL
for _nxt in (S.RTR, S.RTS, S.SQD, S.SQE):
    EXPECTED[(S.ERR, _nxt)] = (MAY, S.ERR)

TABLE = variant("iwarp").table


def model(state: QPState = S.RESET, qp_type: QPType = QPType.RC) -> QPModel:
    m = QPModel(qp_type, "iwarp", SIW_CAPS)
    m.state = state
    return m


def modify(m: QPModel, nxt: QPState, mask: Attr = A.STATE, **values: int):
    return m.modify(
        {**VALID_ATTRS, "qp_state": int(nxt), "cur_qp_state": int(m.state), **values}, mask
    )


# ---------------------------------------------------------------------------- the table
def test_iwarp_is_a_variant_and_rc_only() -> None:
    assert "iwarp" in VARIANTS
    assert TABLE.qp_types == frozenset({QPType.RC})
    for qp_type in QPType:
        entries = [t for t in TABLE if t.qp_type == qp_type]
        assert bool(entries) is (qp_type == QPType.RC), qp_type


@pytest.mark.parametrize("cur", STATES, ids=lambda s: s.name)
@pytest.mark.parametrize("nxt", STATES, ids=lambda s: s.name)
def test_every_pair_as_the_drivers_have_it(cur: QPState, nxt: QPState) -> None:
    entry = TABLE.lookup(QPType.RC, cur, nxt)
    if (cur, nxt) not in EXPECTED:
        assert entry is None
        rule = TABLE.invalid_rule(cur, nxt, QPType.RC)
        assert (cur in IDLE, nxt, rule.kind) == (True, S.RTS, MUST)
        assert "connection" in rule.summary and "-EINVAL" in rule.source.location
        return
    kind, lands = EXPECTED[(cur, nxt)]
    assert entry is not None
    assert (entry.rule.kind, entry.after) == (kind, lands), entry.rule.id
    assert entry.required == A(0)  # no iWARP driver requires any attribute
    assert entry.optional == (A.ACCESS_FLAGS if cur in IDLE and nxt in IDLE else A(0))


def test_only_a_connection_reaches_rts() -> None:
    """No modify walk from RESET gets to RTS, SQD or SQE (iwarp); every IB variant's does."""
    seen, todo = {S.RESET}, [S.RESET]
    while todo:
        for nxt in TABLE.moves_to(QPType.RC, todo.pop()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert seen == {S.RESET, S.INIT, S.RTR, S.ERR}
    assert S.RTS in variant("linux").table.moves_to(QPType.RC, S.RTR)


def test_query_names() -> None:
    """IDLE reads INIT on siw (6.12) and cxgb4, the state asked for on irdma; INIT reads INIT:
    a device that reads RESET after RESET->INIT (siw 6.1) is not excused."""
    assert TABLE.reported(S.RESET) == {S.RESET, S.INIT}
    assert TABLE.reported(S.RTR) == {S.RTR, S.INIT}
    assert TABLE.reported(S.INIT) == {S.INIT}
    assert TABLE.reported(S.ERR) == {S.ERR}
    assert TABLE.naming_rule(S.RESET) is rules.IWARP_IDLE_REPORTED
    assert TABLE.naming_rule(S.INIT) is None
    for name in ("linux", "ibta"):
        for state in STATES:
            assert variant(name).table.reported(state) == {state}


def _iwarp_rules() -> dict[str, object]:
    return {k: v for k, v in model_rules("iwarp", [t.name for t in QPType]).items()}


def test_every_iwarp_rule_is_decided_and_cites_the_drivers() -> None:
    found = _iwarp_rules()
    iwarp = [r for r in found.values() if r.id.startswith("iwarp.")]
    assert len(iwarp) > 60
    for r in iwarp:
        assert r.kind in KINDS and r.layer in LAYERS, r.id
        where = f"{r.source.document} {r.source.location}"
        assert "siw" in where, r.id  # every iwarp rule says what siw does
    table_rules = [r for r in iwarp if ".transition." in r.id]
    for r in table_rules:  # each entry names what every driver does
        assert all(d in r.source.location for d in ("siw", "cxgb4", "irdma")), r.id


def test_the_specifications_are_cited_where_they_speak() -> None:
    found = _iwarp_rules()
    text = " ".join(f"{r.source.location}" for r in found.values())
    for spec in ("RFC 5040", "RFC 5044", "RDMAC verbs", "iwcm.c"):
        assert spec in text, spec


def test_ib_variants_have_no_iwarp_rule() -> None:
    for name in ("linux", "ibta"):
        assert not [r for r in model_rules(name) if r.startswith("iwarp.")]
    ib_only = (
        "linux.cur_state.allowed",
        "ibta.reset.discard",
        "attr.pkey_index.range",
        "attr.readback",
        "ibta.query.state",
    )
    for rule_id in ib_only:
        assert rule_id not in _iwarp_rules(), rule_id


# ------------------------------------------------------------------------- modify_qp
def test_bring_up_needs_no_attribute_and_no_p_key() -> None:
    """siw reports a P_Key table of length 0: the linux model refuses pkey_index 0 at the
    first bring-up step, the iwarp model asks for STATE only (iwcm: STATE|ACCESS_FLAGS)."""
    linux = QPModel(QPType.RC, "linux", SIW_CAPS)
    exp = linux.modify(
        {**VALID_ATTRS, "qp_state": 1}, A.STATE | A.PKEY_INDEX | A.PORT | A.ACCESS_FLAGS
    )
    assert (exp.outcome, exp.rule.id) == (Outcome.REFUSE, "attr.pkey_index.range")
    m = model()
    for nxt, mask in ((S.INIT, A.STATE), (S.RTR, A.STATE | A.ACCESS_FLAGS)):
        exp = modify(m, nxt, mask)
        assert exp.outcome is Outcome.ACCEPT, exp.rule.id
        m.apply(exp, True)
    exp = modify(model(), S.INIT, A.STATE | A.PKEY_INDEX, pkey_index=0)
    assert (exp.outcome, exp.rule.id) == (Outcome.EITHER, "iwarp.modify.ib_attributes")


@pytest.mark.parametrize("cur", IDLE, ids=lambda s: s.name)
def test_rts_by_modify_is_refused_einval(cur: QPState) -> None:
    # every bit but those a layer before the driver refuses (APM is IB only; RATE_LIMIT)
    full = reduce(lambda a, b: a | b, (b for b in A if b not in (A.ALT_PATH, A.RATE_LIMIT)))
    for mask in (A.STATE, full):
        exp = modify(model(cur), S.RTS, mask)
        assert exp.outcome is Outcome.REFUSE, exp.rule.id
        assert exp.rule.id == f"iwarp.transition.invalid.{cur.name}->RTS"
        assert exp.errnos == {errno.EINVAL}


def test_linux_abi_checks_still_apply() -> None:
    """uverbs and the core check every device's modify before any driver."""
    m = model(S.INIT)
    cases = [
        (A.STATE | A(1 << 21), {}, "uverbs.modify_qp.unknown_mask", {errno.EOPNOTSUPP}),
        (A.STATE, {"qp_state": 7}, "uverbs.modify_qp.state_range", {errno.EINVAL}),
        (A.STATE | A.PORT, {"port_num": 2}, "attr.port_num.range", {errno.EINVAL}),
        (A.STATE | A.ALT_PATH, {}, "attr.alt_path.iwarp", {errno.EINVAL}),
        (A.STATE | A.RATE_LIMIT, {}, "iwarp.modify.rate_limit", {errno.EOPNOTSUPP}),
    ]
    for mask, values, rule_id, errnos in cases:
        exp = modify(m, S.INIT, mask, **values)
        assert (exp.outcome, exp.rule.id) == (Outcome.REFUSE, rule_id), rule_id
        assert set(exp.errnos or ()) >= errnos, rule_id
    unprivileged = QPModel(QPType.RC, "iwarp", DeviceCaps(privileged_qkey=False))
    exp = modify(unprivileged, S.INIT, A.STATE | A.QKEY, qkey=0x80000000)
    assert (exp.rule.id, exp.errnos) == ("uverbs.modify_qp.qkey_privileged", {errno.EPERM})


def test_cur_state_is_not_checked() -> None:
    """No iWARP driver calls ib_modify_qp_is_ok(): CUR_STATE from RESET is accepted (linux
    refuses it); a wrong one may be refused, never makes an invalid move valid."""
    exp = modify(model(), S.INIT, A.STATE | A.CUR_STATE)
    assert exp.outcome is Outcome.ACCEPT
    assert (
        QPModel(QPType.RC)
        .modify(
            {**VALID_ATTRS, "qp_state": 1},
            A.STATE | A.CUR_STATE | A.PKEY_INDEX | A.PORT | A.ACCESS_FLAGS,
        )
        .rule.id
        == "linux.cur_state.allowed"
    )
    exp = modify(model(), S.INIT, A.STATE | A.CUR_STATE, cur_qp_state=int(S.RTS))
    assert (exp.outcome, exp.rule.id) == (Outcome.EITHER, "iwarp.cur_state.ignored")
    exp = modify(model(S.INIT), S.RTS, A.STATE | A.CUR_STATE, cur_qp_state=int(S.RTR))
    assert exp.outcome is Outcome.REFUSE


def test_sqd_and_sqe_without_a_connection_may_be_ignored() -> None:
    for nxt in (S.SQD, S.SQE):
        m = model(S.INIT)
        exp = modify(m, nxt)
        assert (exp.outcome, exp.state_if_accepted) == (Outcome.EITHER, S.INIT)
        m.apply(exp, True)
        assert m.state == S.INIT


def test_err_to_init_may_not_move() -> None:
    exp = modify(model(S.ERR), S.INIT)
    assert exp.outcome is Outcome.EITHER
    assert (exp.state_if_accepted, exp.may_land) == (S.INIT, {S.ERR})


# ------------------------------------------------------------------------ WRs and posts
def test_idle_keeps_wrs_and_err_flushes_them() -> None:
    m = model()
    for wr in (1, 2):
        exp = m.post_recv(wr)
        assert exp.outcome is Outcome.ACCEPT, exp.rule.id  # RESET is IDLE: receives queue
        m.apply(exp, True)
    exp = m.post_send(3)
    assert (exp.outcome, exp.rule.kind) == (Outcome.EITHER, MAY)
    m.apply(exp, True)  # accepted (cxgb4, irdma): held
    for nxt in (S.INIT, S.RESET, S.RTR):
        exp = modify(m, nxt)
        assert not exp.completions and not exp.never_run, nxt
        assert rules.IWARP_IDLE_KEEPS_WRS in exp.checked
        m.apply(exp, True)
    assert (m.queues.outstanding_sends, m.queues.recvs) == ([3], [1, 2])
    exp = modify(m, S.ERR)
    flushed = [(c.wr_id, c.queue, c.status) for c in exp.completions]
    assert flushed == [
        (3, "send", WCStatus.WR_FLUSH_ERR),
        (1, "recv", WCStatus.WR_FLUSH_ERR),
        (2, "recv", WCStatus.WR_FLUSH_ERR),
    ]
    assert rules.IWARP_FLUSH_ON_ERROR in exp.checked
    assert set(exp.forbidden_events) >= {EventType.QP_FATAL, EventType.SQ_DRAINED}


def test_a_refused_send_in_idle_must_never_run() -> None:
    m = model(S.INIT)
    exp = m.post_send(7)
    m.apply(exp, False)  # refused (siw: ENOTCONN)
    assert 7 in m.queues.never_run and m.queues.outstanding_sends == []
    exp = modify(m, S.ERR)
    assert not exp.completions


@pytest.mark.parametrize(
    ("state", "verb", "outcome", "kind", "flushed"),
    [
        (S.RESET, "post_recv", Outcome.ACCEPT, MUST, False),
        (S.INIT, "post_recv", Outcome.ACCEPT, MUST, False),
        (S.RTR, "post_recv", Outcome.ACCEPT, MUST, False),
        (S.RTS, "post_recv", Outcome.ACCEPT, MUST, False),
        (S.ERR, "post_recv", Outcome.EITHER, MAY, True),  # libcxgb4 -EINVAL
        (S.RESET, "post_send", Outcome.EITHER, MAY, False),  # siw ENOTCONN, cxgb4/irdma hold
        (S.INIT, "post_send", Outcome.EITHER, MAY, False),
        (S.RTR, "post_send", Outcome.EITHER, MAY, False),
        (S.RTS, "post_send", Outcome.ACCEPT, MUST, False),
        (S.SQD, "post_send", Outcome.EITHER, MAY, True),
        (S.SQE, "post_send", Outcome.EITHER, MAY, True),
        (S.ERR, "post_send", Outcome.EITHER, MAY, True),  # libcxgb4 -EINVAL
    ],
)
def test_post_rules(state, verb, outcome, kind, flushed) -> None:
    exp = getattr(model(state), verb)(5)
    assert (exp.outcome, exp.rule.kind) == (outcome, kind), exp.rule.id
    assert exp.rule.id == f"iwarp.{verb}.{state.name}"
    assert exp.rule.layer == (DRIVER if kind == MUST else PROVIDER)
    assert [c.status for c in exp.completions] == ([WCStatus.WR_FLUSH_ERR] if flushed else [])
    assert exp.errnos is None  # the provider's errno (siw's ENOTCONN is lost through libsiw)


def test_other_qp_types_are_not_modelled() -> None:
    for qp_type in (QPType.UD, QPType.UC, QPType.XRC_SEND):
        m = model(qp_type=qp_type)
        for exp in (modify(m, S.INIT), m.post_send(1), m.post_recv(2)):
            assert (exp.outcome, exp.rule.id) == (Outcome.REFUSE, "iwarp.qp_type.rc_only")


def test_nothing_is_read_back_but_the_state() -> None:
    m = model()
    exp = modify(m, S.INIT, A.STATE | A.ACCESS_FLAGS | A.PKEY_INDEX | A.PORT)
    assert not [r for r in exp.checked if r.id.startswith("attr.readback")]
    m.apply(exp, True)
    assert m.stored.fields == {}
    assert m.query().rule is rules.IWARP_QUERY


# --------------------------------------------------------------------------- properties
masks = st.lists(st.sampled_from(list(A)), max_size=5).map(
    lambda bits: reduce(lambda a, b: a | b, bits, A(0))
)


@FAST
@given(st.lists(st.tuples(st.sampled_from(STATES), masks, st.booleans()), max_size=12))
def test_a_random_walk_never_reaches_rts_and_may_rules_leave_the_choice(walk) -> None:
    """Whatever a device accepts among the model's choices, a modify never brings an iWARP
    QP to RTS, every "may" rule leaves the outcome open, and a refusal changes nothing."""
    m = model()
    for nxt, mask, accept in walk:
        exp = modify(m, nxt, mask | A.STATE)
        if exp.rule.kind == MAY:
            assert exp.outcome is Outcome.EITHER, exp.rule.id
        if exp.outcome is Outcome.ACCEPT:
            accept = True
        elif exp.outcome is Outcome.REFUSE:
            accept = False
        before = m.snapshot()
        m.apply(exp, accept)
        if not accept:
            assert m.snapshot() == before
        assert m.state not in (S.RTS, S.SQD, S.SQE), exp.rule.id


@FAST
@given(st.sampled_from([S.RESET, S.INIT, S.RTR, S.ERR]), st.sampled_from(STATES))
def test_ib_variants_unchanged_by_iwarp(state, nxt) -> None:
    """The linux model gives a state pair the same verdict whether or not iwarp exists: its
    rules come from the kernel table (tests/kernel_table.py checks them), never iwarp's."""
    for name in ("linux", "ibta"):
        exp = QPModel(QPType.RC, name).modify({**VALID_ATTRS, "qp_state": int(nxt)}, A.STATE)
        assert not exp.rule.id.startswith("iwarp.")
        assert exp.may_land == frozenset()
