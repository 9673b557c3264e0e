"""Every operation a connected QP carries, in RTS and through SQD, ERR and RESET.

SEND, RDMA WRITE, RDMA READ and immediate data (models/operations.py), signaled or not:
each completes with its opcode (and the receive with the immediate data), consumes a
receive or not, is held in SQD, flushed in ERR and discarded by RESET like any WR; an
unsignaled WR completes only in error. Inline WRs within max_inline_data behave as the
same WRs not inline, one byte beyond it is refused; an operation the QP type lacks is
refused or fails; READs beyond the initiator depth wait; the fields a WR's opcode does not
use are ignored. Every step goes through
PairHarness against models/pair.py, as in the other pair suites.
"""

import pytest

from models.enums import QPState, QPType
from models.operations import OPS_BY_TYPE, Op, foreign_ops
from models.wire import Fault
from qpconform.engine import unused_wr
from qpconform.engine.connect import HOLD

S = QPState
ALL = [QPType.RC, QPType.UC, QPType.UD]
TYPE_OPS = [(t, op) for t in ALL for op in OPS_BY_TYPE[t]]
_IDS = [f"{t.name}-{op.name}" for t, op in TYPE_OPS]


def _carried(h, op: Op) -> None:
    """Skip (reported) an operation this pair does not carry: iWARP has no immediate data
    and no atomics (RFC 5040); a device whose atomic_cap is NONE has no atomics."""
    if op not in h.ops:
        why = "the device's atomic_cap is NONE" if op.atomic else "RFC 5040 RDMAP has none"
        pytest.skip(f"{op.name} is not an operation of this {h.dev.qp_type.name} pair ({why})")


@pytest.mark.iwarp_pair
@pytest.mark.parametrize(("qp_type", "op"), TYPE_OPS, ids=_IDS)
def test_each_operation_completes_with_its_opcode(make_pair, qp_type, op):
    """One WR of each operation in RTS; a receive waits at the peer whether it is used
    or not (READ and WRITE must leave it for the SEND after them)."""
    h = make_pair(qp_type)
    _carried(h, op)
    h.post.recv("b")
    h.post.recv("b")
    h.post.send("a", op)
    h.post.send("a", Op.SEND)
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize(("qp_type", "op"), TYPE_OPS, ids=_IDS)
def test_the_fields_an_opcode_does_not_use_are_ignored(make_pair, qp_type, op):
    """One WR of each operation, then a SEND, with every bit set in the ibv_send_wr fields
    their opcodes do not use (imm_data without immediate data, the union wr beyond the
    opcode's member): both complete as the plain WRs do
    (ibta.post_send.unused_fields_ignored)."""
    h = make_pair(qp_type)
    _carried(h, op)
    h.post.recv("b")
    h.post.recv("b")
    h.post.send("a", op, unused=unused_wr.WILD)
    h.post.send("a", Op.SEND, unused=unused_wr.WILD)
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize(("qp_type", "op"), TYPE_OPS, ids=_IDS)
def test_unsignaled_wrs_then_a_signaled_one(make_pair, qp_type, op):
    """Selective signaling: two unsignaled WRs complete silently, the signaled one after
    them completes (and retires them: no completion of theirs may follow)."""
    h = make_pair(qp_type)
    _carried(h, op)
    for _ in range(3):
        h.post.recv("b")
    h.post.send("a", op, signaled=False)
    h.post.send("a", op, signaled=False)
    h.post.send("a", op)
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize(("qp_type", "op"), TYPE_OPS, ids=_IDS)
def test_unsignaled_wrs_not_yet_retired_at_err(make_pair, qp_type, op):
    """Unsignaled WRs, then ERR before any signaled completion retired them: each may be
    flushed or have finished silently (the consumer cannot tell), never complete with
    SUCCESS; the receives left at the peer are the peer's."""
    h = make_pair(qp_type)
    _carried(h, op)
    for _ in range(2):
        h.post.recv("b")
    h.post.send("a", op, signaled=False)
    h.post.send("a", op, signaled=False)
    h.modify("a", S.ERR)
    h.quiet()


@pytest.mark.parametrize(("qp_type", "op"), TYPE_OPS, ids=_IDS)
@pytest.mark.parametrize("target", [S.ERR, S.RESET, S.RTS], ids=lambda s: s.name)
def test_wrs_held_in_sqd_then_left(make_pair, qp_type, op, target):
    """WRs of `op` posted in SQD are held (signaled or not); leaving SQD for ERR flushes
    each of them, unsignaled ones too; RESET discards them; RTS starts them."""
    h = make_pair(qp_type)
    _carried(h, op)
    for _ in range(2):
        h.post.recv("b")
    h.modify("a", S.SQD)
    h.post.send("a", op, signaled=False)
    h.post.send("a", op)
    h.modify("a", target)
    h.quiet()


