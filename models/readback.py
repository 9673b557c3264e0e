"""What query_qp must report for the attributes a QP was given: the user-visible contract.

A driver that accepts a modify and stores a value in the wrong field, or not at
all, passes every outcome check; only reading the attributes back shows it.
`Stored` keeps, per field, the value the last accepted modify set (after the
uverbs rewrite, as the driver received it) and the values query_qp may report
for it: the value itself (must), or for a "may" rule also the value masked to
its field width (a driver may refuse a wide value or store it masked, mlx5
does) or a power-of-two rounding (rd_atomic depths: rxe rounds up, mlx5 down).

Fields outside the mask are never stored, so a driver that reads a field whose
mask bit is not set shows up as a changed value (`attr.readback.unmasked`).
After a move to RESET nothing is known (drivers may restore defaults).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from models.enums import AccessFlag, Attr
from models.sources import KERNEL_UVERBS_CMD_C, LAYERS, MAY, MUST, Rule, Source, ibta

_QUERY = "ch. 11.2.5.3 Query Queue Pair (output modifiers)"

READBACK = Rule(
    "attr.readback",
    "query_qp reports the value the last accepted modify_qp set for each attribute in its mask",
    ibta(_QUERY, "the current values of the QP attributes"),
    kind=MUST,
    layer="driver",
)
READBACK_UNMASKED = Rule(
    "attr.readback.unmasked",
    "a modify_qp leaves every attribute outside its mask unchanged (the driver must not read "
    "fields whose mask bit is clear)",
    Source(KERNEL_UVERBS_CMD_C, "modify_qp(): only the attributes named by attr_mask are copied"
           " and passed on (ib_modify_qp_with_udata)"),
    kind=MUST,
    layer="driver",
)
READBACK_REFUSED = Rule(
    "attr.readback.refused",
    "a refused modify_qp changes no attribute (a failed verb changes nothing)",
    ibta("ch. 11.2.5.2 Modify Queue Pair", "if the modify fails, the QP attributes are not "
         "changed"),
    kind=MUST,
    layer="driver",
)
READBACK_ROUNDED = Rule(
    "attr.readback.rd_atomic_rounded",
    "max_rd_atomic and max_dest_rd_atomic may read back rounded to a power of two (rxe rounds "
    "up, mlx5 stores the log2)",
    Source("linux drivers/infiniband", "sw/rxe/rxe_qp.c rxe_qp_from_attr(): "
           "roundup_pow_of_two(max_rd_atomic); hw/mlx5/qp.c __mlx5_ib_modify_qp(): "
           "log_sra_max = ilog2(max_rd_atomic)"),
    kind=MAY,
    layer="driver",
)
READBACK_ACCESS = Rule(
    "attr.readback.access_flags",
    "qp_access_flags reads back with every REMOTE_READ and REMOTE_WRITE bit the modify set; the "
    "other bits are the driver's: LOCAL_WRITE, REMOTE_ATOMIC, MW_BIND and the rest may be "
    "dropped (mlx5 reports only the remote bits it holds, irdma has no atomics) and "
    "LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ may be added (bnxt_re forces them on, irdma sets "
    "LOCAL_WRITE and REMOTE_WRITE together)",
    Source(
        "linux drivers/infiniband/hw (6.1, 6.12)",
        "mlx5/qp.c query_qp_attr(): qp_access_flags |= REMOTE_READ/REMOTE_WRITE/REMOTE_ATOMIC "
        "from the QPC's rre/rwe/rae only; bnxt_re/ib_verbs.c bnxt_re_modify_qp(): access |= "
        "LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ ('Temp: Set all params on QP as of now'); "
        "irdma/verbs.c irdma_get_ib_acc_flags(): LOCAL_WRITE|REMOTE_WRITE from one bit "
        "(wr_rdresp_en), REMOTE_READ, MW_BIND",
    ),
    kind=MAY,
    layer="driver",
)

#: The rules declared above, by name: models/catalog.py lists the model's rules from these
#: (tests/test_model_catalog.py checks that none is left out).
RULES: tuple[Rule, ...] = (
    READBACK, READBACK_UNMASKED, READBACK_REFUSED, READBACK_ROUNDED, READBACK_ACCESS,
)

assert READBACK.layer in LAYERS

#: Fields query_qp reports and the mask bit that sets each (ah_* and alt_* are not compared:
#: their read-back depends on the GID table and on path migration).
COMPARED: dict[str, Attr] = {
    "qp_access_flags": Attr.ACCESS_FLAGS,
    "pkey_index": Attr.PKEY_INDEX,
    "port_num": Attr.PORT,
    "qkey": Attr.QKEY,
    "path_mtu": Attr.PATH_MTU,
    "timeout": Attr.TIMEOUT,
    "retry_cnt": Attr.RETRY_CNT,
    "rnr_retry": Attr.RNR_RETRY,
    "rq_psn": Attr.RQ_PSN,
    "sq_psn": Attr.SQ_PSN,
    "max_rd_atomic": Attr.MAX_QP_RD_ATOMIC,
    "max_dest_rd_atomic": Attr.MAX_DEST_RD_ATOMIC,
    "min_rnr_timer": Attr.MIN_RNR_TIMER,
    "dest_qp_num": Attr.DEST_QPN,
}
#: COMPARED as plain ints: the read-back checks run at every modify, and int arithmetic is
#: many times cheaper than Flag's.
_COMPARED_BITS: tuple[tuple[str, int], ...] = tuple((n, int(b)) for n, b in COMPARED.items())
_COMPARED_ANY = sum(b for _, b in _COMPARED_BITS)
#: Field widths in bits: a value beyond one may read back masked.
WIDTHS = {"timeout": 5, "retry_cnt": 3, "rnr_retry": 3, "min_rnr_timer": 5,
          "dest_qp_num": 24, "rq_psn": 24, "sq_psn": 24}
_ROUNDED = ("max_rd_atomic", "max_dest_rd_atomic")


@dataclass(frozen=True)
class Expected:
    """The values query_qp may report for one field, and the rule that says so."""

    values: frozenset[int]
    rule: Rule
    set_by: int  # the mask the modify that set it had (for the report)
    must_bits: int | None = None  # access flags: these bits must be set, the rest may vary

    def text(self, name: str) -> str:
        if self.must_bits is not None:
            return f"{name} with {self.must_bits:#x} set (other bits: {self.rule.id})"
        shown = "|".join(str(v) for v in sorted(self.values))
        return f"{name}={shown}"


def direction(exp: Expected, seen: int) -> list[str]:
    """A read-back value's side of what was set ("read=lower" / "read=higher"), so a quirk
    can cover a driver that caps a value without covering one that inflates it; access
    flags (bits, not a size) have none."""
    if exp.must_bits is not None or not exp.values:
        return []
    return ["read=lower" if seen < min(exp.values) else "read=higher"]


@dataclass
class Stored:
    """The attributes of one QP as the model knows them."""

    fields: dict[str, Expected] = field(default_factory=dict)

    def store(self, attrs: Mapping[str, int], mask: Attr) -> None:
        """An accepted modify: the fields of its mask take their new values."""
        m = int(mask)
        for name, bit in _COMPARED_BITS:
            if m & bit and name in attrs:
                self.fields[name] = _expected(name, int(attrs[name]), m)

    def forget(self, mask: Attr | None = None) -> None:
        """RESET (everything), or a modify the model refused and the device accepted (the
        fields of its mask): what query reports for them is now the driver's choice."""
        if mask is None:
            self.fields.clear()
            return
        m = int(mask)
        for name, bit in _COMPARED_BITS:
            if m & bit:
                self.fields.pop(name, None)

    def rules(
        self, mask: Attr | None = None, attrs: Mapping[str, int] | None = None
    ) -> list[Rule]:
        """The read-back rules a verb is checked against (a modify with `mask` and `attrs`,
        or a query): every known field is compared; a modify's own fields read back as set
        (by the rule of the value it sets: a non-power-of-two rd_atomic depth may read back
        rounded, READBACK_ROUNDED), the others unchanged, and nothing changes if it is
        refused."""
        found = {e.rule.id: e.rule for e in self.fields.values()}
        if mask is not None:
            m = int(mask)
            if m & _COMPARED_ANY:
                found.setdefault(READBACK.id, READBACK)
            for name, bit in _COMPARED_BITS:  # compared right after the modify
                if m & bit and attrs is not None and name in attrs:
                    rule = _expected(name, int(attrs[name]), m).rule
                    found.setdefault(rule.id, rule)
            if self.fields:
                found[READBACK_UNMASKED.id] = READBACK_UNMASKED
                found[READBACK_REFUSED.id] = READBACK_REFUSED
        return list(found.values())

    def snapshot(self) -> tuple:
        """For 'a refused verb changes nothing' checks."""
        return tuple(sorted((k, v.values) for k, v in self.fields.items()))

    def follow(self, name: str, value: int) -> None:
        """A known divergence: the device holds `value`; compare later reads with it."""
        old = self.fields[name]
        self.fields[name] = Expected(frozenset({value}), old.rule, old.set_by)

    def differences(self, found: Mapping[str, int]) -> list[tuple[str, Expected, int]]:
        """(field, expected, found) for every known field query_qp reported otherwise."""
        return [
            (name, exp, int(found[name]))
            for name, exp in self.fields.items()
            if name in found and int(found[name]) not in exp.values
        ]


