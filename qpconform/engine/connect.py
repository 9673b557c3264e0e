"""How a pair is connected: the bring-up masks and a valid value for every attribute.

The required masks come from man ibv_modify_qp(3), independent of the model's
table, so a table error cannot hide in the harness's own bring-up.
"""

from __future__ import annotations

from models.enums import AccessFlag, Attr, QPState, QPType
from models.wire import WireSettings

S = QPState
#: Short transport timers so automatic transitions happen well under a second on rxe.
FAST = WireSettings(timeout=10, retry_cnt=1, rnr_retry=1, min_rnr_timer=1)
#: RC sends wait (RNR, infinite retry) until the peer posts a receive: outstanding for sure.
#: The local ACK timeout (timeout 14: 67 ms, not FAST's 4 ms) and 7 retries leave a slow
#: responder (a software device on a loaded host) about half a second to send its RNR NAK:
#: a missed NAK would end the send with RETRY_EXC_ERR and the QP in ERR, which is not what
#: these tests are about (with 1 retry, rxe on trixie missed it once with VMs and
#: self-tests saturating the 2 cores).
HOLD = WireSettings(timeout=14, retry_cnt=7, rnr_retry=7, min_rnr_timer=1)
QKEY = 0x11111111

#: Required bring-up masks from man ibv_modify_qp(3) (independent of the model's table).
_BRING_UP: dict[tuple[QPState, QPState], dict[QPType, Attr]] = {
    (S.RESET, S.INIT): {
        QPType.UD: Attr.PKEY_INDEX | Attr.PORT | Attr.QKEY,
        QPType.UC: Attr.PKEY_INDEX | Attr.PORT | Attr.ACCESS_FLAGS,
        QPType.RC: Attr.PKEY_INDEX | Attr.PORT | Attr.ACCESS_FLAGS,
    },
    (S.INIT, S.RTR): {
        QPType.UD: Attr(0),
        QPType.UC: Attr.AV | Attr.PATH_MTU | Attr.DEST_QPN | Attr.RQ_PSN,
        QPType.RC: Attr.AV
        | Attr.PATH_MTU
        | Attr.DEST_QPN
        | Attr.RQ_PSN
        | Attr.MAX_DEST_RD_ATOMIC
        | Attr.MIN_RNR_TIMER,
    },
    (S.RTR, S.RTS): {
        QPType.UD: Attr.SQ_PSN,
        QPType.UC: Attr.SQ_PSN,
        QPType.RC: Attr.SQ_PSN
        | Attr.TIMEOUT
        | Attr.RETRY_CNT
        | Attr.RNR_RETRY
        | Attr.MAX_QP_RD_ATOMIC,
    },
}


def bring_up_mask(qp_type: QPType, cur: QPState, nxt: QPState) -> Attr:
    """The attributes a transition requires (bring-up per the man page; others need none)."""
    return _BRING_UP.get((cur, nxt), {}).get(QPType(qp_type), Attr(0))


#: What a connected QP lets its peer do: write (RC, UC), read and atomics (RC only).
_ACCESS = {
    QPType.RC: AccessFlag.LOCAL_WRITE | AccessFlag.REMOTE_WRITE | AccessFlag.REMOTE_READ
    | AccessFlag.REMOTE_ATOMIC,
    QPType.UC: AccessFlag.LOCAL_WRITE | AccessFlag.REMOTE_WRITE,
}


def connect_values(
    qp_type: QPType,
    port: int,
    gid_index: int,
    mtu: int,
    peer_qpn: int,
    settings: WireSettings,
) -> dict[str, int]:
    """A valid value for every attribute a bring-up or SQD change needs."""
    return {
        "port_num": port,
        "pkey_index": 0,
        "qkey": QKEY,
        "qp_access_flags": int(_ACCESS.get(QPType(qp_type), AccessFlag.LOCAL_WRITE)),
        "ah_port_num": port,
        "ah_sgid_index": gid_index,
        "path_mtu": mtu,
        "dest_qp_num": peer_qpn,
        "rq_psn": 0,
        "sq_psn": 0,
        "timeout": settings.timeout,
        "retry_cnt": settings.retry_cnt,
        "rnr_retry": settings.rnr_retry,
        "min_rnr_timer": settings.min_rnr_timer,
        "max_rd_atomic": settings.max_rd_atomic,
        "max_dest_rd_atomic": settings.max_rd_atomic,
        "en_sqd_async_notify": 0,
    }
