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

`iwarp` is an iWARP RNIC's table, built in models/iwarp_table.py: RC only, the RDMAC verbs'
states under the names Linux gives them.

The tables are built here (`linux_table`, `ibta_table`) and in models/iwarp_table.py
(`iwarp_table`); the variants themselves, each with its table and what else the model
asks of it, are models/variant.py's.
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
        self._entries = dict(entries)  # never changed after this: the answers below are kept
        self._moves: dict[tuple[QPType, QPState], tuple[QPState, ...]] = {}
        self._targets: dict[tuple[QPType, QPState], tuple[QPState, ...]] = {}
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
        moves = self._moves.get((qp_type, cur))
        if moves is None:
            found = {
                e.after
                for n in self.targets(qp_type, cur)
                if (e := self._entries[(qp_type, cur, n)]).after == n and e.rule.kind != MAY
            }
            moves = self._moves[(qp_type, cur)] = tuple(s for s in STATES if s in found)
        return list(moves)

    def lookup(self, qp_type: QPType, cur: QPState, nxt: QPState) -> Transition | None:
        """The entry for cur -> nxt, or None when the transition is invalid."""
        return self._entries.get((qp_type, cur, nxt))

    def admits(self, cur: QPState, nxt: QPState, qp_type: QPType, mask: Attr) -> bool:
        """drivers/infiniband/core/verbs.c ib_modify_qp_is_ok() over this table: CUR_STATE
        only from RTR, RTS, SQD or SQE, then a valid pair, every required bit, no bit
        outside required | optional | STATE (what gets past it reaches the driver's code)."""
        if Attr.CUR_STATE in mask and cur not in CUR_STATE_ALLOWED_FROM:
            return False
        entry = self.lookup(qp_type, cur, nxt)
        if entry is None:
            return False
        return mask & entry.required == entry.required and not int(mask) & ~int(entry.allowed)

    def targets(self, qp_type: QPType, cur: QPState) -> list[QPState]:
        """States reachable from cur by one modify, in ABI order."""
        targets = self._targets.get((qp_type, cur))
        if targets is None:
            targets = tuple(n for n in STATES if (qp_type, cur, n) in self._entries)
            self._targets[(qp_type, cur)] = targets
        return list(targets)

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


def mask_text(mask: Attr) -> str:
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
                f"{qp_type.name} {cur.name}->{nxt.name} requires {mask_text(required)}, "
                f"allows {mask_text(optional)}",
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