#: The access bits whose read-back drivers differ on (LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ,
#: REMOTE_ATOMIC, MW_BIND), and the two that must read back when set.
_ACCESS_VARYING = 0x1F
_ACCESS_MUST = int(AccessFlag.REMOTE_WRITE | AccessFlag.REMOTE_READ)


@lru_cache(maxsize=4096)
def _access_expected(value: int, mask: int) -> Expected:
    """Every value with the remote bits set that were set, any of the varying bits, and the
    value's bits beyond them kept or dropped (a driver keeps only what it supports)."""
    must = value & _ACCESS_MUST
    varying = [1 << i for i in range(5) if (_ACCESS_VARYING & ~must) >> i & 1]
    beyond = value & ~_ACCESS_VARYING
    values = {
        must | extra | sum(b for i, b in enumerate(varying) if pick >> i & 1)
        for pick in range(1 << len(varying))
        for extra in (0, beyond)
    }
    return Expected(frozenset(values), READBACK_ACCESS, mask, must_bits=must)


@lru_cache(maxsize=16384)
def _expected(name: str, value: int, mask: int) -> Expected:
    """What query may read back for `name` after a modify set it to `value` (cached: the
    same few values recur at every step, and Expected is immutable)."""
    if name == "qp_access_flags":
        return _access_expected(value, mask)
    values = {value}
    rule = READBACK
    if name in WIDTHS:
        values.add(value & ((1 << WIDTHS[name]) - 1))
    if name in _ROUNDED and value > 0:
        values |= {1 << (value.bit_length() - 1), 1 << (value - 1).bit_length()}
        rule = READBACK_ROUNDED if len(values) > 1 else READBACK
    return Expected(frozenset(values), rule, mask)