@pytest.mark.parametrize("op", [Op.RDMA_READ, Op.RDMA_WRITE, Op.WRITE_WITH_IMM, Op.FETCH_ADD])
@pytest.mark.parametrize("target", [S.SQD, S.ERR, S.RESET], ids=lambda s: s.name)
def test_rc_operation_in_flight_behind_a_blocked_send(make_pair, op, target):
    """An RC WR started behind a SEND the peer RNR-NAKs forever (rnr_retry 7): both are in
    flight when the QP moves. SQD drains only once a receive lets the SEND finish (then
    the WR behind it), ERR flushes both, RESET discards both."""
    h = make_pair(QPType.RC, HOLD)
    _carried(h, op)
    h.post.send("a")  # RNR-blocked: in flight, and so is what follows it
    h.post.send("a", op)
    h.modify("a", target)
    h.post.recv("b")
    h.post.recv("b")
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("qp_type", ALL, ids=lambda t: t.name)
def test_unsignaled_wr_with_a_bad_lkey_completes_in_error(make_pair, qp_type):
    """An unsignaled WR that fails completes anyway, with its error (and the QP moves on as
    for any send error)."""
    h = make_pair(qp_type)
    h.post.send("a", Op.SEND, Fault.BAD_LKEY, signaled=False)
    h.quiet()


@pytest.mark.parametrize("qp_type", [QPType.RC, QPType.UC], ids=lambda t: t.name)
def test_write_with_immediate_needs_a_receive(make_pair, qp_type):
    """A WRITE with immediate data consumes a receive: RC with none is RNR-NAKed until
    retries run out (RNR_RETRY_EXC_ERR); UC's is dropped (the requester still succeeds)."""
    h = make_pair(qp_type)
    h.post.send("a", Op.WRITE_WITH_IMM)
    h.quiet()


@pytest.mark.parametrize("op", [Op.RDMA_READ, Op.RDMA_WRITE, Op.COMP_SWAP])
def test_rc_bad_rkey(make_pair, op):
    """An RC READ, WRITE or atomic with a bad rkey: REM_ACCESS_ERR, both ends in ERR (the
    responder's QP_ACCESS_ERR event too)."""
    h = make_pair(QPType.RC)
    _carried(h, op)
    h.post.recv("a")
    h.post.send("a", op, Fault.BAD_RKEY)
    h.quiet()


@pytest.mark.parametrize("op", [Op.COMP_SWAP, Op.FETCH_ADD])
def test_rc_atomic_to_a_misaligned_address(make_pair, op):
    """An RC atomic whose remote address is 4 bytes off 8-byte alignment, then a SEND: the
    post refused (EINVAL: the provider checks, rxe) and the SEND delivered; or posted, and
    then REM_INV_REQ_ERR and ERR at the requester, ERR at the responder (its event, if any,
    the driver's), the SEND flushed. Never a SUCCESS."""
    h = make_pair(QPType.RC)
    _carried(h, op)
    h.post.recv("b")
    h.post.send("a", op, Fault.MISALIGNED)
    h.post.send("a", Op.SEND)
    h.quiet()


@pytest.mark.parametrize("qp_type", [QPType.RC, QPType.UC], ids=lambda t: t.name)
def test_first_packet_to_a_peer_in_rtr(make_pair, qp_type):
    """A peer back in RTR only receives: the SEND completes at both ends; COMM_EST may come
    once with the first packet (mlx5, hfi1 raise it; rxe does not), never twice."""
    h = make_pair(qp_type)
    h.modify("b", S.RESET)
    h.lifecycle.bring_up("b", S.RTR)
    h.post.recv("b")
    h.post.send("a")
    h.quiet()


INLINE_OPS = [(t, op) for t, op in TYPE_OPS if op.inlinable]
_INLINE_IDS = [f"{t.name}-{op.name}" for t, op in INLINE_OPS]


def _inline_fits(h, over_cap: bool = False) -> None:
    """Skip (reported) where the end cannot post the inline WR the case needs."""
    if not h.post.can_inline("a", over_cap):
        cap = h.post.max_inline("a")
        why = "beyond the MR the case posts from" if over_cap else "below the WR's 16 bytes"
        pytest.skip(f"max_inline_data {cap} is {why}")


@pytest.mark.iwarp_pair
@pytest.mark.parametrize(("qp_type", "op"), INLINE_OPS, ids=_INLINE_IDS)
def test_inline_wr_behaves_as_not_inline(make_pair, qp_type, op):
    """A WR of `op` posted inline (16 bytes, within the max_inline_data query_qp reports),
    then an inline SEND: the same completions at both ends as without IBV_SEND_INLINE."""
    h = make_pair(qp_type)
    _carried(h, op)
    _inline_fits(h)
    h.post.recv("b")
    h.post.recv("b")
    h.post.send("a", op, inline=True)
    h.post.send("a", Op.SEND, inline=True, signaled=False)
    h.post.send("a", Op.SEND)
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize(("qp_type", "op"), INLINE_OPS, ids=_INLINE_IDS)
def test_inline_wr_beyond_the_cap_is_refused(make_pair, qp_type, op):
    """One byte more than the reported max_inline_data, inline: post_send refuses it, it
    never runs and changes nothing (the SEND after it completes as usual)."""
    h = make_pair(qp_type)
    _carried(h, op)
    _inline_fits(h, over_cap=True)
    h.post.recv("b")
    h.post.send("a", op, Fault.INLINE_OVER_CAP)
    h.post.send("a", Op.SEND)
    h.quiet()


