"""Citations: every rule of the model says where it comes from.

A report prints `Rule.id`, its summary and its source, so a driver developer
can go from a divergence straight to the kernel line or the spec section.
"""

from dataclasses import dataclass

KERNEL_VERBS_C = "linux drivers/infiniband/core/verbs.c"
KERNEL_UVERBS_CMD_C = "linux drivers/infiniband/core/uverbs_cmd.c"
LIBIBVERBS = "rdma-core libibverbs"
IBTA_VOL1 = "IBTA InfiniBand Architecture Specification Vol. 1"


@dataclass(frozen=True)
class Source:
    """Where a rule is written down: a document and a place in it."""

    document: str
    location: str
    quote: str = ""

    def __str__(self) -> str:
        return f"{self.document}: {self.location}"


@dataclass(frozen=True)
class Rule:
    """A named rule of the model, stable across runs so reports and quirks can refer to it."""

    id: str
    summary: str
    source: Source

    def __str__(self) -> str:
        return f"{self.id} ({self.source})"


def kernel_table(cur: str, nxt: str) -> Source:
    """The qp_state_table entry the Linux core checks for cur -> nxt."""
    return Source(
        KERNEL_VERBS_C,
        f"qp_state_table[IB_QPS_{cur}][IB_QPS_{nxt}] via ib_modify_qp_is_ok()",
    )


def ibta(location: str, quote: str = "") -> Source:
    """A place in the InfiniBand Architecture Specification, Volume 1."""
    return Source(IBTA_VOL1, location, quote)
