"""QPModel by example: the protocol, the queues, SQD, error paths, and known model gaps.

Also holds the small helpers (device-like attribute values, walking a model to a state)
that tests/test_model_properties.py reuses. Required masks come from tests/kernel_table.py,
not from the model, so a table slip in the model shows up here too.
"""

import errno

import pytest

from models import Attr, EventType, Expectation, Outcome, QPModel, QPState, QPType, WCStatus
from models.attributes import DeviceCaps
from tests import kernel_table

S = QPState
A = Attr
NO_BITS = A(0)

#: Attribute values a device would use (port 1, pkey 0, RoCE GID index 1, MTU 1024, ...).
DEVICE_VALUES: dict[str, int] = {
    "port_num": 1,
    "pkey_index": 0,
    "qkey": 0x11111111,
    "ah_port_num": 1,
    "ah_sgid_index": 1,
    "path_mtu": 3,
    "dest_qp_num": 0x12,
    "rq_psn": 0x100,
    "sq_psn": 0x200,
    "max_rd_atomic": 1,
    "max_dest_rd_atomic": 1,
    "min_rnr_timer": 12,
    "timeout": 14,
    "retry_cnt": 7,
    "rnr_retry": 7,
    "qp_access_flags": 0,
    "en_sqd_async_notify": 0,
    "path_mig_state": 0,
    "rate_limit": 0,
    "alt_port_num": 1,
    "alt_timeout": 14,
}

SQE_TYPES = (QPType.UD, QPType.UC)  # a send error takes these to SQE, the others to ERR
ERROR_STATUSES = tuple(s for s in WCStatus if s not in (WCStatus.SUCCESS, WCStatus.WR_FLUSH_ERR))


def values(nxt: QPState, cur: QPState | None = None, **over: int) -> dict[str, int]:
    """Device-like attrs for a modify to nxt (cur_qp_state only matters with CUR_STATE)."""
    return {**DEVICE_VALUES, "qp_state": int(nxt), "cur_qp_state": int(cur or 0), **over}


def mask_of(names: list[str] | tuple[str, ...]) -> Attr:
    """A mask from IBV_QP_<NAME> names without the prefix."""
    mask = Attr(0)
    for name in names:
        mask |= Attr[name]
    return mask


def required(qp_type: QPType, cur: QPState, nxt: QPState) -> Attr:
    """The kernel's required mask from the independent encoding (KeyError if invalid)."""
    e = kernel_table.entry(qp_type.name, cur.name, nxt.name)
    assert e is not None, f"{qp_type.name} {cur.name}->{nxt.name} is not a kernel transition"
    return mask_of(e["required"])


def optional(qp_type: QPType, cur: QPState, nxt: QPState) -> Attr:
    e = kernel_table.entry(qp_type.name, cur.name, nxt.name)
    assert e is not None
    return mask_of(e["optional"])


def step(model: QPModel, nxt: QPState, extra: Attr = NO_BITS, **over: int) -> Expectation:
    """One accepted modify to nxt with exactly the required mask (plus extra)."""
    mask = required(model.qp_type, model.state, nxt) | A.STATE | extra
    exp = model.modify(values(nxt, model.state, **over), mask)
    assert exp.outcome is Outcome.ACCEPT, (exp.rule.id, exp.rule.summary)
    model.apply(exp, True)
    assert model.state == nxt
    return exp


def bring_to(model: QPModel, state: QPState) -> None:
    """Walk a fresh model to state by legal verbs (SQE: by a send error, UD/UC only)."""
    assert model.state == S.RESET
    if state == S.RESET:
        return
    if state == S.ERR:
        step(model, S.INIT)
        step(model, S.ERR)
        return
    path = [S.INIT, S.RTR, S.RTS]
    for nxt in path[: path.index(state) + 1] if state in path else path:
        step(model, nxt)
    if state == S.SQD:
        step(model, S.SQD)
    elif state == S.SQE:
        assert model.qp_type in SQE_TYPES
        post(model, "send", 10**6)
        model.send_completed(WCStatus.LOC_LEN_ERR)
        assert model.state == S.SQE


def post(model: QPModel, queue: str, wr_id: int, accepted: bool | None = None) -> Expectation:
    """post_send/post_recv one WR and apply what the model expects (or the given result)."""
    exp = model.post_send(wr_id) if queue == "send" else model.post_recv(wr_id)
    model.apply(exp, exp.outcome is Outcome.ACCEPT if accepted is None else accepted)
    return exp


def new(qp_type: QPType, state: QPState = S.RESET, variant: str = "linux", **caps) -> QPModel:
    model = QPModel(qp_type, variant, DeviceCaps(**caps) if caps else None)
    bring_to(model, state)
    return model


