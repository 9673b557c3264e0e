"""Hypothesis properties of QPModel, and a random walk of the model alone.

Each property states a rule (the kernel's, uverbs', or the IBTA's) in the test's own words
and checks the model against it; the expected verdicts use tests/kernel_table.py, not
models/table.py.
"""

import errno
from functools import reduce

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from models import Attr, EventType, Expectation, Outcome, QPModel, QPState, QPType, WCStatus
from models.enums import STATES
from tests import kernel_table
from tests.test_model_qp import (
    DEVICE_VALUES,
    ERROR_STATUSES,
    SQE_TYPES,
    bring_to,
    mask_of,
    new,
    optional,
    post,
    required,
    step,
    values,
)

S = QPState
A = Attr
EINVAL, EOPNOTSUPP = errno.EINVAL, errno.EOPNOTSUPP

FAST = settings(max_examples=60, deadline=None)
VARIANTS = ("linux", "ibta")
#: Bits 21..24 are reserved (IB_QP_RESERVED1-4): not in IB_QP_ATTR_STANDARD_BITS nor RATE_LIMIT.
RESERVED = tuple(A(1 << b) for b in range(21, 25))
#: uverbs modify_qp_mask(): bits an XRC side cannot use are dropped before the table check.
XRC_STRIPPED = {
    QPType.XRC_SEND: A.MAX_DEST_RD_ATOMIC | A.MIN_RNR_TIMER,
    QPType.XRC_RECV: A.MAX_QP_RD_ATOMIC | A.RETRY_CNT | A.RNR_RETRY,
}
CUR_STATE_FROM = {S.RTR, S.RTS, S.SQD, S.SQE}
FORWARD = {
    S.RESET: (S.INIT,),
    S.INIT: (S.RTR,),
    S.RTR: (S.RTS,),
    S.RTS: (S.SQD,),
    S.SQD: (S.RTS,),
    S.SQE: (S.RTS,),
    S.ERR: (S.RESET,),
}
AFFILIATED = (EventType.QP_FATAL, EventType.QP_REQ_ERR, EventType.QP_ACCESS_ERR)

qp_types = st.sampled_from(list(QPType))
#: Types with both a send and a receive queue (XRC QPs lack one: tests/test_model_linux_abi.py).
queued_types = st.sampled_from([t for t in QPType if t not in (QPType.XRC_SEND, QPType.XRC_RECV)])
variants = st.sampled_from(VARIANTS)
states = st.sampled_from(STATES)
defined_bits = st.sampled_from(list(A))
masks = st.lists(st.one_of(defined_bits, defined_bits, st.sampled_from(RESERVED)), max_size=6).map(
    lambda bits: reduce(lambda m, b: m | b, bits, A(0))
)


def reachable(qp_type: QPType, state: QPState) -> bool:
    return state != S.SQE or qp_type in SQE_TYPES


def table_entry(variant: str, qp_type: QPType, cur: QPState, nxt: QPState):
    """(required, optional) of the reference table; ibta adds RESET->ERR with STATE only."""
    if variant == "ibta" and (cur, nxt) == (S.RESET, S.ERR):
        return A(0), A(0)
    e = kernel_table.entry(qp_type.name, cur.name, nxt.name)
    return None if e is None else (mask_of(e["required"]), mask_of(e["optional"]))


