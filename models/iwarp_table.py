"""The `iwarp` variant's transition table, as data.

`iwarp` is an iWARP RNIC's table (IWARP_TABLE): RC only, the RDMAC verbs' states
(IDLE, RTS, CLOSING, TERMINATE, ERROR) under the names Linux gives them (RESET, INIT
and RTR are all IDLE; SQD is CLOSING, SQE is TERMINATE), RTS reached only through the
iWARP connection manager, and query_qp reading IDLE back as INIT (see IWARP_REPORTED).
Its entries are "must" where siw, cxgb4 and irdma's iWARP path agree and "may" where
they differ; a "may" entry lets the driver refuse the modify, and `lands` says where an
accepted one leaves the QP when that is not the state asked for.

It lives apart from models/table.py (the `linux` and `ibta` tables and the
`TransitionTable` they share) because each entry cites three drivers at length.
"""

from dataclasses import dataclass

from models import rules
from models.enums import Attr, QPState, QPType
from models.sources import DRIVER, MAY, MUST, Rule, Source, iwarp_drivers
from models.table import Transition, TransitionTable, mask_text

S = QPState
T = QPType
A = Attr


def iwarp_invalid(cur: QPState, nxt: QPState) -> Source:
    """Why an iWARP RNIC refuses a pair: no iWARP driver accepts it."""
    return iwarp_drivers("no iWARP driver accepts it (see IWARP_TABLE in models/iwarp_table.py)")


_IDLE = (S.RESET, S.INIT, S.RTR)  # all three are the RDMAC verbs' Idle state
_NO_BITS = A(0)


@dataclass(frozen=True)
class _Iw:
    """One iwarp entry: how strong it is, what it does, where each driver says so."""

    kind: str
    what: str
    where: str
    optional: Attr = _NO_BITS
    stay: bool = False  # accepted, the QP stays where it was (the driver ignores the move)
    may_land: tuple[QPState, ...] = ()


_IDLE_MOVE = (
    "ib_qp_state_to_siw_qp_state[] (siw_verbs.c) maps RESET and INIT to SIW_QP_STATE_IDLE and "
    "siw_qp_nextstate_from_idle() (siw_qp.c) returns 0 without a move for IDLE and RTR; "
    "c4iw_convert_state() (cxgb4 iw_cxgb4.h) maps RESET and INIT to IDLE, c4iw_ib_modify_qp() "
    "(cxgb4 qp.c) drops IB_QP_STATE for RTR ('iwarp does not support the RTR state') and "
    "c4iw_modify_qp() does nothing for the same state; irdma_modify_qp() takes INIT and RTR to "
    "IRDMA_QP_STATE_IDLE (and RESET to its ERROR: an irdma difference); iwcm.c "
    "iwcm_init_qp_init_attr() asks for STATE|ACCESS_FLAGS at INIT and RTR"
)
_CLOSED_STAY = (
    "siw_qp_modify() (siw_qp.c) returns 0 without a move (siw_qp_nextstate_from_close() and "
    "_from_term() ignore it, ERROR has no case); c4iw_modify_qp() (cxgb4 qp.c) refuses a "
    "user QP's move out of CLOSING or TERMINATE and out of ERROR but to IDLE (-EINVAL), does "
    "nothing for the same state; irdma_modify_qp() refuses most (-EINVAL)"
)