# ----------------------------------------------------------------------------- protocol
def test_apply_refuses_an_expectation_that_is_not_the_last_proposed():
    model = new(QPType.RC)
    first = model.modify(values(S.INIT), required(QPType.RC, S.RESET, S.INIT) | A.STATE)
    model.query()
    with pytest.raises(RuntimeError):
        model.apply(first, True)
    assert model.state == S.RESET


def test_apply_refuses_the_same_expectation_twice():
    model = new(QPType.UD)
    exp = model.query()
    model.apply(exp, True)
    with pytest.raises(RuntimeError):
        model.apply(exp, True)


def test_modify_changes_nothing_until_applied():
    model = new(QPType.RC, S.RTS)
    post(model, "send", 1)
    before = model.snapshot()
    exp = model.modify(values(S.ERR), A.STATE)
    assert exp.completions and model.snapshot() == before


def test_no_verb_after_destroy():
    model = new(QPType.UC, S.RTS)
    post(model, "send", 1)
    post(model, "recv", 2)
    exp = model.destroy()
    assert exp.never_run == {1, 2}
    model.apply(exp, True)
    assert {1, 2} <= model.queues.never_run
    with pytest.raises(RuntimeError):
        model.query()


# ------------------------------------------------------------------------ queue examples
def test_flush_on_err_in_posting_order_per_queue():
    model = new(QPType.RC, S.RTS)
    for wr_id, queue in [(1, "send"), (2, "recv"), (3, "send"), (4, "recv"), (5, "send")]:
        post(model, queue, wr_id)
    exp = model.modify(values(S.ERR), A.STATE)
    model.apply(exp, True)
    assert [(c.queue, c.wr_id) for c in exp.completions if c.queue == "send"] == [
        ("send", 1),
        ("send", 3),
        ("send", 5),
    ]
    assert [c.wr_id for c in exp.completions if c.queue == "recv"] == [2, 4]
    assert {c.status for c in exp.completions} == {WCStatus.WR_FLUSH_ERR}
    flushed = post(model, "send", 6)
    assert [(c.wr_id, c.status) for c in flushed.completions] == [(6, WCStatus.WR_FLUSH_ERR)]


def test_reset_discards_without_completions():
    model = new(QPType.UD, S.RTS)
    post(model, "send", 1)
    post(model, "recv", 2)
    exp = model.modify(values(S.RESET), A.STATE)
    assert exp.completions == () and exp.never_run == {1, 2}
    model.apply(exp, True)
    assert model.queues.never_run == {1, 2} and not model.queues.sends and not model.queues.recvs


@pytest.mark.parametrize("state", [S.RESET, S.INIT, S.RTR])
def test_send_refused_before_rts_never_runs(state):
    model = new(QPType.RC, state)
    exp = post(model, "send", 7)
    assert exp.outcome is Outcome.REFUSE and model.queues.never_run == {7}


def test_recv_refused_in_reset_never_runs():
    model = new(QPType.RC)
    exp = post(model, "recv", 7)
    assert exp.outcome is Outcome.REFUSE and model.queues.never_run == {7}


@pytest.mark.parametrize("queue", ["send", "recv"])
def test_post_refused_by_the_device_never_runs(queue):
    model = new(QPType.RC, S.RTS)
    exp = post(model, queue, 7, accepted=False)
    assert exp.outcome is Outcome.ACCEPT
    assert 7 in model.queues.never_run


# --------------------------------------------------------------------------------- SQD
def test_sq_drained_after_the_last_in_flight_send():
    model = new(QPType.RC, S.RTS)
    post(model, "send", 1)
    post(model, "send", 2)
    exp = model.modify(values(S.SQD, en_sqd_async_notify=1), A.STATE | A.EN_SQD_ASYNC_NOTIFY)
    model.apply(exp, True)
    assert EventType.SQ_DRAINED not in exp.events + exp.forbidden_events
    post(model, "send", 3)  # held in SQD: not started, so not waited for
    assert model.queues.in_flight == [1, 2]
    assert EventType.SQ_DRAINED not in model.send_completed().events
    last = model.send_completed()
    assert last.events == (EventType.SQ_DRAINED,)
    assert model.queues.outstanding_sends == [3] and model.queues.in_flight == []
    step(model, S.RTS)
    assert model.queues.in_flight == [3]


def test_no_sq_drained_without_notify():
    model = new(QPType.UD, S.RTS)
    exp = model.modify(values(S.SQD, en_sqd_async_notify=1), A.STATE)  # value without its bit
    assert EventType.SQ_DRAINED in exp.forbidden_events and not exp.events


