"""rxe 6.1's memory-corrupting modify as a fake driver: a known hazard's planted bug.

A modify that grows max_dest_rd_atomic loses the device (tests/test_hazards.py,
tests/test_quirk_near_miss.py): the engine must never send one on 6.1.
"""

from __future__ import annotations

from models.enums import Attr, QPState
from models.outcomes import Expectation, Outcome
from qpconform.engine.device import DeviceLost
from tests.fake_device import Behaviour, FakeQP, Verdict

MAX_DEST = Attr.MAX_DEST_RD_ATOMIC


class Oops(Behaviour):
    """rxe 6.1: a modify that grows max_dest_rd_atomic past the QP's array crashes, once it
    gets to rxe_qp_from_attr(): the model accepts it, or refuses it only for a value (rxe
    checks no max_dest_rd_atomic range); the core's table and uverbs refuse the rest first."""

    name = "oops"

    def modify(self, qp: FakeQP, exp: Expectation, attrs: dict, mask: Attr) -> Verdict | None:
        held = qp.private.get("max_dest_rd_atomic")
        grows = MAX_DEST in mask and held is not None and attrs["max_dest_rd_atomic"] > held
        stored = exp.outcome is not Outcome.REFUSE or exp.rule.id.startswith("attr.")
        if grows and stored:
            raise DeviceLost("kernel oops in rxe_qp_from_attr (planted)")
        return None

    def modified(self, qp: FakeQP, before: QPState, after: QPState, attrs: dict,
                 mask: Attr) -> None:
        if MAX_DEST in mask:
            qp.private["max_dest_rd_atomic"] = attrs["max_dest_rd_atomic"]


class RefusesSqdToSqd(Oops):
    """The same driver, also refusing every SQD->SQD that sets max_dest_rd_atomic: a
    different bug of the same modify, which the hazard must not hide."""

    def modify(self, qp: FakeQP, exp: Expectation, attrs: dict, mask: Attr) -> Verdict | None:
        if qp.model.state == QPState.SQD and MAX_DEST in mask:
            return Verdict(False, errno=22)
        return super().modify(qp, exp, attrs, mask)