def _iwarp_entries() -> dict[tuple[QPState, QPState], _Iw]:
    """IWARP_TABLE: (cur, next) -> entry for RC; IDLE -> RTS has none (see IWARP_INVALID)."""
    table: dict[tuple[QPState, QPState], _Iw] = {}
    for cur in _IDLE:
        for nxt in _IDLE:
            table[(cur, nxt)] = _Iw(
                MUST,
                "both are iWARP's IDLE: accepted, the QP stays idle and its WRs queued",
                _IDLE_MOVE,
                optional=A.ACCESS_FLAGS,
            )
        table[(cur, S.ERR)] = _Iw(
            MUST,
            "the QP enters ERROR; every outstanding WR completes with WR_FLUSH_ERR",
            "siw_qp_nextstate_from_idle() (siw_qp.c) case SIW_QP_STATE_ERROR: siw_rq_flush(); "
            "c4iw_modify_qp() (cxgb4 qp.c) IDLE->ERROR: flush_qp(); irdma_modify_qp(): "
            "IB_QPS_ERR -> IRDMA_QP_STATE_ERROR; RDMAC verbs: Idle -> Error by Modify QP",
        )
        table[(cur, S.SQD)] = _Iw(
            MAY,
            "iWARP's CLOSING closes a connection and an idle QP has none: refused "
            "(cxgb4) or accepted and ignored (siw, irdma); the QP stays idle",
            "siw_qp_nextstate_from_idle() (siw_qp.c): CLOSING falls to default, returns 0; "
            "irdma_modify_qp(): IB_QPS_SQD below RTS -> 0 without a change; c4iw_modify_qp() "
            "(cxgb4 qp.c): IDLE->CLOSING -> -EINVAL; iwcm.c iwcm_modify_qp_sqd(): 'This is "
            "really the RDMAC CLOSING state'",
            stay=True,
        )
        table[(cur, S.SQE)] = _Iw(
            MAY,
            "iWARP's TERMINATE sends an RDMAP Terminate message on a connection and an "
            "idle QP has none: refused (cxgb4) or accepted and ignored (siw); the QP stays idle",
            "siw_qp_nextstate_from_idle() (siw_qp.c): TERMINATE falls to default, returns 0; "
            "c4iw_modify_qp() (cxgb4 qp.c): IDLE->TERMINATE -> -EINVAL; irdma_modify_qp() asks "
            "its hardware; RFC 5040 Terminate message (siw_qp.c siw_send_terminate())",
            stay=True,
        )
    table[(S.RTS, S.RTS)] = _Iw(
        MAY,
        "nothing to change on a connection: accepted and ignored (siw, cxgb4) or refused (irdma)",
        "siw_qp_nextstate_from_rts() (siw_qp.c): default, returns 0; c4iw_modify_qp() (cxgb4 "
        "qp.c): same state -> 0; irdma_modify_qp(): IB_QPS_RTS in RTS -> -EINVAL",
        stay=True,
    )
    table[(S.RTS, S.SQD)] = _Iw(
        MUST,
        "iWARP's CLOSING: the connection is closed gracefully and the QP goes on to IDLE "
        "or ERR when the LLP close completes (siw: at once to ERR when a send is in "
        "progress); outstanding WRs complete with WR_FLUSH_ERR; no SQ drain, no SQ_DRAINED, "
        "no way back to RTS",
        "iwcm.c iwcm_modify_qp_sqd() ('This is really the RDMAC CLOSING state. It is most "
        "similar to the IB SQD QP state.') and iw_cm_disconnect() (graceful: SQD, abrupt: "
        "ERR); siw_qp_nextstate_from_rts() (siw_qp.c) case CLOSING, siw_qp_cm_drop(); "
        "c4iw_modify_qp() (cxgb4 qp.c) RTS->CLOSING, rdma_fini(), disconnect; "
        "irdma_modify_qp(): IB_QPS_SQD -> IRDMA_QP_STATE_CLOSING; RFC 5040 RDMAP stream "
        "teardown (graceful termination)",
        may_land=(S.ERR,),
    )
    table[(S.RTS, S.SQE)] = _Iw(
        MUST,
        "iWARP's TERMINATE: an RDMAP Terminate message is sent and the connection "
        "closed; outstanding WRs complete with WR_FLUSH_ERR; the QP goes on to ERR",
        "siw_qp_nextstate_from_rts() (siw_qp.c) case TERMINATE: siw_init_terminate(), "
        "connection dropped; c4iw_modify_qp() (cxgb4 qp.c) RTS->TERMINATE: post_terminate(), "
        "disconnect; irdma_modify_qp(): IB_QPS_SQE -> IRDMA_QP_STATE_TERMINATE; RFC 5040 "
        "Terminate message",
        may_land=(S.ERR,),
    )
    table[(S.RTS, S.ERR)] = _Iw(
        MUST,
        "abortive close (the LLP connection is reset); outstanding WRs complete with WR_FLUSH_ERR",
        "siw_qp_nextstate_from_rts() (siw_qp.c) case ERROR ('This is an emergency close'); "
        "c4iw_modify_qp() (cxgb4 qp.c) RTS->ERROR, abort; irdma_modify_qp(): reset_tcp_conn; "
        "iwcm.c iw_cm_disconnect(abrupt) -> iwcm_modify_qp_err(); RFC 5040 abortive "
        "termination",
    )
    for nxt in _IDLE:
        table[(S.RTS, nxt)] = _Iw(
            MAY,
            "the RDMAC verbs leave RTS only through CLOSING, TERMINATE or ERROR: refused "
            "(cxgb4, irdma) or accepted and ignored (siw); the QP stays in RTS",
            "siw_qp_nextstate_from_rts() (siw_qp.c): default, returns 0; c4iw_modify_qp() "
            "(cxgb4 qp.c): RTS->IDLE -> -EINVAL (RTR: IB_QP_STATE dropped, 0); "
            "irdma_modify_qp(): INIT/RTR above IDLE -> -EINVAL, RESET -> ERROR (an irdma "
            "difference)",
            stay=True,
        )
    table[(S.SQD, S.SQD)] = _Iw(
        MUST,
        "the close is already under way: accepted, nothing changes",
        "siw_qp_nextstate_from_close() (siw_qp.c): CLOSING -> break; c4iw_modify_qp() (cxgb4 "
        "qp.c): same state -> 0; irdma_modify_qp(): IB_QPS_SQD at CLOSING -> 0",
        stay=True,
    )
    for closing in (S.SQD, S.SQE):
        table[(closing, S.ERR)] = _Iw(
            MAY,
            "ends the close in ERROR: accepted (siw, irdma; what is left is flushed) or "
            "refused (cxgb4, for a user QP)",
            "siw_qp_nextstate_from_close() and _from_term() (siw_qp.c) case ERROR, flush; "
            "c4iw_modify_qp() (cxgb4 qp.c): a user QP cannot leave CLOSING or TERMINATE "
            "(-EINVAL; 'Allow kernel users to move to ERROR for qp draining'); "
            "irdma_modify_qp(): IB_QPS_ERR",
        )
    for nxt in (S.RESET, S.INIT):
        table[(S.SQD, nxt)] = _Iw(
            MAY,
            "ends the close in IDLE: accepted (siw) or refused (cxgb4, irdma)",
            "siw_qp_nextstate_from_close() (siw_qp.c) case IDLE; c4iw_modify_qp() (cxgb4 "
            "qp.c): CLOSING of a user QP -> -EINVAL; irdma_modify_qp(): INIT above IDLE -> "
            "-EINVAL, RESET -> ERROR",
        )
    for nxt in (S.RTR, S.RTS, S.SQE):
        table[(S.SQD, nxt)] = _Iw(
            MAY,
            "a closing QP does not reopen (no SQD->RTS resume as on InfiniBand): "
            "accepted and ignored (siw) or refused (cxgb4, irdma)",
            _CLOSED_STAY,
            stay=True,
            may_land=(S.SQE,) if nxt == S.SQE else (),
        )
    for nxt in (*_IDLE, S.RTS, S.SQD, S.SQE):
        table[(S.SQE, nxt)] = _Iw(
            MAY,
            "a terminating QP only goes on to ERR: accepted and ignored (siw, cxgb4 for "
            "the same state) or refused (cxgb4, irdma)",
            _CLOSED_STAY,
            stay=True,
        )
    table[(S.ERR, S.ERR)] = _Iw(
        MUST,
        "accepted, nothing changes",
        "siw_qp_modify() (siw_qp.c): no case for SIW_QP_STATE_ERROR, returns 0; "
        "c4iw_modify_qp() (cxgb4 qp.c): same state -> 0; irdma_modify_qp(): IB_QPS_ERR in "
        "ERROR -> 0 (flushes again)",
        stay=True,
    )
    table[(S.ERR, S.RESET)] = _Iw(
        MUST,
        "the QP returns to IDLE (queues already flushed), ready for a new connection",
        "c4iw_modify_qp() (cxgb4 qp.c): ERROR->IDLE with empty queues; irdma_modify_qp(): "
        "IB_QPS_RESET in ERROR -> 0, reports RESET; RDMAC verbs: Error -> Idle by Modify QP; "
        "the Linux ABI: RESET from any state (siw_qp_modify() has no case for ERROR and "
        "leaves it there: a siw difference, for its quirk profile)",
    )
    table[(S.ERR, S.INIT)] = _Iw(
        MAY,
        "back to IDLE (cxgb4), accepted without a move (siw) or refused (irdma)",
        "c4iw_convert_state() maps INIT to IDLE and c4iw_modify_qp() (cxgb4 qp.c) allows "
        "ERROR->IDLE; siw_qp_modify() (siw_qp.c): no case for ERROR, returns 0; "
        "irdma_modify_qp(): INIT above IDLE -> -EINVAL",
        may_land=(S.ERR,),
    )
    for nxt in (S.RTR, S.RTS, S.SQD, S.SQE):
        table[(S.ERR, nxt)] = _Iw(
            MAY,
            "accepted and ignored (siw; cxgb4 for RTR) or refused (cxgb4, irdma); the QP "
            "stays in ERR",
            _CLOSED_STAY,
            stay=True,
        )
    return table