def verdict(variant: str, qp_type: QPType, cur: QPState, mask: Attr, target: QPState):
    """What a modify from cur must get, with device-like values and cur_qp_state == cur.

    Returns (accepted, errnos allowed when refused). The rules, in the kernel's order:
    reserved bits -> EOPNOTSUPP; (linux) uverbs adds PORT to an AV outside ->RTR and drops
    the bits an XRC side cannot use; ib_modify_qp_is_ok(): CUR_STATE only from
    RTR/RTS/SQD/SQE, a valid pair, every required bit, nothing outside required|optional|STATE;
    (linux) alternate paths are banned on RoCE. Table refusals with RATE_LIMIT may be
    EOPNOTSUPP (legacy command)."""
    if any(bit in mask for bit in RESERVED):
        return False, {EOPNOTSUPP}
    eff = mask
    if variant == "linux":
        if A.AV in eff and not (A.STATE in eff and target == S.RTR):
            eff |= A.PORT
        eff &= ~XRC_STRIPPED.get(qp_type, A(0))
    nxt = target if A.STATE in mask else cur
    table_errnos = {EINVAL, EOPNOTSUPP} if A.RATE_LIMIT in mask else {EINVAL}
    if A.CUR_STATE in eff and cur not in CUR_STATE_FROM:
        return False, table_errnos
    entry = table_entry(variant, qp_type, cur, nxt)
    if entry is None:
        return False, table_errnos
    req, opt = entry
    if eff & req != req or eff & ~(req | opt | A.STATE):
        return False, table_errnos
    if variant == "linux" and A.ALT_PATH in eff:
        return False, {EINVAL}
    return True, None


def check_refusal(exp: Expectation, allowed: set[int]) -> None:
    assert exp.outcome is Outcome.REFUSE, exp.rule.id
    assert exp.errnos is not None and set(exp.errnos) <= allowed, (exp.rule.id, exp.errnos)
    if allowed == {EOPNOTSUPP} or EINVAL in allowed:
        assert set(exp.errnos) & allowed


def assert_cited(exp: Expectation) -> None:
    """Every rule names its source: a document and a place in it."""
    for r in (exp.rule, *exp.checked):
        assert r.id and r.summary, r
        assert r.source.document.strip() and r.source.location.strip(), r.id


def model_with_wrs(qp_type, variant, state, n_sends, n_recvs) -> tuple[QPModel, list, list]:
    model = new(qp_type, S.RESET, variant)
    sends, recvs = [], []
    if state in (S.RTS, S.SQD, S.SQE, S.ERR, S.RESET):
        bring_to(model, S.RTS)
        for i in range(n_sends):
            sends.append(100 + i)
            post(model, "send", 100 + i)
        for i in range(n_recvs):
            recvs.append(200 + i)
            post(model, "recv", 200 + i)
        if state == S.SQD:
            step(model, S.SQD)
        elif state == S.SQE:
            if not sends:
                post(model, "send", 99)
            model.send_completed(WCStatus.LOC_LEN_ERR)
        elif state in (S.ERR, S.RESET):
            step(model, state)
    else:
        bring_to(model, state)
    return model, sends, recvs


# --------------------------------------------------------------------------- modify
@FAST
@given(
    qp_types,
    variants,
    states,
    masks,
    states,
    st.integers(0, 3),
    st.integers(0, 3),
    st.dictionaries(st.sampled_from(sorted(DEVICE_VALUES)), st.integers(0, 1 << 25), max_size=3),
)
def test_a_refused_modify_changes_nothing(qp_type, variant, state, mask, target, ns, nr, over):
    assume(reachable(qp_type, state))
    model, _, _ = model_with_wrs(qp_type, variant, state, ns, nr)
    attrs = {**values(target, model.state), **over}
    before = model.snapshot()
    exp = model.modify(attrs, mask | A.STATE)
    assert model.snapshot() == before
    model.apply(exp, False)
    assert model.snapshot() == before
    assert_cited(exp)


@FAST
@given(qp_types, variants, states)
def test_err_and_reset_reachable_from_every_state(qp_type, variant, state):
    assume(reachable(qp_type, state))
    for target in (S.ERR, S.RESET):
        model = new(qp_type, state, variant)
        exp = model.modify(values(target), A.STATE)
        if (state, target) == (S.RESET, S.ERR) and variant == "linux":
            check_refusal(exp, {EINVAL})  # the Linux table has no RESET->ERR
            continue
        assert exp.outcome is Outcome.ACCEPT, exp.rule.id
        model.apply(exp, True)
        assert model.state == target


