"""Citations: every rule of the model says where it comes from.

A report prints `Rule.id`, its summary and its source, so a driver developer
can go from a divergence straight to the kernel line or the spec section.

Each rule also says how strong it is (`kind`) and who enforces it on Linux
(`layer`), so a report can tell a driver bug from an implementation choice:

- kind "must": the spec and the Linux ABI agree; a device that differs is wrong.
  "may": implementation-defined; either outcome conforms, but the device must be
  consistent and its choice observable. "optional": an optional feature (SQD, SQE,
  alternate paths, XRC, RAW_PACKET, rate limits) that a device may lack.
- layer "spec": nothing on Linux enforces it (the `ibta` variant only); "uverbs":
  drivers/infiniband/core/uverbs_cmd.c before any driver; "core": the core verbs in
  drivers/infiniband/core/verbs.c (and cache.c, security.c) for every driver;
  "provider": the rdma-core user-space provider library; "driver": the kernel
  driver and its hardware (including the helpers a driver may or may not call,
  such as ib_modify_qp_is_ok()).

Both default to None, which means "not decided": tests/test_model_rule_kinds.py
fails for any rule reachable from the model that leaves either undecided.
"""

from dataclasses import dataclass

KERNEL_VERBS_C = "linux drivers/infiniband/core/verbs.c"
KERNEL_UVERBS_CMD_C = "linux drivers/infiniband/core/uverbs_cmd.c"
LIBIBVERBS = "rdma-core libibverbs"
IBTA_VOL1 = "IBTA InfiniBand Architecture Specification Vol. 1"
KERNEL_CACHE_C = "linux drivers/infiniband/core/cache.c"
#: iWARP: the software RNIC, the iWARP connection manager, two hardware RNIC drivers, the
#: user-space providers, and the specifications (RDMAC verbs, RDMAP, MPA).
KERNEL_SIW = "linux drivers/infiniband/sw/siw (6.1 and 6.12)"
KERNEL_IWCM_C = "linux drivers/infiniband/core/iwcm.c"
KERNEL_CXGB4 = "linux drivers/infiniband/hw/cxgb4"
KERNEL_IRDMA = "linux drivers/infiniband/hw/irdma/verbs.c"
LIBSIW = "rdma-core providers/siw/siw.c"
RDMAC_VERBS = "RDMA Protocol Verbs Specification (RDMAC, draft-hilland-rddp-verbs-00)"
RFC5040 = "IETF RFC 5040 (RDMAP)"
RFC5044 = "IETF RFC 5044 (MPA)"

MUST, MAY, OPTIONAL = "must", "may", "optional"
KINDS = (MUST, MAY, OPTIONAL)
SPEC, CORE, UVERBS, PROVIDER, DRIVER = "spec", "core", "uverbs", "provider", "driver"
LAYERS = (SPEC, CORE, UVERBS, PROVIDER, DRIVER)


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
    kind: str | None = None  # MUST, MAY or OPTIONAL; None: not decided
    layer: str | None = None  # SPEC, CORE, UVERBS, PROVIDER or DRIVER; None: not decided

    def __post_init__(self) -> None:
        if self.kind is not None and self.kind not in KINDS:
            raise ValueError(f"rule {self.id}: kind {self.kind!r} is not one of {KINDS}")
        if self.layer is not None and self.layer not in LAYERS:
            raise ValueError(f"rule {self.id}: layer {self.layer!r} is not one of {LAYERS}")

    def __str__(self) -> str:
        return f"{self.id} ({self.source})"


def kernel_table(cur: str, nxt: str) -> Source:
    """The qp_state_table entry for cur -> nxt, checked by the drivers that call the helper."""
    return Source(
        KERNEL_VERBS_C,
        f"qp_state_table[IB_QPS_{cur}][IB_QPS_{nxt}] via ib_modify_qp_is_ok(), "
        "called by the driver's modify_qp (not by _ib_modify_qp())",
    )


def ibta(location: str, quote: str = "") -> Source:
    """A place in the InfiniBand Architecture Specification, Volume 1."""
    return Source(IBTA_VOL1, location, quote)


def siw(location: str, quote: str = "") -> Source:
    """A place in the siw driver (the same code in Linux 6.1 and 6.12 unless said)."""
    return Source(KERNEL_SIW, location, quote)


def iwarp_drivers(location: str) -> Source:
    """What the Linux iWARP drivers (siw, cxgb4, irdma's iWARP path) do, each named in
    `location`: where they agree the model says "must", where they differ "may"."""
    return Source("linux iWARP drivers (siw, cxgb4, irdma)", location)