IWARP_TABLE = _iwarp_entries()

#: What query_qp may name each state: IDLE reads INIT on siw (6.12) and cxgb4, the IB state
#: asked for on irdma; a close ends in IDLE (INIT) or ERROR on its own.
IWARP_REPORTED: dict[QPState, frozenset[QPState]] = {
    S.RESET: frozenset({S.RESET, S.INIT}),
    S.RTR: frozenset({S.RTR, S.INIT}),
    S.SQD: frozenset({S.SQD, S.INIT, S.ERR}),
    S.SQE: frozenset({S.SQE, S.ERR}),
}


def _rts_needs_connection(cur: QPState) -> Rule:
    return Rule(
        f"iwarp.transition.invalid.{cur.name}->RTS",
        f"{cur.name}->RTS by modify_qp is refused (EINVAL): an iWARP QP enters RTS only "
        "through the iWARP connection manager (an LLP stream and MPA negotiation, through "
        "rdma_cm), never by a plain modify",
        iwarp_drivers(
            "siw_qp_nextstate_from_idle() (siw_qp.c): RTS without SIW_QP_ATTR_LLP_HANDLE or "
            "SIW_QP_ATTR_MPA -> -EINVAL (set only by siw_cm.c: siw_accept(), the MPA reply); "
            "c4iw_modify_qp() (cxgb4 qp.c): IDLE->RTS without C4IW_QP_ATTR_LLP_STREAM_HANDLE "
            "-> -EINVAL; irdma_modify_qp(): IB_QPS_RTS without cm_id -> -EINVAL; iwcm.c "
            "iwcm_init_qp_rts_attr() gives the consumer an empty mask; RFC 5044 connection "
            "setup: MPA Request/Reply frames before any DDP segment"
        ),
        kind=MUST,
        layer=DRIVER,
    )


