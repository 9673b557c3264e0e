"""The edge values the attribute suite tries for each modify_qp attribute, and the state
pair each is tried on. A value that depends on the device's limits is a `Bound`, resolved
against DeviceCaps at run time (suites/cases.py), so test ids stay the same on every
device."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from models.attributes import MIG_ARMED, MIG_REARM, PSN_LIMIT
from models.enums import MTU, AccessFlag, Attr, QPState, QPType
from models.reach import reachable_states
from models.table import TransitionTable
from models.variant import Variant

S = QPState


@dataclass(frozen=True)
class Bound:
    """A value relative to a device limit, e.g. Bound("phys_port_cnt", 1) = ports + 1."""

    cap: str
    offset: int = 0

    def __str__(self) -> str:
        if not self.offset:
            return self.cap
        return f"{self.cap}{self.offset:+d}"


@dataclass(frozen=True)
class Boundary:
    """The values an attribute's boundary cases try, on the mask bit that carries it."""

    field: str
    bit: Attr
    values: tuple[tuple[int | Bound, bool], ...]  # (value, inside the IBTA range?)
    pairs: tuple[tuple[QPState, QPState], ...] = field(default=())
    #: The variants whose value rules read the field (default: every variant).
    applies: Callable[[Variant], bool] = field(default=lambda v: True)


_PSN_VALUES: tuple[tuple[int | Bound, bool], ...] = ((PSN_LIMIT - 1, True), (PSN_LIMIT, False))
_UNDEFINED_ACCESS_BIT = 1 << 30  # no ibv_access_flags value uses it

BOUNDARIES: tuple[Boundary, ...] = (
    Boundary("port_num", Attr.PORT, ((0, False), (Bound("phys_port_cnt", 1), False))),
    Boundary("ah_port_num", Attr.AV, ((0, False), (Bound("phys_port_cnt", 1), False))),
    # PORT and AV together outside ->RTR name two ports: uverbs refuses (its own rule,
    # uverbs.modify_qp.port_matches_av; reached on every variant, not by chance)
    Boundary("ah_port_num", Attr.AV | Attr.PORT, ((Bound("phys_port_cnt", 1), False),),
              pairs=((S.RESET, S.INIT),)),
    Boundary("ah_sgid_index", Attr.AV, ((Bound("gid_tbl_len"), False),)),
    Boundary(
        "pkey_index",
        Attr.PKEY_INDEX,
        ((Bound("pkey_tbl_len", -1), True), (Bound("pkey_tbl_len"), False)),
    ),
    Boundary(
        "path_mtu",
        Attr.PATH_MTU,
        (
            (0, False),
            (int(MTU.MTU_256), True),
            (Bound("active_mtu"), True),
            (Bound("max_mtu"), True),
            (Bound("max_mtu", 1), False),
            (6, False),
        ),
    ),
    Boundary("timeout", Attr.TIMEOUT, ((31, True), (32, False))),
    Boundary("retry_cnt", Attr.RETRY_CNT, ((7, True), (8, False))),
    Boundary("rnr_retry", Attr.RNR_RETRY, ((7, True), (8, False))),
    Boundary("min_rnr_timer", Attr.MIN_RNR_TIMER, ((31, True), (32, False))),
    Boundary("sq_psn", Attr.SQ_PSN, _PSN_VALUES),
    Boundary("rq_psn", Attr.RQ_PSN, _PSN_VALUES),
    Boundary("dest_qp_num", Attr.DEST_QPN, _PSN_VALUES),
    # one below the limit too: in range, and not a power of two on most devices (rxe's 128:
    # 127), so a driver may read it back rounded (attr.readback.rd_atomic_rounded)
    Boundary(
        "max_rd_atomic",
        Attr.MAX_QP_RD_ATOMIC,
        (
            (Bound("max_qp_init_rd_atom", -1), True),
            (Bound("max_qp_init_rd_atom"), True),
            (Bound("max_qp_init_rd_atom", 1), False),
        ),
    ),
    Boundary(
        "max_dest_rd_atomic",
        Attr.MAX_DEST_RD_ATOMIC,
        (
            (Bound("max_qp_rd_atom", -1), True),
            (Bound("max_qp_rd_atom"), True),
            (Bound("max_qp_rd_atom", 1), False),
        ),
    ),
    Boundary(
        "qp_access_flags",
        Attr.ACCESS_FLAGS,
        ((int(AccessFlag(15)), True), (_UNDEFINED_ACCESS_BIT, False)),
    ),
    # alternate paths (APM), where a connected QP first takes one (INIT->RTR): the last
    # port is valid (a RoCE port still refuses it: attr.alt_path.roce), 0 and one past the
    # last are not (uverbs: attr.alt_port_num.range, attr.alt_ah_port_num.match, checked
    # before the core's RoCE ban)
    Boundary(
        "alt_port_num",
        Attr.ALT_PATH,
        ((Bound("phys_port_cnt"), True), (0, False), (Bound("phys_port_cnt", 1), False)),
    ),
    Boundary(
        "alt_ah_port_num",
        Attr.ALT_PATH,
        ((0, False), (Bound("phys_port_cnt", 1), False)),
        applies=lambda v: v.enforces_linux_abi,  # the alternate AV's port: a uverbs check
    ),
    # REARM a consumer may ask for; ARMED is left to the driver (attr.path_mig_state.armed)
    Boundary(
        "path_mig_state", Attr.PATH_MIG_STATE, ((MIG_REARM, True), (MIG_ARMED, False))
    ),
    Boundary("qp_state", Attr.STATE, ((7, False),), ((S.RESET, S.INIT),)),
    Boundary("cur_qp_state", Attr.CUR_STATE, ((7, False),)),
)

#: Where a boundary is tried: the first pair (in this order) that requires the bit, else
#: the first that allows it. The bring-up path comes first, so the value is set where a
#: real application sets it.
_PAIR_PREFERENCE: tuple[tuple[QPState, QPState], ...] = (
    (S.RESET, S.INIT),
    (S.INIT, S.RTR),
    (S.RTR, S.RTS),
    (S.INIT, S.INIT),
    (S.RTS, S.RTS),
    (S.SQD, S.RTS),
    (S.SQD, S.SQD),
    (S.RTS, S.SQD),
)

#: Mask bits outside the defined set: refused before any table check.
UNKNOWN_MASK_BITS: tuple[int, ...] = (1 << 21, 1 << 24, 1 << 26)


def boundary_pair(
    table: TransitionTable, qp_type: QPType, bit: Attr
) -> tuple[QPState, QPState] | None:
    """The state pair where a boundary for `bit` is applied for this QP type (None: nowhere)."""
    reachable = reachable_states(table, qp_type)
    entries = [
        e
        for pair in _PAIR_PREFERENCE
        if pair[0] in reachable and (e := table.lookup(qp_type, *pair)) is not None
    ]
    for e in entries:
        if bit & e.required:
            return e.cur, e.nxt
    for e in entries:
        if bit & e.optional:
            return e.cur, e.nxt
    return None
