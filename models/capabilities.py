"""A device's optional features at a glance: what its variant allows, less what it lacks.

The features are the ones a quirk entry may say a device lacks (`feature = "SQD"` in
fixtures/quirks/*.toml, checked by qpconform/engine/quirk_schema.py); the report lists them
(reports/qualification.py). A variant rules some out by itself: an iWARP RNIC has RC QPs
only, and no alternate paths or rate limit (models/variant.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from models.enums import QPType
from models.variant import Variant

#: The optional features, by the names quirk entries and the report use.
FEATURES = (
    "SQD", "SQE", "ALT_PATH", "XRC", "RAW_PACKET", "RATE_LIMIT", "ATOMICS", "SRQ", "SRQ_RESIZE",
)


@dataclass(frozen=True)
class Capabilities:
    """Which optional features a device has (True) as far as its variant and the features
    its quirk entries say it lacks tell."""

    sqd: bool = True  #: the SQD state (InfiniBand: the send queue drain; iWARP: CLOSING)
    sqe: bool = True  #: the SQE state (iWARP: TERMINATE)
    alt_path: bool = True  #: alternate paths (APM): IB ports only, the core refuses the rest
    xrc: bool = True  #: XRC QPs (XRC_SEND, XRC_RECV)
    raw_packet: bool = True  #: RAW_PACKET QPs
    rate_limit: bool = True  #: RATE_LIMIT in a modify's mask (the extended command)
    atomics: bool = True  #: atomic operations (atomic_cap not NONE; iWARP has none)
    srq: bool = True  #: shared receive queues (max_srq not 0)
    srq_resize: bool = True  #: modify_srq(IBV_SRQ_MAX_WR): IBV_DEVICE_SRQ_RESIZE

    @classmethod
    def of(cls, variant: Variant, lacked: Iterable[str] = ()) -> Capabilities:
        """What `variant` allows, less the features named in `lacked` (FEATURES names)."""
        lacked = set(lacked)
        unknown = lacked - set(FEATURES)
        if unknown:
            names = ", ".join(sorted(unknown))
            raise ValueError(f"unknown feature(s) {names}: choose from {', '.join(FEATURES)}")
        allowed = {
            "SQD": True,
            "SQE": True,
            "ALT_PATH": variant.ib_transport,  # attr.alt_path.iwarp: refused by the core
            "XRC": QPType.XRC_SEND in variant.qp_types,
            "RAW_PACKET": QPType.RAW_PACKET in variant.qp_types,
            "RATE_LIMIT": variant.ib_transport,  # iwarp.modify.rate_limit: EOPNOTSUPP
            "ATOMICS": variant.ib_transport,  # RFC 5040 RDMAP has no atomics
            "SRQ": True,
            "SRQ_RESIZE": True,
        }
        return cls(**{f.lower(): allowed[f] and f not in lacked for f in FEATURES})

    def has(self, feature: str) -> bool:
        """Does the device have this feature (a FEATURES name)?"""
        if feature not in FEATURES:
            raise ValueError(f"unknown feature {feature!r}: choose from {', '.join(FEATURES)}")
        return bool(getattr(self, feature.lower()))

    @property
    def lacks(self) -> tuple[str, ...]:
        """The features the device does not have, in FEATURES order."""
        return tuple(f for f in FEATURES if not self.has(f))

    def to_json(self) -> dict[str, bool]:
        """{FEATURE: has it}, in FEATURES order (the report's `capabilities`)."""
        return {f: self.has(f) for f in FEATURES}