#: IDLE -> RTS: no entry, and its own reason.
IWARP_INVALID: dict[tuple[QPState, QPState], Rule] = {
    (cur, S.RTS): _rts_needs_connection(cur) for cur in _IDLE
}


def iwarp_table() -> TransitionTable:
    """The `iwarp` variant's table: IWARP_TABLE for RC, IWARP_REPORTED, IWARP_INVALID."""
    entries = {}
    for (cur, nxt), e in IWARP_TABLE.items():
        rule = Rule(
            f"iwarp.transition.RC.{cur.name}->{nxt.name}",
            f"RC {cur.name}->{nxt.name}: {e.what}; requires nothing, allows "
            f"{mask_text(e.optional)}",
            iwarp_drivers(e.where),
            kind=e.kind,
            layer=DRIVER,
        )
        entries[(T.RC, cur, nxt)] = Transition(
            T.RC,
            cur,
            nxt,
            A(0),
            e.optional,
            rule,
            lands=cur if e.stay else None,
            may_land=frozenset(e.may_land),
        )
    naming = dict.fromkeys((S.RESET, S.RTR), rules.IWARP_IDLE_REPORTED)
    return TransitionTable(
        "iwarp", entries, frozenset({T.RC}), IWARP_REPORTED, IWARP_INVALID, naming, iwarp_invalid
    )