@FAST
@given(qp_types, variants, st.data())
def test_legal_path_accepts_exactly_the_required_mask(qp_type, variant, data):
    """RESET->INIT->RTR->RTS: the required mask is accepted; one required bit less, or one
    bit the transition neither requires nor allows, is refused (after the uverbs rewrite)."""
    model = new(qp_type, S.RESET, variant)
    for nxt in (S.INIT, S.RTR, S.RTS):
        cur = model.state
        req, opt = required(qp_type, cur, nxt), optional(qp_type, cur, nxt)
        attrs = values(nxt, cur)
        if req:
            missing = data.draw(st.sets(st.sampled_from(list(req)), min_size=1))
            mask = (req & ~reduce(lambda m, b: m | b, missing)) | A.STATE
            check_refusal(model.modify(attrs, mask), {EINVAL})
        outside = [b for b in A if not b & (req | opt | A.STATE)] + list(RESERVED)
        extra = reduce(lambda m, b: m | b, data.draw(st.sets(st.sampled_from(outside), min_size=1)))
        exp = model.modify(attrs, req | A.STATE | extra)
        ok, errnos = verdict(variant, qp_type, cur, req | A.STATE | extra, nxt)
        if ok:  # only when uverbs dropped every extra bit (XRC), never otherwise
            assert variant == "linux" and not extra & ~XRC_STRIPPED.get(qp_type, A(0))
            assert exp.outcome is Outcome.ACCEPT, exp.rule.id
        else:
            check_refusal(exp, errnos)
        picked = data.draw(st.sets(st.sampled_from(list(opt))) if opt else st.just(set()))
        some_opt = reduce(lambda m, b: m | b, picked, A(0))
        exp = model.modify(attrs, req | A.STATE | some_opt)
        ok, errnos = verdict(variant, qp_type, cur, req | A.STATE | some_opt, nxt)
        assert (exp.outcome is Outcome.ACCEPT) is ok, exp.rule.id
        step(model, nxt)


@settings(max_examples=300, deadline=None)
@given(qp_types, variants, states, masks, states)
def test_modify_verdict_follows_the_kernel_rules(qp_type, variant, state, mask, target):
    """Random masks from any reachable state: the model's verdict is the reference verdict."""
    assume(reachable(qp_type, state))
    model = new(qp_type, state, variant)
    exp = model.modify(values(target, state), mask)
    ok, errnos = verdict(variant, qp_type, state, mask, target)
    if ok:
        assert exp.outcome is Outcome.ACCEPT, exp.rule.id
        assert exp.state_if_accepted == (target if A.STATE in mask else state)
    else:
        check_refusal(exp, errnos)
        assert exp.state_after(False) == state  # a refused modify changes nothing
        # a device that wrongly accepts goes where it was asked: the model names that target
        assert exp.state_if_accepted == (target if A.STATE in mask else state)
    assert_cited(exp)


# ---------------------------------------------------------------------------- queues
ops = st.lists(st.sampled_from(["send", "recv"]), max_size=8)


@FAST
@given(
    queued_types,
    variants,
    ops,
    st.lists(st.just("send"), max_size=3),
    st.sampled_from([S.RTS, S.SQD]),
)
def test_entering_err_flushes_in_posting_order(qp_type, variant, posts, held, state):
    model = new(qp_type, S.RTS, variant)
    sends, recvs = [], []
    for i, queue in enumerate(posts):
        post(model, queue, i)
        (sends if queue == "send" else recvs).append(i)
    if state == S.SQD:
        step(model, S.SQD)
        for j, _ in enumerate(held, 100):
            post(model, "send", j)  # held in SQD, flushed all the same
            sends.append(j)
    exp = model.modify(values(S.ERR), A.STATE)
    assert exp.outcome is Outcome.ACCEPT
    model.apply(exp, True)
    assert [c.wr_id for c in exp.completions if c.queue == "send"] == sends
    assert [c.wr_id for c in exp.completions if c.queue == "recv"] == recvs
    assert all(c.status == WCStatus.WR_FLUSH_ERR for c in exp.completions)
    assert not exp.never_run and not model.queues.never_run
    for queue in ("send", "recv"):
        late = post(model, queue, 999)
        assert late.outcome is Outcome.ACCEPT
        assert [(c.wr_id, c.queue, c.status) for c in late.completions] == [
            (999, queue, WCStatus.WR_FLUSH_ERR)
        ]


