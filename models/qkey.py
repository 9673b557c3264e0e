"""Q_Keys: a UD datagram carries the Q_Key its send WR names (`remote_qkey`, in the DETH),
and the responder takes it only if that is its QP's own Q_Key.

The Q_Key is UD's only protection between processes that share a P_Key: a datagram
whose Q_Key does not match the destination QP's is dropped by the responder, silently
(no NAK on an unreliable service), and counted in the port's Q_Key violation counter.
The sender sees nothing of it: its send completes SUCCESS. The pair harness plants a
wrong Q_Key with `Fault.BAD_QKEY` (models/wire.py): the QP's own with low bits flipped
(`wrong_qkey`), never a controlled Q_Key (bit 31), whose send-side rule (IBTA C10-15:
such a WR means "use the QP's own Q_Key") is a separate matter (not modelled: rxe sends
the WR's value as it is, see docs/model.md).
"""

from __future__ import annotations

from models.enums import QPType
from models.operations import Op
from models.sources import DRIVER, MUST, Rule, Source

#: The bits a wrong Q_Key flips in the QP's own (bit 31, the controlled Q_Key bit, clear).
WRONG_QKEY_FLIP = 0x00F0F0F0
CONTROLLED_BIT = 0x80000000

MISMATCH = Rule(
    "pair.ud.qkey.mismatch",
    "a UD SEND (with or without immediate) whose remote_qkey is not the destination QP's "
    "Q_Key is silently dropped by the responder: no receive is consumed (the next matching "
    "datagram takes it), nothing completes there, no event; the requester completes the send "
    "with SUCCESS and both QPs stay in RTS",
    Source(
        "IBTA Vol. 1 and linux drivers/infiniband",
        "IBTA ch. 10.2.4 Q_Keys (a datagram is accepted only if its Q_Key matches the "
        "receiving QP's) and ch. 9.6 packet header validation (the DETH Q_Key check; a "
        "packet failing it is silently dropped), ch. 9.8 Unreliable service (no NAK), ch. "
        "14.2.5.6 PortInfo Q_KeyViolations (the drop is counted); rxe rxe_recv.c "
        "check_keys(): deth_qkey(pkt) != qp->attr.qkey -> set_qkey_viol_cntr(), -EINVAL, "
        "rxe_rcv() drops the skb (6.1 and 6.12); mlx5, bnxt_re, irdma, hns and efa hand the "
        "QP's Q_Key to the hardware in the QP context and the hardware checks it (mlx5 "
        "main.c mlx5_query_hca_port(): qkey_viol_cntr = qkey_violation_counter); siw has "
        "no UD",
        "a datagram whose Q_Key does not match the QP's is silently dropped",
    ),
    kind=MUST,
    layer=DRIVER,
)

#: The rules declared above (models/catalog.py lists the model's rules from these).
RULES: tuple[Rule, ...] = (MISMATCH,)

#: The rules of a drop that leaves the receive the message met posted: a completion of
#: that receive the ledger does not expect is judged by the drop's rule.
KEEPS_RECEIVE: frozenset[str] = frozenset({MISMATCH.id})


def wrong_qkey(qkey: int) -> int:
    """A Q_Key that is not `qkey` and not a controlled one (bit 31 clear)."""
    return (qkey ^ WRONG_QKEY_FLIP) & ~CONTROLLED_BIT


def check_plantable(qp_type: QPType | None, op: Op, inline: bool) -> None:
    """Raise ValueError unless a wrong Q_Key can be planted: a UD SEND, not inline (an
    inline WR's own rule would name its delivery)."""
    if qp_type is not QPType.UD or op not in (Op.SEND, Op.SEND_WITH_IMM) or inline:
        raise ValueError("the model plants a wrong Q_Key on a UD SEND, not inline, only")
