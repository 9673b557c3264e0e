"""Verbs ABI enumerations with their numeric values.

Values are those of rdma-core's libibverbs/verbs.h (identical to the kernel's
IB_* enums in include/rdma/ib_verbs.h), so they can be passed to pyverbs as is.
"""

from enum import IntEnum, IntFlag
from functools import lru_cache


class QPState(IntEnum):
    """enum ibv_qp_state."""

    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    SQD = 4
    SQE = 5
    ERR = 6
    UNKNOWN = 7


#: The seven real states, in ABI order (UNKNOWN is a query artefact, not a state).
STATES: tuple[QPState, ...] = tuple(s for s in QPState if s != QPState.UNKNOWN)


class QPType(IntEnum):
    """enum ibv_qp_type: the user-visible QP types.

    XRC_SEND/XRC_RECV are the kernel's IB_QPT_XRC_INI/IB_QPT_XRC_TGT.
    """

    RC = 2
    UC = 3
    UD = 4
    RAW_PACKET = 8
    XRC_SEND = 9
    XRC_RECV = 10


class Attr(IntFlag):
    """enum ibv_qp_attr_mask (IBV_QP_<NAME>)."""

    STATE = 1 << 0
    CUR_STATE = 1 << 1
    EN_SQD_ASYNC_NOTIFY = 1 << 2
    ACCESS_FLAGS = 1 << 3
    PKEY_INDEX = 1 << 4
    PORT = 1 << 5
    QKEY = 1 << 6
    AV = 1 << 7
    PATH_MTU = 1 << 8
    TIMEOUT = 1 << 9
    RETRY_CNT = 1 << 10
    RNR_RETRY = 1 << 11
    RQ_PSN = 1 << 12
    MAX_QP_RD_ATOMIC = 1 << 13
    ALT_PATH = 1 << 14
    MIN_RNR_TIMER = 1 << 15
    SQ_PSN = 1 << 16
    MAX_DEST_RD_ATOMIC = 1 << 17
    PATH_MIG_STATE = 1 << 18
    CAP = 1 << 19
    DEST_QPN = 1 << 20
    RATE_LIMIT = 1 << 25

    def names(self) -> list[str]:
        """The single-bit names in this mask, sorted."""
        return list(_attr_names(self.value))


@lru_cache(maxsize=4096)  # every step logs its mask: the same few masks recur
def _attr_names(value: int) -> tuple[str, ...]:
    return tuple(sorted(bit.name for bit in Attr if bit.value & value and bit.name))


#: Bits the legacy modify_qp command accepts (kernel IB_QP_ATTR_STANDARD_BITS = GENMASK(20, 0)).
STANDARD_BITS = Attr((1 << 21) - 1)


class WCStatus(IntEnum):
    """enum ibv_wc_status."""

    SUCCESS = 0
    LOC_LEN_ERR = 1
    LOC_QP_OP_ERR = 2
    LOC_EEC_OP_ERR = 3
    LOC_PROT_ERR = 4
    WR_FLUSH_ERR = 5
    MW_BIND_ERR = 6
    BAD_RESP_ERR = 7
    LOC_ACCESS_ERR = 8
    REM_INV_REQ_ERR = 9
    REM_ACCESS_ERR = 10
    REM_OP_ERR = 11
    RETRY_EXC_ERR = 12
    RNR_RETRY_EXC_ERR = 13
    LOC_RDD_VIOL_ERR = 14
    REM_INV_RD_REQ_ERR = 15
    REM_ABORT_ERR = 16
    INV_EECN_ERR = 17
    INV_EEC_STATE_ERR = 18
    FATAL_ERR = 19
    RESP_TIMEOUT_ERR = 20
    GENERAL_ERR = 21
    TM_ERR = 22
    TM_RNDV_INCOMPLETE = 23


class WCOpcode(IntEnum):
    """enum ibv_wc_opcode (the values the model uses)."""

    SEND = 0
    RDMA_WRITE = 1
    RDMA_READ = 2
    COMP_SWAP = 3
    FETCH_ADD = 4
    BIND_MW = 5
    LOCAL_INV = 6
    TSO = 7
    RECV = 128
    RECV_RDMA_WITH_IMM = 129


class EventType(IntEnum):
    """enum ibv_event_type."""

    CQ_ERR = 0
    QP_FATAL = 1
    QP_REQ_ERR = 2
    QP_ACCESS_ERR = 3
    COMM_EST = 4
    SQ_DRAINED = 5
    PATH_MIG = 6
    PATH_MIG_ERR = 7
    DEVICE_FATAL = 8
    PORT_ACTIVE = 9
    PORT_ERR = 10
    LID_CHANGE = 11
    PKEY_CHANGE = 12
    SM_CHANGE = 13
    SRQ_ERR = 14
    SRQ_LIMIT_REACHED = 15
    QP_LAST_WQE_REACHED = 16
    CLIENT_REREGISTER = 17
    GID_CHANGE = 18
    WQ_FATAL = 19


#: The affiliated QP error events: each moves the QP to ERR (QPModel.async_error).
QP_ERROR_EVENTS = (EventType.QP_FATAL, EventType.QP_REQ_ERR, EventType.QP_ACCESS_ERR)


class AccessFlag(IntFlag):
    """enum ibv_access_flags: the bits meaningful for a QP's qp_access_flags."""

    LOCAL_WRITE = 1
    REMOTE_WRITE = 2
    REMOTE_READ = 4
    REMOTE_ATOMIC = 8


class MTU(IntEnum):
    """enum ibv_mtu."""

    MTU_256 = 1
    MTU_512 = 2
    MTU_1024 = 3
    MTU_2048 = 4
    MTU_4096 = 5
