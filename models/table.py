"""The QP state transition table as data, in three named variants.

`linux` is the Linux core's transition table (`qp_state_table` in
drivers/infiniband/core/verbs.c), transcribed entry by entry for the six
user-visible QP types. The core does not enforce it: `_ib_modify_qp()` never
calls `ib_modify_qp_is_ok()`; each driver's modify_qp calls that helper or not.
rxe, mlx4, mlx5, bnxt_re, hns, efa, rdmavt (hfi1, qib) and irdma's RoCE path call
it; siw, cxgb4 and irdma's iWARP path never do, so on those nothing holds a modify
to the table but the driver's own checks. Drivers that call it differ in what they
pass: bnxt_re uses its own state and ignores cur_qp_state; bnxt_re, irdma and rxe
(since 6.4) call it only when IB_QP_STATE is in the mask, so an attribute-only
modify is not table-checked there. The table's rules therefore have layer
"driver": a device that differs has a driver that skips or bends the helper.

`ibta` is the specification's table: the same entries plus the transitions the
spec allows and Linux does not (see IBTA_EXTRA), which no Linux layer enforces.

`iwarp` is an iWARP RNIC's table (IWARP_TABLE): RC only, the RDMAC verbs' states
(IDLE, RTS, CLOSING, TERMINATE, ERROR) under the names Linux gives them (RESET, INIT
and RTR are all IDLE; SQD is CLOSING, SQE is TERMINATE), RTS reached only through the
iWARP connection manager, and query_qp reading IDLE back as INIT (see IWARP_REPORTED).
Its entries are "must" where siw, cxgb4 and irdma's iWARP path agree and "may" where
they differ; a "may" entry lets the driver refuse the modify, and `lands` says where an
accepted one leaves the QP when that is not the state asked for.

The tables are built here (`linux_table`, `ibta_table`, `iwarp_table`); the variants
themselves, each with its table and what else the model asks of it, are models/variant.py's.
"""

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from models import rules
from models.enums import STATES, Attr, QPState, QPType
from models.sources import (
    DRIVER,
    MAY,
    MUST,
    OPTIONAL,
    SPEC,
    Rule,
    Source,
    ibta,
    iwarp_drivers,
    kernel_table,
)

S = QPState
T = QPType
A = Attr

# Shorthands that mirror the kernel's table so the transcription can be checked by eye.
_PKEY, _PORT, _QKEY, _ACC = A.PKEY_INDEX, A.PORT, A.QKEY, A.ACCESS_FLAGS
_AV, _MTU, _DQPN, _RQ_PSN, _SQ_PSN = A.AV, A.PATH_MTU, A.DEST_QPN, A.RQ_PSN, A.SQ_PSN
_RD, _DRD, _MINRNR = A.MAX_QP_RD_ATOMIC, A.MAX_DEST_RD_ATOMIC, A.MIN_RNR_TIMER
_TMO, _RETRY, _RNR = A.TIMEOUT, A.RETRY_CNT, A.RNR_RETRY
_ALT, _MIG, _CUR = A.ALT_PATH, A.PATH_MIG_STATE, A.CUR_STATE
_NOTIFY, _RL = A.EN_SQD_ASYNC_NOTIFY, A.RATE_LIMIT

_CONNECTED = (T.RC, T.UC, T.XRC_SEND, T.XRC_RECV)


def _same(mask: Attr, *types: QPType) -> dict[QPType, Attr]:
    return dict.fromkeys(types, mask)


