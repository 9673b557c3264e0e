"""Memory protection: a valid rkey does only what its MR grants (models/access.py).

Each request names a window of one of the responder's target MRs with that MR's own,
valid rkey: mid-region or ending at its last byte (granted), across its end, in an MR
registered without the right the operation needs, or in an MR of another PD (refused).
RC: a refused request completes with REM_ACCESS_ERR and both ends enter ERR; UC: a
refused WRITE is dropped and consumes no receive; iWARP: the data sink terminates. After
every step the target MRs' bytes are compared (the guard bands): nothing moves outside
a granted window, nothing in a refused one. UD carries no RDMA: it has no case here.
"""

import pytest

from models.enums import QPType
from models.pair import Fault, Op

REFUSED = [Fault.NO_RIGHT, Fault.PAST_END, Fault.OTHER_PD]
GRANTED = [Fault.GRANTED, Fault.AT_END]
RC_OPS = [Op.RDMA_WRITE, Op.RDMA_READ, Op.COMP_SWAP, Op.FETCH_ADD]


def _carried(h, op: Op) -> None:
    """Skip (reported) an operation this pair does not carry: iWARP has no atomics and the
    model no rule yet for an iWARP READ naming a target; a device without atomics."""
    if op not in h.ops:
        pytest.skip(f"{op.name} is not an operation of this {h.dev.qp_type.name} pair")
    if h.model.iwarp and op is not Op.RDMA_WRITE:
        pytest.skip(f"the iWARP model has no rule yet for an RDMA {op.name} naming a target")


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("fault", REFUSED, ids=str)
@pytest.mark.parametrize("op", RC_OPS, ids=str)
def test_rc_refused_access(make_pair, op, fault):
    """RC: REM_ACCESS_ERR and ERR at the requester, ERR at the responder (QP_ACCESS_ERR
    may come; its receive flushed), no byte of the target changed. iWARP: the WRITE
    completes, the data sink terminates, both ends enter ERR."""
    h = make_pair(QPType.RC)
    _carried(h, op)
    h.post_recv("b")
    h.post_send("a", op, fault)
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("fault", GRANTED, ids=str)
@pytest.mark.parametrize("op", RC_OPS, ids=str)
def test_rc_granted_access(make_pair, op, fault):
    """The near miss: the same request mid-region or ending at the region's last byte
    succeeds; a WRITE's 16 bytes land in its window and nowhere else; a SEND after it is
    delivered."""
    h = make_pair(QPType.RC)
    _carried(h, op)
    h.post_recv("b")
    h.post_send("a", op, fault)
    h.post_send("a", Op.SEND)
    h.quiet()


@pytest.mark.parametrize("fault", REFUSED, ids=str)
def test_uc_refused_write(make_pair, fault):
    """UC: the refused WRITE completes with SUCCESS and is dropped: both ends stay in RTS,
    no byte moves, and the receive waits for the SEND after it."""
    h = make_pair(QPType.UC)
    h.post_recv("b")
    h.post_send("a", Op.RDMA_WRITE, fault)
    h.post_send("a", Op.SEND)
    h.quiet()


@pytest.mark.parametrize("fault", GRANTED, ids=str)
def test_uc_granted_write(make_pair, fault):
    """UC's near miss: the WRITE lands in its window (once the pair is quiet), nowhere
    else."""
    h = make_pair(QPType.UC)
    h.post_send("a", Op.RDMA_WRITE, fault)
    h.quiet()


def test_uc_refused_and_granted_writes_in_turn(make_pair):
    """UC keeps running after a refusal: refused, granted, refused again; only the granted
    window changes, and the receive is the SEND's."""
    h = make_pair(QPType.UC)
    h.post_recv("b")
    h.post_send("a", Op.RDMA_WRITE, Fault.NO_RIGHT)
    h.post_send("a", Op.RDMA_WRITE, Fault.GRANTED)
    h.post_send("a", Op.RDMA_WRITE, Fault.OTHER_PD)
    h.post_send("a", Op.SEND)
    h.quiet()