# ---------------------------------------------------------------------------- errors
@pytest.mark.parametrize("qp_type", [QPType.UD, QPType.UC])
def test_send_error_takes_ud_uc_to_sqe_and_keeps_receives(qp_type):
    model = new(qp_type, S.RTS)
    for wr_id in (1, 2, 3):
        post(model, "send", wr_id)
    post(model, "recv", 9)
    exp = model.send_completed(WCStatus.LOC_PROT_ERR)
    assert model.state == S.SQE and model.queues.recvs == [9]
    assert [(c.wr_id, c.status) for c in exp.completions] == [
        (1, WCStatus.LOC_PROT_ERR),
        (2, WCStatus.WR_FLUSH_ERR),
        (3, WCStatus.WR_FLUSH_ERR),
    ]
    step(model, S.RTS)  # SQE->RTS recovers the send queue


def test_send_error_takes_rc_to_err_and_flushes_everything():
    model = new(QPType.RC, S.RTS)
    post(model, "send", 1)
    post(model, "send", 2)
    post(model, "recv", 3)
    exp = model.send_completed(WCStatus.RETRY_EXC_ERR)
    assert model.state == S.ERR and not model.queues.recvs and not model.queues.sends
    assert [(c.wr_id, c.queue, c.status) for c in exp.completions] == [
        (1, "send", WCStatus.RETRY_EXC_ERR),
        (2, "send", WCStatus.WR_FLUSH_ERR),
        (3, "recv", WCStatus.WR_FLUSH_ERR),
    ]


def test_async_error_needs_an_affiliated_event():
    model = new(QPType.RC, S.RTS)
    with pytest.raises(ValueError):
        model.async_error(EventType.PORT_ACTIVE)


# ------------------------------------------------------------------ uverbs and errnos
def test_av_outside_rtr_implies_port():
    """Linux uverbs adds PORT to an AV-only modify outside ->RTR; UC SQD->SQD has no PORT."""
    uc, rc = new(QPType.UC, S.SQD), new(QPType.RC, S.SQD)
    assert uc.modify(values(S.SQD), A.STATE | A.AV).outcome is Outcome.REFUSE
    assert rc.modify(values(S.SQD), A.STATE | A.AV).outcome is Outcome.ACCEPT
    ibta = new(QPType.UC, S.SQD, "ibta")
    assert ibta.modify(values(S.SQD), A.STATE | A.AV).outcome is Outcome.ACCEPT


def test_av_port_must_match_the_qp_port_at_rtr():
    model = new(QPType.RC, S.INIT, phys_port_cnt=2)
    mask = required(QPType.RC, S.INIT, S.RTR) | A.STATE
    assert model.modify(values(S.RTR, ah_port_num=2), mask).outcome is Outcome.REFUSE
    assert model.modify(values(S.RTR, ah_port_num=1), mask).outcome is Outcome.ACCEPT


@pytest.mark.parametrize("bit", [21, 22, 23, 24, 26, 31])
def test_reserved_mask_bits_are_eopnotsupp(bit):
    model = new(QPType.RC, S.INIT)
    exp = model.modify(values(S.INIT), A.STATE | (1 << bit))
    assert exp.outcome is Outcome.REFUSE and exp.errnos == {errno.EOPNOTSUPP}


@pytest.mark.parametrize(
    "state, attrs, mask",
    [
        (S.INIT, values(S.INIT, cur=S.INIT), A.STATE | A.CUR_STATE),  # CUR_STATE from INIT
        (S.INIT, values(S(7)), A.STATE),  # qp_state above ERR
        (S.INIT, values(S.RTR, ah_port_num=2), required(QPType.RC, S.INIT, S.RTR) | A.STATE),
    ],
    ids=["cur_state", "state_range", "av_port"],
)
def test_rate_limit_refusals_allow_eopnotsupp(state, attrs, mask):
    model = new(QPType.RC, state, phys_port_cnt=2)
    exp = model.modify(attrs, mask | A.RATE_LIMIT)
    assert exp.outcome is Outcome.REFUSE
    assert errno.EOPNOTSUPP in exp.errnos


def test_alt_path_port_must_be_a_device_port():
    model = new(QPType.RC, S.INIT, link_layer="infiniband")
    mask = required(QPType.RC, S.INIT, S.RTR) | A.STATE | A.ALT_PATH
    assert model.modify(values(S.RTR, alt_port_num=1), mask).outcome is Outcome.ACCEPT
    exp = model.modify(values(S.RTR, alt_port_num=5), mask)
    assert exp.outcome is Outcome.REFUSE and exp.errnos == {errno.EINVAL}
