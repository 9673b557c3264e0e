"""What a modify's mask leaves out must not matter.

ibv_modify_qp(qp, attr, mask) and ibv_modify_srq(srq, attr, mask) hand over a whole struct;
only the fields the mask names are input. A driver that reads another one (qp_state
without IB_QP_STATE, say) decides on whatever the caller's stack held. The outcome and the
read-back of a modify must be the same whatever those fields hold: the read-back half is
`attr.readback.unmasked` (models/readback.py), the outcome half is `OUTSIDE_MASK` here.

A device's outcome cannot name the field it read, so `explains()` asks the model what an
attribute-only modify (no IB_QP_STATE) would have done had the driver taken qp_state as
input (the caller's value, or 0: libibverbs' `copy_modify_qp_fields()` copies only the
masked fields into the zeroed uverbs command, so a kernel driver sees 0 there): a
divergence no quirk covers that such a reading explains is reported under this rule.

ibv_modify_srq(srq, attr, IBV_SRQ_LIMIT) carries max_wr outside its mask too (libibverbs
copies both fields; uverbs ib_uverbs_modify_srq() passes both with the mask). mlx5
(mlx5_ib_modify_srq()) and hns (hns_roce_v2_modify_srq()) read srq_limit only under
IB_SRQ_LIMIT and refuse IB_SRQ_MAX_WR, bnxt_re_modify_srq() switches on the mask: the
suites fill max_wr like any field, and the outcome stays judged by `srq.modify.limit`
(a limit has no state to read back, so no reading is needed to name it).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from models.enums import Attr, QPState
from models.outcomes import Expectation
from models.sources import DRIVER, KERNEL_UVERBS_CMD_C, LIBIBVERBS, MUST, Rule, Source


class Judging(Protocol):
    """What `explains` needs of a QPModel (models/qp.py imports this module)."""

    variant: Any

    @property
    def table(self) -> Any: ...

    def modify(self, attrs: Mapping[str, int], mask: Attr | int) -> Expectation: ...

OUTSIDE_MASK = Rule(
    "linux.modify.outside_mask_ignored",
    "the outcome and the read-back of modify_qp do not depend on the attr fields outside "
    "attr_mask (qp_state without IB_QP_STATE, cur_qp_state without IB_QP_CUR_STATE, ...)",
    Source(
        LIBIBVERBS,
        "man ibv_modify_qp(3): 'attr_mask ... only the fields indicated are considered'; "
        "libibverbs cmd.c copy_modify_qp_fields() copies only the masked fields; "
        f"{KERNEL_UVERBS_CMD_C} modify_qp() and core verbs.c _ib_modify_qp() / "
        "ib_modify_qp_is_ok() read qp_state and cur_qp_state only under their mask bits. "
        "Checked in drivers/infiniband/hw: mlx5_ib_modify_qp(), hns_roce_modify_qp() and "
        "efa_modify_qp() take new_state = mask & IB_QP_STATE ? attr->qp_state : cur_state "
        "(cur_state likewise under IB_QP_CUR_STATE); bnxt_re_modify_qp() and irdma's "
        "irdma_modify_qp_roce() read qp_state and call ib_modify_qp_is_ok() only inside "
        "if (mask & IB_QP_STATE) (irdma prints attr->qp_state in a debug line, no decision); "
        "every other field is read under its bit. All five agree: must",
        "attr_mask: the fields of attr to modify",
    ),
    kind=MUST,
    layer=DRIVER,
)
RULES: tuple[Rule, ...] = (OUTSIDE_MASK,)

#: The fields whose reading outside the mask changes which check a modify gets, with the
#: bit that would have named them. cur_qp_state is not one: read as 0 (RESET) it would
#: "explain" any refusal of a move from RTR..SQE, so the name would say nothing.
_DECIDING: tuple[tuple[str, Attr], ...] = (("qp_state", Attr.STATE),)


def readings(attrs: Mapping[str, int], mask: Attr) -> Iterator[tuple[dict[str, int], Attr]]:
    """The (attrs, mask) a driver would act on if it read qp_state outside `mask`: the
    caller's value, then 0 (what a kernel driver sees behind libibverbs)."""
    for name, bit in _DECIDING:
        if bit in mask:
            continue
        for value in dict.fromkeys((attrs.get(name), 0)):
            if value is not None:  # out of range too: the model refuses it as uverbs would
                yield {**attrs, name: int(value)}, Attr(int(mask) | int(bit))


def explains(
    model: Judging, attrs: Mapping[str, int], mask: Attr, accepted: bool,
    errno: int | None, seen: QPState | None,
) -> bool:
    """Would a driver reading qp_state outside `mask` have done what the device did
    (its outcome and, if accepted and read back, its state)? The model is not touched."""
    for alt_attrs, alt_mask in readings(attrs, mask):
        shared = {id(model.variant): model.variant, id(model.table): model.table}  # read-only
        alt = copy.deepcopy(model, shared).modify(alt_attrs, alt_mask)
        if not alt.allows(accepted, errno):
            continue
        if accepted and seen is not None and seen != alt.state_if_accepted:
            continue
        return True
    return False
