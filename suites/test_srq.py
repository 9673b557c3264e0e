"""Shared receive queues: receives taken from the SRQ, kept when its QP enters ERR, the
Last WQE Reached and SRQ Limit Reached events (models/srq.py).

The responder ("b") of each pair takes its receives from an SRQ of its own; every step
goes through PairHarness against models/pair.py, as in the other pair suites. A device
without SRQs (max_srq 0) skips these cases, reported as the missing feature SRQ.
"""

import pytest

from models.enums import QPState, QPType
from models.operations import Op
from models.wire import Fault

S = QPState
ALL = [QPType.RC, QPType.UC, QPType.UD]
SRQ_END = ("b",)


def _srq_pair(make_pair, qp_type: QPType):
    """A connected pair whose "b" end has an SRQ."""
    return make_pair(qp_type, srq_sides=SRQ_END)


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_receives_come_from_the_srq(make_pair, qp_type):
    """Receives posted to the SRQ are taken in order by the messages that need one (with
    immediate data too, where the pair carries it); a READ or WRITE takes none."""
    h = _srq_pair(make_pair, qp_type)
    for _ in range(3):
        h.post.srq_recv("b")
    h.post.send("a", Op.SEND)
    if Op.RDMA_WRITE in h.ops:
        h.post.send("a", Op.RDMA_WRITE)
    h.post.send("a", Op.SEND_WITH_IMM if Op.SEND_WITH_IMM in h.ops else Op.SEND)
    h.post.send("a", Op.SEND)
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_post_recv_on_the_qp_of_an_srq_is_refused(make_pair, qp_type):
    """The QP of an SRQ has no receive queue of its own: post_recv on it is refused and
    the WR never runs; the SRQ still serves the next message. The post is made in a child
    process: a provider that crashes on it (libsiw: SIGFPE) is a divergence, not the end
    of the session."""
    h = _srq_pair(make_pair, qp_type)
    h.post.qp_recv("b", isolated=True)
    h.post.srq_recv("b")
    h.post.send("a", Op.SEND)
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_err_keeps_the_srq_receives_and_raises_last_wqe(make_pair, qp_type, variant):
    """The SRQ's QP to ERR: Last WQE Reached, its sends flushed, the SRQ's receives not.
    On InfiniBand the QP is then reset and brought back: the first message takes a
    receive posted before ERR (RESET discards nothing of the SRQ)."""
    h = _srq_pair(make_pair, qp_type)
    h.post.srq_recv("b")
    h.post.srq_recv("b")
    h.modify("b", S.ERR)
    h.quiet()
    if variant.connection_managed:  # an iWARP QP is never reused
        return
    h.lifecycle.reset("b")
    h.lifecycle.bring_up("b")
    h.post.send("a", Op.SEND)
    h.quiet()


@pytest.mark.parametrize("qp_type", [QPType.RC], ids=lambda t: t.name)
def test_send_error_takes_the_srq_qp_to_err_with_last_wqe(make_pair, qp_type):
    """An RC send of the SRQ's end fails (a bad local key): ERR, and Last WQE Reached;
    the SRQ's receive stays."""
    h = _srq_pair(make_pair, qp_type)
    h.post.srq_recv("b")
    h.post.send("b", Op.SEND, Fault.BAD_LKEY)
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_srq_limit_reached_once(make_pair, qp_type):
    """Four receives, the limit armed at 3: the first message leaves 3 (no event), the
    second leaves 2 (SRQ Limit Reached), the third leaves 1 (disarmed: no event)."""
    h = _srq_pair(make_pair, qp_type)
    for _ in range(4):
        h.post.srq_recv("b")
    h.post.arm_srq("b", 3)
    for _ in range(3):
        h.post.send("a", Op.SEND)
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_srq_sizes_and_limit_read_back(make_pair, qp_type):
    """create_srq's written-back max_wr and max_sge at least what was asked, query_srq's at
    least those (models/srq_sizes.py); the limit read back as armed, then, once it fired,
    0 or the limit (a "may": rxe disarms to 0, siw keeps the value)."""
    h = _srq_pair(make_pair, qp_type)
    h.srq_sizes.check("b")
    for _ in range(4):
        h.post.srq_recv("b")
    h.post.arm_srq("b", 3)
    h.post.send("a", Op.SEND)
    h.post.send("a", Op.SEND)
    h.quiet()
    h.srq_sizes.check("b")


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("qp_type", [QPType.RC], ids=lambda t: t.name)
def test_srq_resize(make_pair, qp_type):
    """Where the device has IBV_DEVICE_SRQ_RESIZE (an optional feature: skipped, and said,
    where it has not): the SRQ holding one receive grows to 128 and shrinks to 8 (query_srq
    at least each size); armed at 3, a resize to 2 (below the limit) is refused changing
    nothing, or accepted with room; a SEND still takes the receive, and the limit fires.
    The SRQ, not the QP type, is under test: RC only. Not sent to a device: a resize below
    the receives held (srq.resize.below_held, checked on the fake): Linux 6.1's rxe frees
    the SRQ's queue when that resize fails (rxe_srq_from_attr(): err2), and the next
    query_srq or receive dereferences NULL: a hazard, not a divergence."""
    h = _srq_pair(make_pair, qp_type)
    if not h.srq_sizes.resizable:
        pytest.skip("the device lacks IBV_DEVICE_SRQ_RESIZE: SRQ resize is an optional "
                    "feature (srq.resize)")
    resize_below_the_limit(h)


def resize_below_the_limit(h, quiet: float | None = None) -> None:
    """test_srq_resize's steps on a connected pair whose "b" end has an SRQ (the
    self-tests run them on the fake, `quiet` its short window): one receive held, grown,
    shrunk, armed at 3, resized to 2 below the limit, then a SEND fires the limit."""
    h.post.srq_recv("b")
    h.srq_sizes.resize("b", 128)
    h.srq_sizes.resize("b", 8)
    h.post.arm_srq("b", 3)
    h.srq_sizes.resize("b", 2)
    h.post.send("a", Op.SEND)
    h.quiet(quiet)
    h.srq_sizes.check("b")