FOREIGN = [(t, op) for t in (QPType.UC, QPType.UD) for op in foreign_ops(t)]


@pytest.mark.parametrize(("qp_type", "op"), FOREIGN, ids=[f"{t.name}-{o.name}" for t, o in FOREIGN])
def test_an_operation_the_type_lacks(make_pair, qp_type, op):
    """READ or an atomic on UC, WRITE, READ or an atomic on UD: refused at post, or
    accepted and completed with LOC_QP_OP_ERR (the QP leaving RTS); never SUCCESS, and the
    receive waiting at the peer stays there."""
    h = make_pair(qp_type)
    h.post.recv("b")
    h.post.send("a", op)
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("op", [Op.RDMA_READ, Op.FETCH_ADD, Op.COMP_SWAP])
def test_reads_beyond_the_initiator_depth_wait(make_pair, op):
    """max_rd_atomic 1 (iWARP: the ORD of 1 the connection asks, cm_connect.RESOURCES):
    four READs (or atomics) posted back to back, the last signaled only; all complete with
    SUCCESS, in order: the ones beyond the depth wait, they do not fail."""
    h = make_pair(QPType.RC)
    _carried(h, op)
    with h.post.back_to_back():
        for i in range(4):
            h.post.send("a", op, signaled=i != 1)
    h.quiet()


FENCE_AFTER = [Op.RDMA_READ, Op.COMP_SWAP, Op.FETCH_ADD]


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("before", FENCE_AFTER)
def test_fenced_send_carries_what_the_read_returned(make_pair, before):
    """RC: a READ (or an atomic) lands in the requester's READ sink; a SEND posted right
    behind it (no wait) with IBV_SEND_FENCE sends that sink: the fence holds it until the
    READ completed, so the peer receives the READ's bytes (the atomic's original value),
    never the sink's earlier ones (pair.fence.after_reads). A SEND not fenced behind it
    completes as usual (its bytes are not compared: either would conform)."""
    h = make_pair(QPType.RC)
    _carried(h, before)
    h.post.recv("b")
    h.post.recv("b")
    with h.post.back_to_back():
        h.post.send("a", before)
        h.post.send("a", Op.SEND, fence=True)
        h.post.send("a", Op.SEND)
    h.quiet()


@pytest.mark.parametrize("before", FENCE_AFTER)
def test_fenced_send_held_in_sqd_with_the_read(make_pair, before):
    """InfiniBand RC: the READ (or atomic) and the fenced SEND behind it are held in SQD and
    start together at SQD->RTS (rxe: at the next post_send's doorbell, a known quirk; the
    WRITE after them rings it): the requester meets the fenced SEND while the READ is
    surely outstanding, so only the fence keeps the sink's earlier bytes from going out
    (pair.fence.after_reads)."""
    h = make_pair(QPType.RC)
    _carried(h, before)
    h.post.recv("b")
    h.post.recv("b")
    h.modify("a", S.SQD)
    h.post.send("a", before)
    h.post.send("a", Op.SEND, fence=True)
    h.modify("a", S.RTS)
    h.post.send("a", Op.RDMA_WRITE)
    h.post.send("a", Op.SEND)
    h.quiet()


@pytest.mark.iwarp_pair
def test_fenced_send_with_no_read_before_it(make_pair):
    """A fenced SEND with no READ or atomic before it starts at once: the peer receives the
    sink's first bytes; then a READ and a fenced SEND behind it on the same QP: the READ's."""
    h = make_pair(QPType.RC)
    h.post.recv("b")
    h.post.send("a", Op.SEND, fence=True)
    h.post.recv("b")
    with h.post.back_to_back():
        h.post.send("a", Op.RDMA_READ, signaled=False)
        h.post.send("a", Op.SEND, fence=True)
    h.quiet()


@pytest.mark.iwarp_pair
@pytest.mark.parametrize("op", [Op.SEND_WITH_IMM, Op.RDMA_WRITE, Op.WRITE_WITH_IMM])
def test_fenced_wr_behind_reads_beyond_the_depth(make_pair, op):
    """Three READs back to back (beyond max_rd_atomic 1: they wait in turn), then a fenced
    `op`: it starts once all three completed, and completes as the same WR without the
    fence (a SEND with immediate delivers the READs' bytes)."""
    h = make_pair(QPType.RC)
    _carried(h, op)
    h.post.recv("b")
    with h.post.back_to_back():
        for _ in range(3):
            h.post.send("a", Op.RDMA_READ)
        h.post.send("a", op, fence=True)
    h.quiet()
