"""The model variant as an object: what the model and the engine ask of it.

A run judges a device by one of three variants:

    linux  the Linux kernel on InfiniBand and RoCE ports: uverbs and the core check a modify
           before any driver, then the kernel's transition table (models/table.py)
    ibta   the InfiniBand specification alone: the spec's table and its strict field widths
    iwarp  an iWARP RNIC under Linux: uverbs and the core, then the RDMAC verbs' states,
           RTS only through the connection manager (models/iwarp_table.py IWARP_TABLE)

A `Variant` holds its name, its transition table and two facts (`enforces_linux_abi`,
`connection_managed`); everything else the code needs to know about a variant is a named
question answered from those, with the reason in its docstring. The name is a string only
at the edges (the --variant option, the run record, the report): `variant(name)` parses it
once, and says which names exist when it is not one of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from models import rules
from models.attributes import VALUE_RULES, ValueRule
from models.enums import QPType
from models.iwarp_table import iwarp_table
from models.sources import Rule
from models.table import TransitionTable, ibta_table, linux_table

#: Rule ids of the iWARP model's own rules start with this: only a connection-managed
#: variant consults them.
IWARP_RULE_PREFIX = "iwarp."


@dataclass(frozen=True, eq=False)
class Variant:
    """One model variant: its name, its transition table, and what it implies."""

    name: str
    table: TransitionTable = field(repr=False)
    #: The Linux uverbs layer and core check a modify before any driver does (mask rewrite,
    #: port, AV, Q_Key, GIDs: models/uverbs.py and the LINUX_ABI value rules): true of every
    #: Linux device (linux, iwarp); false of the specification alone (ibta).
    enforces_linux_abi: bool
    #: An iWARP RNIC: RESET, INIT and RTR are one IDLE state, RTS is entered only through
    #: the iWARP connection manager (rdma_cm), never by a modify, and the posts and modifies
    #: follow the RDMAC verbs (ModifyJudge._modify_iwarp, QPModel._post_iwarp; the pair is
    #: connected by rdma_cm and modelled by models/iwarp_pair.py).
    connection_managed: bool

    def __post_init__(self) -> None:
        if self.table.name != self.name:
            raise ValueError(f"variant {self.name!r} given the {self.table.name!r} table")

    def __str__(self) -> str:
        return self.name

    # ------------------------------------------------------------------ what it knows
    @property
    def qp_types(self) -> frozenset[QPType]:
        """The QP types the variant knows (iwarp: RC only; a modify or post on another type
        is refused by rules.IWARP_RC_ONLY)."""
        return self.table.qp_types

    @property
    def ib_transport(self) -> bool:
        """InfiniBand transport attributes (P_Key, path MTU, PSNs, timers, RD/atomic depths,
        alternate paths) mean something to the device: IB and RoCE ports. An iWARP driver
        reads none of them (models/attributes.py)."""
        return not self.connection_managed

    # ------------------------------------------------------------------ modify_qp
    @property
    def refuses_extra_bits(self) -> bool:
        """A mask bit the table entry does not allow is refused (ib_modify_qp_is_ok()). The
        iWARP drivers never call it and leave IB-only bits to themselves
        (rules.IWARP_IB_ATTRIBUTES: accepted or refused, both conform)."""
        return self.ib_transport

    @property
    def strict_spec_ranges(self) -> bool:
        """The spec's field widths (timeout, retry counts, PSNs, QP numbers, access bits)
        are musts (ibta). Under Linux no layer before the driver checks them: the driver may
        refuse a wider value or mask it (the "may" .width rules)."""
        return not self.enforces_linux_abi

    @property
    def masks_psn(self) -> bool:
        """_ib_modify_qp() masks sq_psn/rq_psn above 24 bits instead of refusing them, on IB
        and RoCE ports (attributes.PSN_MASKED); the spec refuses them, iWARP has no PSN."""
        return self.enforces_linux_abi and self.ib_transport

    @cached_property
    def value_rules(self) -> tuple[ValueRule, ...]:
        """The attribute value checks this variant makes, in VALUE_RULES order (the first
        broken one decides a refusal)."""
        return tuple(vr for vr in VALUE_RULES if vr.applies(self))

    # ------------------------------------------------------------------ query_qp
    @property
    def reads_back_attributes(self) -> bool:
        """query_qp is compared with the attributes modify stored (models/readback.py). An
        iWARP QP is compared by its state only: its drivers report no IB attribute."""
        return self.ib_transport

    @property
    def query_rule(self) -> Rule:
        """The rule that says what query_qp reports: the state, under one of the names
        `table.reported()` allows (iwarp: IDLE may read back as INIT)."""
        return rules.IWARP_QUERY if self.connection_managed else rules.QUERY

    # ------------------------------------------------------------------ its rules
    @property
    def never_consults(self) -> frozenset[str]:
        """Ids of the InfiniBand model's rules this variant never consults: iwarp has its own
        for them or the feature does not exist on iWARP (rules.IWARP_NEVER_CONSULTS)."""
        return rules.IWARP_NEVER_CONSULTS if self.connection_managed else frozenset()

    def consults(self, rule: Rule, readback_rule: bool = False) -> bool:
        """Does this variant's model consult a rule its modules declare (`readback_rule`: one
        of models/readback.py's)? The iwarp rules belong to iwarp only; iwarp reads back no
        attribute and has its own rules for some InfiniBand ones."""
        if rule.id.startswith(IWARP_RULE_PREFIX):
            return self.connection_managed
        if readback_rule and not self.reads_back_attributes:
            return False
        return rule.id not in self.never_consults


LINUX = Variant("linux", linux_table(), enforces_linux_abi=True, connection_managed=False)
IBTA = Variant("ibta", ibta_table(), enforces_linux_abi=False, connection_managed=False)
IWARP = Variant("iwarp", iwarp_table(), enforces_linux_abi=True, connection_managed=True)

_BY_NAME: dict[str, Variant] = {v.name: v for v in (LINUX, IBTA, IWARP)}
#: The variants' names, in the order the --variant option lists them.
VARIANTS: tuple[str, ...] = tuple(_BY_NAME)


def variant(name: str | Variant) -> Variant:
    """The variant of this name ("linux", "ibta" or "iwarp"; a Variant is returned as is);
    ValueError naming the allowed names for any other."""
    if isinstance(name, Variant):
        return name
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown model variant {name!r}: choose one of {', '.join(VARIANTS)}"
        ) from None
