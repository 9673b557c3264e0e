"""Memory protection: a valid rkey does only what its MR grants (models/access.py).

Each request names a window of one of the responder's target MRs with that MR's own,
valid rkey: mid-region or ending at its last byte (granted), across its end, in an MR
registered without the right the operation needs, or in an MR of another PD (refused).
RC: a refused request completes with REM_ACCESS_ERR and both ends enter ERR; UC: a
refused WRITE is dropped and consumes no receive; iWARP: the data sink terminates. After
every step the target MRs' bytes are compared (the guard bands): nothing moves outside
a granted window, nothing in a refused one. UD carries no RDMA: its protection is the
Q_Key (models/qkey.py), the last cases here.

The requester checks its own SGEs too (models/local_access.py): a SEND or WRITE whose
local SGE crosses its MR's end, or names an MR of another PD than the QP's, completes
with LOC_PROT_ERR and nothing leaves (RC: ERR; UC/UD: SQE). The SGE lies in one of the
requester's own target MRs, a WRITE names the peer's granted window: the guard bands see
no byte of either move. An RC READ's or atomic's sink in an MR without LOCAL_WRITE: the
request is answered, the response not placed, LOC_PROT_ERR and ERR at the requester.
An RC SEND into a receive whose MR lacks LOCAL_WRITE: LOC_PROT_ERR on the receive,
REM_OP_ERR at the requester, both ERR. Not on iWARP yet.

The responder QP's own qp_access_flags are a check of their own: narrowed by an RTS->RTS
modify while the pair is connected (or set so by RTR->RTS), they refuse the request even
into a fully granted MR (RC: REM_ACCESS_ERR or REM_INV_REQ_ERR, both ERR; UC: dropped);
widened again, they let it through. Not on iWARP yet.
"""

import pytest

from models.enums import AccessFlag, Attr, QPState, QPType
from models.operations import Op
from models.wire import Fault

REFUSED = [Fault.NO_RIGHT, Fault.PAST_END, Fault.OTHER_PD]
GRANTED = [Fault.GRANTED, Fault.AT_END]
RC_OPS = [Op.RDMA_WRITE, Op.RDMA_READ, Op.COMP_SWAP, Op.FETCH_ADD]
#: The access flags the harness connects an RC and a UC QP with.
FULL = int(AccessFlag.LOCAL_WRITE | AccessFlag.REMOTE_WRITE | AccessFlag.REMOTE_READ
           | AccessFlag.REMOTE_ATOMIC)
UC_FULL = int(AccessFlag.LOCAL_WRITE | AccessFlag.REMOTE_WRITE)


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
    h.post.recv("b")
    h.post.send("a", op, fault)
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
    h.post.recv("b")
    h.post.send("a", op, fault)
    h.post.send("a", Op.SEND)
    h.quiet()


@pytest.mark.parametrize("fault", REFUSED, ids=str)
def test_uc_refused_write(make_pair, fault):
    """UC: the refused WRITE completes with SUCCESS and is dropped: both ends stay in RTS,
    no byte moves, and the receive waits for the SEND after it."""
    h = make_pair(QPType.UC)
    h.post.recv("b")
    h.post.send("a", Op.RDMA_WRITE, fault)
    h.post.send("a", Op.SEND)
    h.quiet()


@pytest.mark.parametrize("fault", GRANTED, ids=str)
def test_uc_granted_write(make_pair, fault):
    """UC's near miss: the WRITE lands in its window (once the pair is quiet), nowhere
    else."""
    h = make_pair(QPType.UC)
    h.post.send("a", Op.RDMA_WRITE, fault)
    h.quiet()


def test_uc_refused_and_granted_writes_in_turn(make_pair):
    """UC keeps running after a refusal: refused, granted, refused again; only the granted
    window changes, and the receive is the SEND's."""
    h = make_pair(QPType.UC)
    h.post.recv("b")
    h.post.send("a", Op.RDMA_WRITE, Fault.NO_RIGHT)
    h.post.send("a", Op.RDMA_WRITE, Fault.GRANTED)
    h.post.send("a", Op.RDMA_WRITE, Fault.OTHER_PD)
    h.post.send("a", Op.SEND)
    h.quiet()


