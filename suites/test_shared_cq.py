"""Several QPs on one CQ: completions routed by qp_num, a flush of one QP leaving the
other's WRs, a RESET of one QP leaving the other's completions (models/shared_cq.py).

The "a" end of each pair shares its send and receive CQs with a bystander: a QP of the
same type in the end's own context and PD, moved by modify only (so the end's async
events stay attributable by the context's fd). Every step goes through PairHarness
against models/pair.py, as in the other pair suites; the bystander has a model and a
ledger of its own, and each completion polled from the end's CQs goes to the QP its
qp_num names.
"""

import pytest

from models.enums import QPState, QPType
from models.operations import Op

S = QPState
ALL = [QPType.RC, QPType.UC, QPType.UD]
SHARED = ("a",)


def _shared_pair(make_pair, qp_type: QPType):
    """A connected pair whose "a" end shares its CQs with a bystander holding two
    receives (in INIT: iWARP's IDLE)."""
    h = make_pair(qp_type, shared_cq_sides=SHARED)
    h.shared.modify("a", S.INIT)
    h.shared.post_recv("a")
    h.shared.post_recv("a")
    return h


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_completions_are_routed_by_qp_num(make_pair, qp_type, variant):
    """Traffic both ways on the end while the bystander's receives wait on the same CQ:
    the end's completions name the end; then the bystander to ERR flushes its own
    receives (and on InfiniBand a SEND posted in ERR), naming the bystander."""
    h = _shared_pair(make_pair, qp_type)
    h.post.recv("a")
    h.post.send("b", Op.SEND)
    h.post.recv("b")
    h.post.send("a", Op.SEND)
    h.quiet()
    h.shared.modify("a", S.ERR)
    if not variant.connection_managed:  # siw: a user QP's post in ERR is never flushed
        h.shared.post_send("a")
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_end_flush_leaves_the_bystander(make_pair, qp_type):
    """The end to ERR with a receive of its own: that receive is flushed, the bystander's
    two are not (they stay posted, its state unchanged); then the bystander's own ERR
    flushes them."""
    h = _shared_pair(make_pair, qp_type)
    h.post.recv("a")
    h.modify("a", S.ERR)
    h.quiet()
    h.shared.modify("a", S.ERR)
    h.quiet()


@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_reset_keeps_the_bystander_entries(make_pair, qp_type):
    """The bystander's flushes are left unpolled on the CQ while the end is reset: they
    are still polled after. The end is then brought back and carries a SEND."""
    h = _shared_pair(make_pair, qp_type)
    with h.shared.unpolled():
        h.shared.modify("a", S.ERR)
        h.shared.pause()
        h.modify("a", S.RESET)
    h.lifecycle.bring_up("a")
    h.post.recv("a")
    h.post.send("b", Op.SEND)
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_bystander_reset_and_reuse(make_pair, qp_type, variant):
    """The bystander flushed, reset and given receives again, while the end carries
    traffic: its RESET touches nothing of the end's. On iWARP it is reset from IDLE,
    holding its receives (iwarp.reset.idle: they stay; ERR is final on siw)."""
    h = _shared_pair(make_pair, qp_type)
    if not variant.connection_managed:
        h.shared.modify("a", S.ERR)
    h.post.recv("a")
    with h.shared.unpolled():
        h.post.send("b", Op.SEND)
        h.shared.pause()
        h.shared.modify("a", S.RESET)
    h.shared.modify("a", S.INIT)
    h.shared.post_recv("a")
    h.post.recv("a")
    h.post.send("b", Op.SEND)
    h.quiet()