# (cur, next) -> (required per type, optional per type); an absent pair is invalid.
# Transcribed from qp_state_table[][] in drivers/infiniband/core/verbs.c
# (SMI and GSI rows omitted: they are kernel-only QP types). Only drivers that call
# ib_modify_qp_is_ok() are held to it (see the module docstring).
LINUX_TABLE: dict[tuple[QPState, QPState], tuple[dict[QPType, Attr], dict[QPType, Attr]]] = {
    (S.RESET, S.RESET): ({}, {}),
    (S.RESET, S.INIT): (
        {
            T.UD: _PKEY | _PORT | _QKEY,
            T.RAW_PACKET: _PORT,
            **_same(_PKEY | _PORT | _ACC, *_CONNECTED),
        },
        {},
    ),
    (S.INIT, S.RESET): ({}, {}),
    (S.INIT, S.ERR): ({}, {}),
    (S.INIT, S.INIT): (
        {},
        {T.UD: _PKEY | _PORT | _QKEY, **_same(_PKEY | _PORT | _ACC, *_CONNECTED)},
    ),
    (S.INIT, S.RTR): (
        {
            **_same(_AV | _MTU | _DQPN | _RQ_PSN, T.UC, T.XRC_SEND),
            **_same(_AV | _MTU | _DQPN | _RQ_PSN | _DRD | _MINRNR, T.RC, T.XRC_RECV),
        },
        {T.UD: _PKEY | _QKEY, **_same(_ALT | _ACC | _PKEY, *_CONNECTED)},
    ),
    (S.RTR, S.RESET): ({}, {}),
    (S.RTR, S.ERR): ({}, {}),
    (S.RTR, S.RTS): (
        {
            **_same(_SQ_PSN, T.UD, T.UC),
            **_same(_TMO | _RETRY | _RNR | _SQ_PSN | _RD, T.RC, T.XRC_SEND),
            T.XRC_RECV: _TMO | _SQ_PSN,
        },
        {
            T.UD: _CUR | _QKEY,
            **_same(_CUR | _ALT | _ACC | _MIG, T.UC, T.XRC_SEND),
            **_same(_CUR | _ALT | _ACC | _MINRNR | _MIG, T.RC, T.XRC_RECV),
            T.RAW_PACKET: _RL,
        },
    ),
    (S.RTS, S.RESET): ({}, {}),
    (S.RTS, S.ERR): ({}, {}),
    (S.RTS, S.RTS): (
        {},
        {
            T.UD: _CUR | _QKEY,
            **_same(_CUR | _ACC | _ALT | _MIG, T.UC, T.XRC_SEND),
            **_same(_CUR | _ACC | _ALT | _MIG | _MINRNR, T.RC, T.XRC_RECV),
            T.RAW_PACKET: _RL,
        },
    ),
    (S.RTS, S.SQD): ({}, _same(_NOTIFY, T.UD, *_CONNECTED)),
    (S.SQD, S.RESET): ({}, {}),
    (S.SQD, S.ERR): ({}, {}),
    (S.SQD, S.RTS): (
        {},
        {
            T.UD: _CUR | _QKEY,
            **_same(_CUR | _ALT | _ACC | _MIG, T.UC, T.XRC_SEND),
            **_same(_CUR | _ALT | _ACC | _MINRNR | _MIG, T.RC, T.XRC_RECV),
        },
    ),
    (S.SQD, S.SQD): (
        {},
        {
            T.UD: _PKEY | _QKEY,
            T.UC: _AV | _ALT | _ACC | _PKEY | _MIG,
            T.RC: _PORT
            | _AV
            | _TMO
            | _RETRY
            | _RNR
            | _RD
            | _DRD
            | _ALT
            | _ACC
            | _PKEY
            | _MINRNR
            | _MIG,
            T.XRC_SEND: _PORT | _AV | _TMO | _RETRY | _RNR | _RD | _ALT | _ACC | _PKEY | _MIG,
            T.XRC_RECV: _PORT | _AV | _TMO | _DRD | _ALT | _ACC | _PKEY | _MINRNR | _MIG,
        },
    ),
    (S.SQE, S.RESET): ({}, {}),
    (S.SQE, S.ERR): ({}, {}),
    (S.SQE, S.RTS): ({}, {T.UD: _CUR | _QKEY, T.UC: _CUR | _ACC}),
    (S.ERR, S.RESET): ({}, {}),
    (S.ERR, S.ERR): ({}, {}),
}

#: Transitions the IBTA allows that the Linux table refuses, with their source.
IBTA_EXTRA: dict[tuple[QPState, QPState], Source] = {
    (S.RESET, S.ERR): ibta(
        "ch. 10.3.1 QP state transitions (state diagram) and 11.2.5.2 Modify QP",
        "A QP in any state may be transitioned to the Error state by Modify QP.",
    ),
}