@FAST
@given(queued_types, variants, ops, states)
def test_reset_discards_without_completions(qp_type, variant, posts, state):
    assume(state in (S.RTS, S.SQD) or reachable(qp_type, state))
    model = new(qp_type, S.RTS, variant)
    for i, queue in enumerate(posts):
        post(model, queue, i)
    if state == S.SQD:
        step(model, S.SQD)
    outstanding = set(model.queues.outstanding_sends) | set(model.queues.recvs)
    exp = model.modify(values(S.RESET), A.STATE)
    assert exp.outcome is Outcome.ACCEPT and exp.completions == ()
    assert exp.never_run == outstanding == set(range(len(posts)))
    model.apply(exp, True)
    queues = model.queues
    assert queues.never_run == outstanding and not queues.sends and not queues.recvs


@FAST
@given(queued_types, variants, states, st.sampled_from(["send", "recv"]))
def test_refused_post_never_runs(qp_type, variant, state, queue):
    """Sends are refused before RTS, receives in RESET; a refused WR must never complete."""
    assume(reachable(qp_type, state))
    model = new(qp_type, state, variant)
    exp = post(model, queue, 4242)
    refused = state in (S.RESET, S.INIT, S.RTR) if queue == "send" else state == S.RESET
    assert (exp.outcome is Outcome.REFUSE) is refused
    assert (4242 in model.queues.never_run) is refused
    if refused:
        assert exp.never_run == {4242} and not exp.completions
    assert_cited(exp)


# ------------------------------------------------------------------------------- SQD
@FAST
@given(queued_types, variants, st.booleans(), st.integers(0, 1), st.integers(0, 3))
def test_sq_drained_iff_requested(qp_type, variant, bit, value, in_flight):
    assume(bit is False or qp_type != QPType.RAW_PACKET)  # RAW: NOTIFY not allowed
    model = new(qp_type, S.RTS, variant)
    for i in range(in_flight):
        post(model, "send", i)
    mask = A.STATE | (A.EN_SQD_ASYNC_NOTIFY if bit else A(0))
    exp = model.modify(values(S.SQD, en_sqd_async_notify=value), mask)
    assert exp.outcome is Outcome.ACCEPT
    model.apply(exp, True)
    requested = bit and value == 1
    drained = EventType.SQ_DRAINED
    last = exp
    if in_flight:
        assert drained not in exp.events
        for _ in range(in_flight - 1):
            assert drained not in model.send_completed().events
        last = model.send_completed()
    assert (drained in last.events) is requested
    assert (drained in last.forbidden_events) is not requested
    assert model.state == S.SQD and not model.queues.in_flight


# ----------------------------------------------------------------------------- errors
@FAST
@given(
    queued_types,
    variants,
    st.sampled_from(ERROR_STATUSES),
    st.integers(1, 4),
    st.integers(0, 3),
    st.sampled_from([S.RTS, S.SQD]),
)
def test_send_error(qp_type, variant, status, n_sends, n_recvs, state):
    model, sends, recvs = model_with_wrs(qp_type, variant, S.RTS, n_sends, n_recvs)
    if state == S.SQD:
        step(model, S.SQD)
    exp = model.send_completed(status)
    got = [(c.wr_id, c.queue, c.status) for c in exp.completions]
    first = [(sends[0], "send", status)]
    later = [(w, "send", WCStatus.WR_FLUSH_ERR) for w in sends[1:]]
    if qp_type in SQE_TYPES:
        assert model.state == S.SQE and model.queues.recvs == recvs and not model.queues.sends
        assert got == first + later
    else:
        assert model.state == S.ERR and not model.queues.recvs and not model.queues.sends
        assert got == first + later + [(w, "recv", WCStatus.WR_FLUSH_ERR) for w in recvs]
    assert EventType.SQ_DRAINED in exp.forbidden_events
    assert_cited(exp)


