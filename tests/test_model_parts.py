"""QPModel's parts on their own: the WR bookkeeping (models/work_queues.py) and the verb
held until the device answers (models/proposal.py)."""

import pytest

from models import rules
from models.enums import QPState, WCStatus
from models.outcomes import Outcome, expect
from models.proposal import Proposal
from models.work_queues import SendWR, WorkQueues


def test_held_sends_start_in_posting_order() -> None:
    q = WorkQueues()
    q.sends += [SendWR(1, True), SendWR(2, False), SendWR(3, True)]
    q.hold([3])
    assert q.in_flight == [1] and q.outstanding_sends == [1, 2, 3]
    assert q.start_waiting() == [2, 3] and q.in_flight == [1, 2, 3]


def test_flush_all_owes_sends_then_receives_and_empties_both() -> None:
    q = WorkQueues()
    q.sends.append(SendWR(1, True, signaled=False))
    q.recvs += [7, 8]
    done = q.flush_all()
    assert [(c.wr_id, c.queue, c.signaled) for c in done] == [
        (1, "send", False), (7, "recv", True), (8, "recv", True)]
    assert all(c.status == WCStatus.WR_FLUSH_ERR for c in done)
    assert not q.sends and not q.recvs and not q.never_run


def test_discarded_wrs_must_never_run() -> None:
    q = WorkQueues()
    q.sends.append(SendWR(1, False))
    q.recvs.append(2)
    q.discard_all()
    assert q.never_run == {1, 2} and not q.sends and not q.recvs


def test_a_proposal_is_taken_once_by_its_own_expectation() -> None:
    p = Proposal()
    exp = expect("post_send", Outcome.ACCEPT, rules.SEND_DONE, QPState.RTS)
    other = expect("post_send", Outcome.ACCEPT, rules.SEND_DONE, QPState.RTS)
    p.hold(exp, None, 5)
    with pytest.raises(RuntimeError):
        p.take(other)
    assert p.take(exp) == (None, 5)
    with pytest.raises(RuntimeError):
        p.take(exp)


def test_an_overruled_refusal_never_runs_its_wr() -> None:
    p = Proposal()
    exp = p.hold(expect("post_send", Outcome.ACCEPT, rules.SEND_DONE, QPState.RTS), None, 5)
    judged = p.overrule(exp, Outcome.REFUSE, rules.DESTROY)
    assert (judged.outcome, judged.never_run, judged.checked) == (
        Outcome.REFUSE, frozenset({5}), (rules.DESTROY,))
    assert p.take(judged) == (None, 5)
