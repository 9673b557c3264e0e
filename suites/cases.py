"""Deterministic conformance cases, generated from the reference model alone.

No pyverbs and no device here: the cases are data, so the host self-tests can
check that they say what the model says. Values that depend on the device's
limits are symbolic (`Bound`) and resolved against `DeviceCaps` at run time,
which keeps test ids stable from one device to the next.

One `Group` is one pytest test; its `cases` each run on a fresh QP, so the
extra-bit and wrong-CUR_STATE variants of a pair cost one test, not dozens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from models.attributes import DeviceCaps
from models.enums import MTU, STATES, Attr, QPState, QPType
from models.reach import reachable_states
from models.table import Transition, TransitionTable
from models.variant import LINUX, Variant
from models.variant import variant as parse_variant
from suites.boundaries import BOUNDARIES, UNKNOWN_MASK_BITS, Bound, boundary_pair

S = QPState

ALL_QP_TYPES: tuple[QPType, ...] = tuple(QPType)

SQE_SKIP = "SQE is entered only by a send error: covered by the error-handling suite"
POST_SEND_SKIP = "post_send in {state} needs a peer: covered by the traffic suite"
UNKNOWN_TYPE_SKIP = "the {variant} variant has no {qp_type} QPs ({why})"

#: The forward path bring-up follows; SQD hangs off RTS.
FORWARD_PATH: tuple[QPState, ...] = (S.RESET, S.INIT, S.RTR, S.RTS, S.SQD)

#: Every defined mask bit that can be the "one bit too many" of an extra-bit case.
#: STATE is always present; CUR_STATE has its own cases (it needs a cur_qp_state value).
EXTRA_CANDIDATES: tuple[Attr, ...] = tuple(
    bit for bit in Attr if bit not in (Attr.STATE, Attr.CUR_STATE)
)


@dataclass(frozen=True)
class Case:
    """One modify (or post) to run on a fresh QP brought to `cur`."""

    id: str
    qp_type: QPType
    cur: QPState
    nxt: QPState
    kind: str
    mask: Attr
    attrs: tuple[tuple[str, int | Bound], ...] = ()
    bit: Attr | None = None
    in_range: bool | None = None  # attribute cases: is the value inside the IBTA range?

    def overrides(self, caps: DeviceCaps) -> dict[str, int]:
        """Attribute values of this case with device bounds resolved (ValueError if unfit)."""
        return {name: resolve(name, v, caps) for name, v in self.attrs}

    def unfit_reason(self, caps: DeviceCaps) -> str | None:
        """Why this case cannot be expressed on a device with these caps (None: it can)."""
        for name, v in self.attrs:
            try:
                resolve(name, v, caps)
            except ValueError as exc:
                return str(exc)
        return None


@dataclass(frozen=True)
class Group:
    """One pytest test: one or more cases of one feature, one QP type, one state pair."""

    id: str
    feature: str  # "transitions" | "attributes" | "post rules"
    qp_type: QPType
    cur: QPState
    nxt: QPState | None
    cases: tuple[Case, ...]
    skip: str | None = None

    @property
    def transition(self) -> str:
        """Report label: "RTR->RTS", or the state alone for post cases."""
        return f"{self.cur.name}->{self.nxt.name}" if self.nxt is not None else self.cur.name


# --------------------------------------------------------------------------- bounds
#: C width of each attribute as pyverbs stores it (struct ibv_qp_attr / ibv_ah_attr).
FIELD_BITS: dict[str, int] = {
    "qp_state": 32,
    "cur_qp_state": 32,
    "path_mtu": 32,
    "qkey": 32,
    "rq_psn": 32,
    "sq_psn": 32,
    "dest_qp_num": 32,
    "qp_access_flags": 32,
    "pkey_index": 16,
    "port_num": 8,
    "ah_port_num": 8,
    "alt_port_num": 8,
    "alt_ah_port_num": 8,
    "ah_sgid_index": 8,
    "timeout": 8,
    "retry_cnt": 8,
    "rnr_retry": 8,
    "min_rnr_timer": 8,
    "max_rd_atomic": 8,
    "max_dest_rd_atomic": 8,
    "en_sqd_async_notify": 8,
}


def resolve(name: str, value: int | Bound, caps: DeviceCaps) -> int:
    """The concrete value for a device; ValueError when the C field cannot hold it."""
    if isinstance(value, Bound):
        concrete = int(getattr(caps, value.cap)) + value.offset
        label = f"{value}={concrete}"
    else:
        concrete, label = value, str(value)
    bits = FIELD_BITS.get(name, 32)
    if not 0 <= concrete < (1 << bits):
        raise ValueError(f"{name} {label} does not fit the uint{bits} C field")
    if name == "path_mtu" and isinstance(value, Bound) and concrete > MTU.MTU_4096:
        raise ValueError(
            f"path_mtu {label}: max_mtu is already 4096, no ibv_mtu above it "
            "(path_mtu 6 covers that range)"
        )
    return concrete


# ------------------------------------------------------------------------- helpers
def _pair_id(qp_type: QPType, cur: QPState, nxt: QPState) -> str:
    return f"{qp_type.name}-{cur.name}-{nxt.name}"


def _bit_name(bit: Attr) -> str:
    return bit.name or str(int(bit))


def _types(qp_types: Iterable[QPType] | None) -> tuple[QPType, ...]:
    return ALL_QP_TYPES if qp_types is None else tuple(QPType(t) for t in qp_types)


def _unknown_type(table: TransitionTable, qp_type: QPType, feature: str) -> Group | None:
    """One reported skip for a QP type the variant does not have (iwarp: all but RC)."""
    if qp_type in table.qp_types:
        return None
    why = table.invalid_rule(S.RESET, S.INIT, qp_type).summary
    reason = UNKNOWN_TYPE_SKIP.format(variant=table.name, qp_type=qp_type.name, why=why)
    gid = f"{qp_type.name}-not-in-{table.name}"
    return Group(gid, feature, qp_type, S.RESET, None, (), reason)


# --------------------------------------------------------------------- transitions
def transition_groups(
    variant: Variant | str = LINUX, qp_types: Iterable[QPType] | None = None
) -> list[Group]:
    """Every transition test for every (cur, next) pair of the 7x7 states, per QP type."""
    table = parse_variant(variant).table

    def of_type(qp_type: QPType, reachable: frozenset[QPState]) -> list[Group]:
        return [g for cur in STATES for nxt in STATES
                for g in _pair_groups(table, qp_type, cur, nxt, reachable)]

    return _per_type(table, qp_types, "transitions", of_type)


def _per_type(
    table: TransitionTable,
    qp_types: Iterable[QPType] | None,
    label: str,
    of_type: Callable[[QPType, frozenset[QPState]], list[Group]],
) -> list[Group]:
    """`of_type(qp_type, reachable states)` for each QP type the table knows; a type it does
    not know gets its one unknown-type group."""
    groups: list[Group] = []
    for qp_type in _types(qp_types):
        unknown = _unknown_type(table, qp_type, label)
        if unknown is not None:
            groups.append(unknown)
            continue
        groups.extend(of_type(qp_type, frozenset(reachable_states(table, qp_type))))
    return groups


def _pair_groups(
    table: TransitionTable,
    qp_type: QPType,
    cur: QPState,
    nxt: QPState,
    reachable: frozenset[QPState],
) -> list[Group]:
    pid = _pair_id(qp_type, cur, nxt)

    def group(suffix: str, cases: list[Case], skip: str | None = None) -> Group:
        return Group(f"{pid}-{suffix}", "transitions", qp_type, cur, nxt, tuple(cases), skip)

    def case(kind: str, mask: Attr, **kw: object) -> Case:
        suffix = kw.pop("suffix", kind)
        return Case(f"{pid}-{suffix}", qp_type, cur, nxt, kind, mask, **kw)  # type: ignore[arg-type]

    if cur not in reachable:
        reason = SQE_SKIP if cur == S.SQE else f"{cur.name} is not reachable by modify_qp"
        return [group("all", [], reason)]

    entry = table.lookup(qp_type, cur, nxt)
    attr_only = _attribute_only(table, qp_type, cur, case) if cur == nxt else []
    legal_only = _legal_attribute_only(entry, case) if cur == nxt else []
    if entry is None:
        return [group("invalid", [case("invalid", Attr.STATE)])] + [
            group("attr-only", attr_only)
        ] * bool(attr_only)

    exact = Attr.STATE | entry.required
    out = [group("exact", [case("exact", exact)])]
    for bit in entry.required:
        out.append(
            group(
                f"missing-{_bit_name(bit)}",
                [case("missing", exact & ~bit, bit=bit, suffix=f"missing-{_bit_name(bit)}")],
            )
        )
    extras = [
        case("extra", exact | bit, bit=bit, suffix=f"extra-{_bit_name(bit)}")
        for bit in EXTRA_CANDIDATES
        if not bit & entry.allowed
    ]
    if extras:
        out.append(group("extra-bits", extras))
    out.append(
        group(
            "cur-right",
            [case("cur-right", exact | Attr.CUR_STATE, attrs=(("cur_qp_state", int(cur)),))],
        )
    )
    wrong = []
    for assumed in STATES:
        if assumed == cur:
            continue
        assumed_entry = table.lookup(qp_type, assumed, nxt)
        mask = exact | Attr.CUR_STATE
        if assumed_entry is not None:
            mask |= assumed_entry.required  # make the lie plausible: the assumed pair's bits
        wrong.append(
            case(
                "cur-wrong",
                mask,
                attrs=(("cur_qp_state", int(assumed)),),
                suffix=f"cur-wrong-{assumed.name}",
            )
        )
    out.append(group("cur-wrong", wrong))
    if attr_only:
        out.append(group("attr-only", attr_only))
    if legal_only:
        out.append(group("attr-only-ok", legal_only))
    return out


def _attribute_only(
    table: TransitionTable, qp_type: QPType, cur: QPState, case: Callable[..., Case]
) -> list[Case]:
    """Modifies without STATE from `cur`: checked against cur->cur like any modify (Linux:
    ib_modify_qp_is_ok(cur, cur, ...)). Every bit the cur->cur entry does not allow, one
    at a time; a driver that checks the table only under IB_QP_STATE accepts them."""
    entry = table.lookup(qp_type, cur, cur)
    allowed = Attr(0) if entry is None else entry.allowed
    return [
        case("attr-only", bit, bit=bit, suffix=f"attr-only-{_bit_name(bit)}")
        for bit in EXTRA_CANDIDATES
        if not bit & allowed and bit not in (Attr.CAP, Attr.RATE_LIMIT)
    ]


#: The bits a legal modify without STATE sets, in order of preference (what every type's
#: cur->cur entry allows somewhere; ALT_PATH and PATH_MIG_STATE are optional features).
_LEGAL_ALONE = (Attr.ACCESS_FLAGS, Attr.QKEY, Attr.PKEY_INDEX, Attr.MIN_RNR_TIMER)


def _legal_attribute_only(entry: Transition | None, case: Callable[..., Case]) -> list[Case]:
    """One legal modify without STATE from `cur` (cur->cur allows its bit), accepted with
    the state unchanged. Its qp_state lies outside the mask: a driver that table-checks it
    as cur -> attr.qp_state refuses it (linux.modify.outside_mask_ignored)."""
    bits = [b for b in _LEGAL_ALONE if entry is not None and b & entry.optional]
    return [case("attr-only", bits[0], bit=bits[0], suffix=f"attr-only-ok-{_bit_name(bits[0])}")
            ] if bits else []


# ---------------------------------------------------------------------- attributes
def _value_label(value: int | Bound) -> str:
    if isinstance(value, Bound):
        return str(value)
    return hex(value) if value >= 1 << 16 else str(value)


def attribute_groups(
    variant: Variant | str = LINUX, qp_types: Iterable[QPType] | None = None
) -> list[Group]:
    """Boundary values of every value rule, each at the transition that takes the attribute."""
    var = parse_variant(variant)
    table = var.table
    groups: list[Group] = []
    for qp_type in _types(qp_types):
        unknown = _unknown_type(table, qp_type, "attributes")
        if unknown is not None:
            groups.append(unknown)
            continue
        for b in BOUNDARIES:
            if not b.applies(var):
                continue
            pair = b.pairs[0] if b.pairs else boundary_pair(table, qp_type, b.bit)
            if pair is None:
                continue  # the type never takes this attribute
            cur, nxt = pair
            entry = table.lookup(qp_type, cur, nxt)
            assert entry is not None
            mask = Attr.STATE | entry.required | b.bit
            for value, in_range in b.values:
                cid = f"{_pair_id(qp_type, cur, nxt)}-{b.field}-{_value_label(value)}"
                case = Case(
                    cid, qp_type, cur, nxt, "boundary", mask, ((b.field, value),), b.bit, in_range
                )
                groups.append(Group(cid, "attributes", qp_type, cur, nxt, (case,)))
        entry = table.lookup(qp_type, S.RESET, S.INIT)
        assert entry is not None
        for raw in UNKNOWN_MASK_BITS:
            cid = f"{_pair_id(qp_type, S.RESET, S.INIT)}-mask-bit{raw.bit_length() - 1}"
            mask = Attr(int(Attr.STATE | entry.required) | raw)
            case = Case(cid, qp_type, S.RESET, S.INIT, "unknown-bit", mask, (), Attr(raw), False)
            groups.append(Group(cid, "attributes", qp_type, S.RESET, S.INIT, (case,)))
    return groups


# ---------------------------------------------------------------------------- posts
POST_STATES: tuple[QPState, ...] = (S.RESET, S.INIT, S.RTR, S.RTS, S.SQD, S.SQE, S.ERR)


def post_groups(
    variant: Variant | str = LINUX, qp_types: Iterable[QPType] | None = None
) -> list[Group]:
    """post_send / post_recv in each state, and what must become of the WR afterwards."""
    table = parse_variant(variant).table

    def of_type(qp_type: QPType, reachable: frozenset[QPState]) -> list[Group]:
        groups: list[Group] = []
        for state in POST_STATES:
            for verb in ("post_recv", "post_send"):
                cid = f"{qp_type.name}-{state.name}-{verb}"
                skip = None
                if state == S.SQE:
                    skip = SQE_SKIP
                elif state not in reachable:
                    skip = f"{state.name} is not reachable by modify_qp"
                elif verb == "post_send" and state in (S.RTS, S.SQD):
                    skip = POST_SEND_SKIP.format(state=state.name)
                case = Case(cid, qp_type, state, state, verb, Attr(0))
                groups.append(Group(cid, "post rules", qp_type, state, None, (case,), skip))
        return groups

    return _per_type(table, qp_types, "post rules", of_type)


#: The states where a QP has no connection yet (iWARP: IDLE) and a send may be held.
IDLE_STATES: tuple[QPState, ...] = (S.RESET, S.INIT, S.RTR)


def sends_then_err_groups(
    variant: Variant | str = LINUX, qp_types: Iterable[QPType] | None = None
) -> list[Group]:
    """Two post_sends on a fresh QP in RESET, INIT or RTR (where reachable), then to ERR.

    The second send matters: a provider that refuses the first send and keeps its WQE may
    accept the next (libsiw), and whatever was accepted is then owed its flush (or, where
    the variant refuses both, nothing may complete). One case per group, on a fresh QP.
    """
    table = parse_variant(variant).table

    def of_type(qp_type: QPType, reachable: frozenset[QPState]) -> list[Group]:
        groups: list[Group] = []
        for state in (s for s in IDLE_STATES if s in reachable):
            cid = f"{qp_type.name}-{state.name}-post_send-twice-ERR"
            case = Case(cid, qp_type, state, S.ERR, "post_send_twice", Attr(0))
            groups.append(Group(cid, "post rules", qp_type, state, None, (case,)))
        return groups

    return _per_type(table, qp_types, "post rules", of_type)


def err_path(table: TransitionTable, qp_type: QPType, state: QPState) -> tuple[QPState, ...]:
    """The shortest modify path from `state` to ERR the table allows: straight where it has
    the pair (iwarp's IDLE->ERR), else through INIT (Linux refuses RESET->ERR)."""
    if state == S.ERR:
        return ()
    if table.lookup(qp_type, state, S.ERR) is not None:
        return (S.ERR,)
    return (*forward_steps(state, S.INIT), S.ERR)


def after_post_path(
    state: QPState, reachable: Iterable[QPState] | None = None
) -> tuple[QPState, ...]:
    """Where a QP goes after a post so the WR's fate shows: on to RTS (if before it and
    `reachable` has it; default: it does), then ERR.

    A refused WR must then never complete; an accepted one must be flushed.
    """
    if state == S.ERR:
        return ()
    if state in (S.RESET, S.INIT, S.RTR) and (reachable is None or S.RTS in reachable):
        return (*forward_steps(state, S.RTS), S.ERR)
    return (S.ERR,)


def forward_steps(cur: QPState, target: QPState) -> tuple[QPState, ...]:
    """The forward path states after `cur` up to `target` (both on RESET..SQD)."""
    i, j = FORWARD_PATH.index(cur), FORWARD_PATH.index(target)
    if j < i:
        raise ValueError(f"{target.name} is not ahead of {cur.name} on the bring-up path")
    return FORWARD_PATH[i + 1 : j + 1]


def counts(groups: Iterable[Group]) -> dict[str, int]:
    """tests / runnable tests / cases / skipped tests, for the report."""
    groups = list(groups)
    runnable = [g for g in groups if g.skip is None]
    return {
        "tests": len(groups),
        "runnable": len(runnable),
        "cases": sum(len(g.cases) for g in runnable),
        "skipped": len(groups) - len(runnable),
    }