@FAST
@given(
    qp_types, variants, states, st.sampled_from(AFFILIATED), st.integers(0, 3), st.integers(0, 3)
)
def test_async_error_goes_to_err_with_its_event(qp_type, variant, state, event, ns, nr):
    assume(state != S.RESET and reachable(qp_type, state))
    model, _, _ = model_with_wrs(qp_type, variant, state, ns, nr)
    sends, recvs = model.queues.outstanding_sends, list(model.queues.recvs)
    exp = model.async_error(event)
    assert model.state == S.ERR and exp.events == (event,)
    assert [c.wr_id for c in exp.completions if c.queue == "send"] == sends
    assert [c.wr_id for c in exp.completions if c.queue == "recv"] == recvs
    assert all(c.status == WCStatus.WR_FLUSH_ERR for c in exp.completions)
    assert_cited(exp)


@FAST
@given(qp_types, variants, states)
def test_apply_refuses_a_stale_expectation(qp_type, variant, state):
    assume(reachable(qp_type, state))
    model = new(qp_type, state, variant)
    stale = model.modify(values(S.ERR), A.STATE)
    fresh = model.post_recv(1)
    try:
        model.apply(stale, True)
    except RuntimeError:
        pass
    else:
        raise AssertionError("apply() took an expectation that was not the last one")
    assert model.state == state
    model.apply(fresh, fresh.outcome is Outcome.ACCEPT)