# ------------------------------------------------------------- the QP's own access flags
#: The right each RC operation needs of the responder QP's qp_access_flags.
_NEEDS = {Op.RDMA_WRITE: AccessFlag.REMOTE_WRITE, Op.RDMA_READ: AccessFlag.REMOTE_READ,
          Op.COMP_SWAP: AccessFlag.REMOTE_ATOMIC, Op.FETCH_ADD: AccessFlag.REMOTE_ATOMIC}


def _qp_flags(h, side: str, flags: int, connected: bool = True) -> None:
    """Set `side`'s QP access flags: RTS->RTS while connected, else with its RTR->RTS
    (the other end then brought up too)."""
    if connected:
        h.modify(side, QPState.RTS, {"qp_access_flags": flags}, Attr.ACCESS_FLAGS)
        return
    h.modify(side, QPState.RTS, {**h.lifecycle.peer_psns(side), "qp_access_flags": flags},
             Attr.ACCESS_FLAGS)
    h.lifecycle.bring_up(h.model.peer_of(side), QPState.RTS)


def _rtr_pair(make_pair, qp_type: QPType):
    """A pair of `qp_type` with both ends in RTR (the RTR->RTS move still to make)."""
    h = make_pair(qp_type, connect=False)
    for state in (QPState.INIT, QPState.RTR):
        for side in ("a", "b"):
            h.lifecycle.bring_up(side, state)
    return h


@pytest.mark.parametrize("connected", [True, False], ids=["rts_rts", "rtr_rts"])
@pytest.mark.parametrize("op", RC_OPS, ids=str)
def test_rc_qp_without_the_right(make_pair, op, connected):
    """RC: the responder's QP loses the right `op` needs (RTS->RTS while connected, or
    RTR->RTS): a request into a fully granted MR is refused, REM_ACCESS_ERR or
    REM_INV_REQ_ERR (the same one all run) and ERR at the requester, ERR at the
    responder; no byte moves."""
    h = make_pair(QPType.RC) if connected else _rtr_pair(make_pair, QPType.RC)
    if op not in h.ops:
        pytest.skip(f"{op.name} is not an operation of this pair")
    _qp_flags(h, "b", FULL & ~_NEEDS[op], connected)
    h.post.recv("b")
    h.post.send("a", op, Fault.GRANTED)
    h.quiet()


@pytest.mark.parametrize("op", RC_OPS, ids=str)
def test_rc_qp_right_taken_and_given_back(make_pair, op):
    """The near miss: the right taken away, then given back by a second RTS->RTS: the
    request goes through (a WRITE's bytes land in its window), and so does a SEND."""
    h = make_pair(QPType.RC)
    if op not in h.ops:
        pytest.skip(f"{op.name} is not an operation of this pair")
    _qp_flags(h, "b", FULL & ~_NEEDS[op])
    _qp_flags(h, "b", FULL)
    h.post.recv("b")
    h.post.send("a", op, Fault.GRANTED)
    h.post.send("a", Op.SEND)
    h.quiet()


@pytest.mark.parametrize("connected", [True, False], ids=["rts_rts", "rtr_rts"])
@pytest.mark.parametrize("op", [Op.RDMA_WRITE, Op.WRITE_WITH_IMM], ids=str)
def test_uc_qp_without_remote_write(make_pair, op, connected):
    """UC: the responder's QP without REMOTE_WRITE drops a WRITE (with immediate too:
    its receive is not consumed) silently; both stay in RTS, no byte moves; a SEND after
    it takes the receive; then REMOTE_WRITE is given back and a WRITE lands."""
    h = make_pair(QPType.UC) if connected else _rtr_pair(make_pair, QPType.UC)
    _qp_flags(h, "b", int(AccessFlag.LOCAL_WRITE), connected)
    h.post.recv("b")
    h.post.send("a", op, Fault.GRANTED if op is Op.RDMA_WRITE else Fault.NONE)
    h.post.send("a", Op.SEND)
    _qp_flags(h, "b", UC_FULL)
    h.post.send("a", Op.RDMA_WRITE, Fault.GRANTED)
    h.quiet()


