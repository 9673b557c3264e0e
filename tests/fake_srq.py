"""The fake pair end's SRQ sizes (models/srq_sizes.py): what create_srq wrote back, query_srq
and a resize, with the planted faults of SRQ_SIZE_FAULTS.

A correct fake SRQ rounds nothing at create, reports its size and the model's limit (0 once
fired, as rxe), resizes to any size that holds its receives and refuses a smaller one with
EINVAL, changing nothing.
"""

from __future__ import annotations

import errno
from collections.abc import Callable

from models.srq import SRQModel
from qpconform.engine.device import SrqCreated, VerbResult

#: Planted faults: create_srq writes back less than asked; query_srq reports less than
#: create wrote back, 0 for an armed limit, or 1 once it fired; every resize is refused; a
#: resize below the receives held is accepted (and reported at that size); a refused resize
#: changed max_wr.
SRQ_SIZE_FAULTS = (
    "srq_create_short", "srq_query_short", "srq_limit_unread", "srq_limit_after_fire",
    "srq_resize_refused", "srq_resize_below_held", "srq_failed_resize_changes",
    "srq_query_refused",
)
ASKED = {"max_wr": 64, "max_sge": 1}


class FakeSrqSizes:
    """One fake end's SRQ sizes; its receives and limit are the fake model's `srq`."""

    def __init__(self, srq: Callable[[], SRQModel | None], fault: str | None) -> None:
        self._srq, self.fault = srq, fault
        self.max_wr = ASKED["max_wr"]

    @property
    def srq(self) -> SRQModel | None:
        """The fake model's SRQ of this end (looked up: a recreated end gets a new one)."""
        return self._srq()

    def created(self) -> SrqCreated | None:
        if self.srq is None:
            return None
        short = 1 if self.fault == "srq_create_short" else 0
        return SrqCreated(asked=dict(ASKED), returned=dict(ASKED, max_wr=ASKED["max_wr"] - short))

    def query(self) -> dict[str, int] | None:
        if self.srq is None:
            return None
        if self.fault == "srq_query_refused":  # a provider without query_srq (libsiw)
            return None
        short = 1 if self.fault == "srq_query_short" else 0
        limit = self.srq.limit
        if self.fault == "srq_limit_unread":
            limit = 0
        elif self.fault == "srq_limit_after_fire" and limit == 0:
            limit = 1
        return {"max_wr": self.max_wr - short, "max_sge": ASKED["max_sge"], "srq_limit": limit}

    def resize(self, size: int) -> VerbResult:
        if self.srq is None:
            return VerbResult(False, errno.EINVAL, "no SRQ")
        if self.fault == "srq_resize_refused":
            return VerbResult(False, errno.EINVAL, "planted: no resize")
        if size >= len(self.srq.recvs) and size >= self.srq.limit and size > 0:
            self.max_wr = size
            return VerbResult(True)
        if self.fault == "srq_resize_below_held":
            self.max_wr = size
            return VerbResult(True)
        if self.fault == "srq_failed_resize_changes":
            self.max_wr = size
        return VerbResult(False, errno.EINVAL, "below the receives held")