# ---------------------------------------------------------------------- state machine
class QPWalk(RuleBasedStateMachine):
    """Random verbs on the model alone; the WR ledger and the citations must always hold."""

    @initialize(qp_type=qp_types, variant=variants, state=states)
    def start(self, qp_type, variant, state):
        self.model = QPModel(qp_type, variant)
        bring_to(self.model, state if reachable(qp_type, state) else S.RTS)
        self.variant = variant
        self.next_id = 0
        self.posted: dict[int, str] = {}
        self.completed: dict[str, list[int]] = {"send": [], "recv": []}
        self.rules_seen: set[str] = set()
        self.steps = 0

    def _seen(self, exp: Expectation, counts: bool) -> None:
        self.steps += 1
        assert_cited(exp)
        self.rules_seen.add(exp.rule.id)
        if counts:
            for c in exp.completions:
                assert self.posted[c.wr_id] == c.queue
                self.completed[c.queue].append(c.wr_id)

    def _modify(self, mask: Attr, target: QPState, device_refuses: bool) -> None:
        m = self.model
        exp = m.modify(values(target, m.state), mask)
        ok, errnos = verdict(self.variant, m.qp_type, m.state, mask, target)
        if ok:
            assert exp.outcome is Outcome.ACCEPT, exp.rule.id
        else:
            check_refusal(exp, errnos)
        accepted = ok and not device_refuses
        before = m.snapshot()
        m.apply(exp, accepted)
        if not accepted:
            assert m.snapshot() == before
        else:
            assert m.state == exp.state_if_accepted
        self._seen(exp, accepted)

    @precondition(lambda self: not self.model.destroyed)
    @rule(data=st.data(), device_refuses=st.sampled_from([False] * 7 + [True]))
    def legal_modify(self, data, device_refuses):
        m = self.model
        targets = [n for n in STATES if table_entry(self.variant, m.qp_type, m.state, n)]
        forward = [n for n in FORWARD.get(m.state, ()) if n in targets]
        target = data.draw(st.sampled_from(targets + forward * 4))  # mostly onwards
        req, opt = table_entry(self.variant, m.qp_type, m.state, target)
        some = data.draw(st.sets(st.sampled_from(list(opt)), max_size=2)) if opt else set()
        self._modify(reduce(lambda x, b: x | b, some, req | A.STATE), target, device_refuses)

    @precondition(lambda self: not self.model.destroyed and self.steps % 3 == 0)
    @rule(mask=masks, nxt=states)
    def random_modify(self, mask, nxt):
        self._modify(mask | A.STATE, nxt, False)

    @precondition(lambda self: not self.model.destroyed)
    @rule(queue=st.sampled_from(["send", "recv"]))
    def post_wr(self, queue):
        wr_id, self.next_id = self.next_id, self.next_id + 1
        self.posted[wr_id] = queue
        exp = post(self.model, queue, wr_id)
        self._seen(exp, exp.outcome is Outcome.ACCEPT)
        if exp.outcome is Outcome.REFUSE:
            assert wr_id in self.model.queues.never_run

    @precondition(lambda self: not self.model.destroyed and self.model.queues.in_flight)
    @rule(status=st.sampled_from([WCStatus.SUCCESS] * 4 + list(ERROR_STATUSES[:3])))
    def send_completes(self, status):
        head = self.model.queues.in_flight[0]
        exp = self.model.send_completed(status)
        assert exp.completions[0].wr_id == head and exp.completions[0].status == status
        self._seen(exp, True)

    @precondition(
        lambda self: (
            not self.model.destroyed
            and self.model.queues.recvs
            and self.model.state in (S.RTR, S.RTS, S.SQD, S.SQE)
        )
    )
    @rule(status=st.sampled_from([WCStatus.SUCCESS] * 4 + [WCStatus.LOC_LEN_ERR]))
    def recv_completes(self, status):
        exp = self.model.recv_completed(status)
        self._seen(exp, True)
        assert (self.model.state == S.ERR) is (status != WCStatus.SUCCESS) or (
            exp.state_before == S.ERR
        )

    @precondition(
        lambda self: (
            not self.model.destroyed and self.model.state != S.RESET and self.steps % 5 == 4
        )  # rare: ERR is absorbing
    )
    @rule(event=st.sampled_from(AFFILIATED))
    def async_error(self, event):
        exp = self.model.async_error(event)
        assert self.model.state == S.ERR and event in exp.events
        self._seen(exp, True)

    @precondition(lambda self: not self.model.destroyed)
    @rule()
    def query(self):
        exp = self.model.query()
        assert exp.state_if_accepted == self.model.state
        self.model.apply(exp, True)
        self._seen(exp, False)

    @precondition(lambda self: not self.model.destroyed and self.steps >= 20)  # ends the walk
    @rule()
    def destroy(self):
        outstanding = set(self.model.queues.outstanding_sends) | set(self.model.queues.recvs)
        exp = self.model.destroy()
        assert exp.never_run == outstanding and not exp.completions
        self.model.apply(exp, True)
        self._seen(exp, False)

    @precondition(lambda self: self.model.destroyed)
    @rule(verb=st.sampled_from(["query", "post_send", "post_recv", "modify", "destroy"]))
    def nothing_after_destroy(self, verb):
        calls = {
            "query": lambda m: m.query(),
            "post_send": lambda m: m.post_send(self.next_id),
            "post_recv": lambda m: m.post_recv(self.next_id),
            "modify": lambda m: m.modify(values(S.RESET), A.STATE),
            "destroy": lambda m: m.destroy(),
        }
        try:
            calls[verb](self.model)
        except RuntimeError:
            return
        raise AssertionError(f"{verb} was modelled on a destroyed QP")

    @invariant()
    def every_wr_accounted_once(self):
        m = self.model
        for queue in ("send", "recv"):
            done = self.completed[queue]
            assert done == sorted(set(done)), f"{queue} completions out of order or repeated"
        homes = [
            set(self.completed["send"]) | set(self.completed["recv"]),
            set(m.queues.outstanding_sends) | set(m.queues.recvs),
            set(m.queues.never_run),
        ]
        for wr_id in self.posted:
            assert sum(wr_id in h for h in homes) == 1, wr_id

    @invariant()
    def queues_fit_the_state(self):
        m = self.model
        if m.destroyed:
            return
        assert m.state in STATES
        if m.queues.sends:
            assert m.state in (S.RTS, S.SQD), m.state
        if m.state == S.RTS:
            assert all(w.started for w in m.queues.sends)
        if m.queues.recvs:
            assert m.state not in (S.RESET, S.ERR), m.state
        if m.draining:
            assert m.state == S.SQD and m.queues.in_flight


QPWalk.TestCase.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)
TestQPWalk = QPWalk.TestCase