#: CUR_STATE may be given only when the current state is one of these
#: (first test in ib_modify_qp_is_ok(), for the drivers that call it).
CUR_STATE_ALLOWED_FROM = frozenset({S.RTR, S.RTS, S.SQD, S.SQE})

#: States and QP types that are optional features: a device may lack them.
OPTIONAL_STATES = frozenset({S.SQD, S.SQE})
OPTIONAL_TYPES = frozenset({T.RAW_PACKET, T.XRC_SEND, T.XRC_RECV})


def entry_kind(qp_type: QPType, cur: QPState, nxt: QPState) -> str:
    """"optional" for an entry of an optional state or QP type, else "must"."""
    if qp_type in OPTIONAL_TYPES or cur in OPTIONAL_STATES or nxt in OPTIONAL_STATES:
        return OPTIONAL
    return MUST


@dataclass(frozen=True)
class Transition:
    """One valid table entry for one QP type."""

    qp_type: QPType
    cur: QPState
    nxt: QPState
    required: Attr
    optional: Attr
    rule: Rule
    #: Where an accepted modify leaves the QP when not in nxt (iwarp: a move the driver
    #: accepts and ignores leaves it where it was); None: nxt.
    lands: QPState | None = None
    #: Other states an accepted modify may leave the QP in (a "may" entry: drivers differ).
    may_land: frozenset[QPState] = frozenset()

    @property
    def allowed(self) -> Attr:
        """Every bit the mask may hold for this entry (STATE included)."""
        return self.required | self.optional | A.STATE

    @property
    def after(self) -> QPState:
        """The state an accepted modify leaves the QP in."""
        return self.nxt if self.lands is None else self.lands


def kernel_invalid(cur: QPState, nxt: QPState) -> Source:
    """Why the Linux table refuses a pair: qp_state_table has no entry for it."""
    return kernel_table(cur.name, nxt.name)


def spec_invalid(cur: QPState, nxt: QPState) -> Source:
    """Why the IBTA refuses a pair: the spec defines only the transitions it shows."""
    return ibta("ch. 10.3.1 QP state transitions", "Only the transitions shown are defined.")


def iwarp_invalid(cur: QPState, nxt: QPState) -> Source:
    """Why an iWARP RNIC refuses a pair: no iWARP driver accepts it."""
    return iwarp_drivers("no iWARP driver accepts it (see IWARP_TABLE in models/table.py)")