# ------------------------------------------------------------------------------ Q_Keys
@pytest.mark.parametrize("op", [Op.SEND, Op.SEND_WITH_IMM], ids=str)
def test_ud_send_with_a_wrong_qkey(make_pair, op):
    """UD: a datagram naming a Q_Key not the responder QP's is dropped silently: the send
    completes SUCCESS, both ends stay in RTS, no event, the receive is not consumed; the
    near miss, the next datagram with the right Q_Key, takes that receive."""
    h = make_pair(QPType.UD)
    h.post.recv("b")
    h.post.send("a", op, Fault.BAD_QKEY)
    h.quiet()
    h.post.send("a", op)
# ------------------------------------------------------------- the requester's own SGEs
LOCAL = [Fault.LOCAL_PAST_END, Fault.LOCAL_OTHER_PD]


#: The operations carrying a local SGE's data out, per QP type (UD: no RDMA).
LOCAL_CASES = [(t, op) for t in (QPType.RC, QPType.UC, QPType.UD)
               for op in (Op.SEND, Op.RDMA_WRITE, Op.WRITE_WITH_IMM)
               if t is not QPType.UD or op is Op.SEND]


@pytest.mark.parametrize("fault", LOCAL, ids=str)
@pytest.mark.parametrize(("qp_type", "op"), LOCAL_CASES, ids=lambda v: str(getattr(v, "name", v)))
def test_local_sge_refused(make_pair, qp_type, op, fault):
    """LOC_PROT_ERR at the requester, which leaves RTS (RC: ERR; UC/UD: SQE) and flushes
    the SEND posted after it; nothing reaches the peer (its receive is not consumed), no
    byte of either end's targets moves."""
    h = make_pair(qp_type)
    h.post.recv("b")
    h.post.send("a", op, fault)
    h.post.send("a", Op.SEND)
    h.quiet()


@pytest.mark.parametrize("fault", LOCAL, ids=str)
@pytest.mark.parametrize("qp_type", [QPType.UC, QPType.UD], ids=lambda t: t.name)
def test_local_sge_refused_then_sqe_recovers(make_pair, qp_type, fault):
    """UC/UD: after the refused SEND the QP is in SQE; SQE->RTS brings it back and a
    valid SEND takes the receive the refused one never reached."""
    h = make_pair(qp_type)
    h.post.recv("b")
    h.post.send("a", Op.SEND, fault)
    h.modify("a", QPState.RTS)
    h.post.send("a", Op.SEND)
    h.quiet()


@pytest.mark.parametrize("op", [Op.RDMA_READ, Op.COMP_SWAP, Op.FETCH_ADD], ids=str)
def test_rc_sink_without_local_write(make_pair, op):
    """RC: a READ or atomic whose sink lies in an MR registered without LOCAL_WRITE goes
    out and is answered, but its response is not placed: LOC_PROT_ERR and ERR at the
    requester (the SEND after it flushed), the responder stays in RTS, no byte of the
    sink's MR changes."""
    h = make_pair(QPType.RC)
    _carried(h, op)
    h.post.send("a", op, Fault.SINK_READ_ONLY)
    h.post.send("a", Op.SEND)
    h.quiet()


def test_rc_send_into_a_receive_without_local_write(make_pair):
    """RC: a SEND into a receive whose SGE lies in an MR registered without LOCAL_WRITE
    (post_recv accepts it): the receive completes LOC_PROT_ERR and the responder enters
    ERR (its next receive flushed), the requester completes REM_OP_ERR and enters ERR; no
    byte of the receive's MR changes."""
    h = make_pair(QPType.RC)
    h.post.recv("b", read_only=True)
    h.post.recv("b")
    h.post.send("a", Op.SEND)
    h.quiet()