class TransitionTable:
    """One variant's transition table, queried per QP type and state pair.

    `name` prefixes its rule ids; `qp_types` are the types the variant knows (iwarp: RC);
    `reports` maps a state to the states query_qp may name for it (absent: the state
    itself); `invalid` holds the rule of a pair that has its own reason to be refused
    (iwarp: RTS needs a connection); `invalid_source` says where any other missing pair
    is refused (the kernel's table, the spec, the iWARP drivers).
    """

    def __init__(
        self,
        name: str,
        entries: dict[tuple[QPType, QPState, QPState], Transition],
        qp_types: frozenset[QPType] = frozenset(QPType),
        reports: Mapping[QPState, frozenset[QPState]] | None = None,
        invalid: Mapping[tuple[QPState, QPState], Rule] | None = None,
        naming: Mapping[QPState, Rule] | None = None,
        invalid_source: Callable[[QPState, QPState], Source] = kernel_invalid,
    ):
        self.name = name
        self._entries = entries
        self.qp_types = qp_types
        self._reports = dict(reports or {})
        self._invalid = dict(invalid or {})
        self._naming = dict(naming or {})
        self._invalid_source = invalid_source

    def reported(self, state: QPState) -> frozenset[QPState]:
        """The states query_qp may report for a QP in `state` (usually just `state`)."""
        return self._reports.get(state, frozenset({state}))

    def naming_rule(self, state: QPState) -> Rule | None:
        """The "may" rule that lets query_qp name `state` in more than one way (None: one
        name, or other names only because the device moved on by itself)."""
        return self._naming.get(state)

    def moves_to(self, qp_type: QPType, cur: QPState) -> list[QPState]:
        """States one accepted modify from cur certainly leaves the QP in, in ABI order (a
        walk along these gets where it is going: no entry a driver may ignore or refuse)."""
        found = {
            e.after
            for n in self.targets(qp_type, cur)
            if (e := self._entries[(qp_type, cur, n)]).after == n and e.rule.kind != MAY
        }
        return [s for s in STATES if s in found]

    def lookup(self, qp_type: QPType, cur: QPState, nxt: QPState) -> Transition | None:
        """The entry for cur -> nxt, or None when the transition is invalid."""
        return self._entries.get((qp_type, cur, nxt))

    def targets(self, qp_type: QPType, cur: QPState) -> list[QPState]:
        """States reachable from cur by one modify, in ABI order."""
        return [n for n in STATES if (qp_type, cur, n) in self._entries]

    def __iter__(self) -> Iterator[Transition]:
        return iter(self._entries.values())

    def invalid_rule(self, cur: QPState, nxt: QPState, qp_type: QPType | None = None) -> Rule:
        """The rule that refuses a pair missing from the table."""
        if qp_type is not None and qp_type not in self.qp_types:
            return rules.IWARP_RC_ONLY
        if (cur, nxt) in self._invalid:
            return self._invalid[(cur, nxt)]
        return Rule(
            f"{self.name}.transition.invalid.{cur.name}->{nxt.name}",
            f"{cur.name}->{nxt.name} is not a valid transition",
            self._invalid_source(cur, nxt),
            kind=MUST,
            layer=DRIVER,
        )

    def to_json(self) -> dict[str, dict[str, dict[str, dict[str, list[str]]]]]:
        """{qp_type: {cur: {next: {"required": [...], "optional": [...]}}}}, valid pairs only."""
        out: dict[str, dict[str, dict[str, dict[str, list[str]]]]] = {}
        for qp_type in QPType:
            per_type = out.setdefault(qp_type.name, {})
            for cur in STATES:
                for nxt in self.targets(qp_type, cur):
                    t = self._entries[(qp_type, cur, nxt)]
                    per_type.setdefault(cur.name, {})[nxt.name] = {
                        "required": t.required.names(),
                        "optional": t.optional.names(),
                    }
        return out


def _mask_text(mask: Attr) -> str:
    return "|".join(mask.names()) or "nothing"


def _build(
    name: str,
    extra: Mapping[tuple[QPState, QPState], Source],
    invalid_source: Callable[[QPState, QPState], Source],
) -> TransitionTable:
    """LINUX_TABLE plus `extra` (pairs only the spec has), its rules named after `name`."""
    pairs: dict[tuple[QPState, QPState], tuple[dict, dict, Source, str]] = {
        pair: (req, opt, kernel_table(pair[0].name, pair[1].name), DRIVER)
        for pair, (req, opt) in LINUX_TABLE.items()
    }
    for pair, src in extra.items():
        pairs[pair] = ({}, {}, src, SPEC)  # Linux refuses these: only the spec has them
    entries = {}
    for (cur, nxt), (req, opt, src, layer) in pairs.items():
        for qp_type in QPType:
            required, optional = req.get(qp_type, A(0)), opt.get(qp_type, A(0))
            rule = Rule(
                f"{name}.transition.{qp_type.name}.{cur.name}->{nxt.name}",
                f"{qp_type.name} {cur.name}->{nxt.name} requires {_mask_text(required)}, "
                f"allows {_mask_text(optional)}",
                src,
                kind=entry_kind(qp_type, cur, nxt),
                layer=layer,
            )
            entries[(qp_type, cur, nxt)] = Transition(qp_type, cur, nxt, required, optional, rule)
    return TransitionTable(name, entries, invalid_source=invalid_source)


def linux_table() -> TransitionTable:
    """The `linux` variant's table: LINUX_TABLE, refusals cited from the kernel's table."""
    return _build("linux", {}, kernel_invalid)


def ibta_table() -> TransitionTable:
    """The `ibta` variant's table: LINUX_TABLE plus IBTA_EXTRA, refusals cited from the spec."""
    return _build("ibta", IBTA_EXTRA, spec_invalid)


# ------------------------------------------------------------------------------- iWARP
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
            f"{_mask_text(e.optional)}",
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
