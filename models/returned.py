"""What the create and query verbs hand back about the objects themselves (issue 45 item 1).

A driver can accept every verb and still return wrong sizes: a QP whose written-back
capabilities are smaller than asked (a caller then overruns a queue it was told it has),
a query_qp that reports other capabilities than create_qp wrote back, a CQ smaller than
asked, a cur_qp_state that is not the state. These rules judge the values a lone QP's
create_qp, its CQs' create_cq and every query_qp already return: no verb is added.

The capability names are struct ibv_qp_cap's (verbs.h); `CAP_FIELDS` orders them.
"""

from __future__ import annotations

from collections.abc import Mapping

from models.enums import QPState
from models.sources import DRIVER, MAY, MUST, PROVIDER, Rule, Source

CAP_FIELDS = ("max_send_wr", "max_recv_wr", "max_send_sge", "max_recv_sge", "max_inline_data")
#: The capabilities query_qp must report exactly as create_qp wrote them back.
SIZED = CAP_FIELDS[:4]
_MAN_CREATE = "rdma-core libibverbs/man/ibv_create_qp.3"
_DRIVERS = "linux drivers/infiniband"

CREATE_CAP = Rule(
    "create.cap.at_least",
    "create_qp writes back into init_attr.cap the QP's actual capabilities, each at least "
    "what was asked (max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data)",
    Source(_MAN_CREATE, "the function ibv_create_qp() will update the qp_init_attr->cap "
           "struct with the actual QP values of the QP that was created; the values will be "
           "greater than or equal to the values requested"),
    kind=MUST,
    layer=PROVIDER,
)
QUERY_CAP = Rule(
    "query.cap.as_created",
    "query_qp's init_attr.cap reports max_send_wr, max_recv_wr, max_send_sge and "
    "max_recv_sge as create_qp wrote them back: both are the QP's actual capabilities",
    Source(
        _DRIVERS,
        "man ibv_query_qp(3): init_attr holds the QP's attributes at creation; mlx5 (libmlx5 "
        "mlx5_create_qp / mlx5_query_qp: sq.max_post, sq.max_gs, rq.wqe_cnt), irdma "
        "(irdma_query_qp: iwqp->max_send_wr, qp_uk frag counts), efa (efa_query_qp: "
        "qp->max_*), hns (hns_roce_v2_query_qp: sq/rq wqe_cnt, max_gs), rxe (rxe_qp_to_attr: "
        "sq/rq max_wr, max_sge) report what create stored",
    ),
    kind=MUST,
    layer=PROVIDER,
)
QUERY_INLINE = Rule(
    "query.cap.inline",
    "query_qp's max_inline_data may differ from create_qp's written-back value (a driver may "
    "report its device limit), but it is never less than what was asked",
    Source(
        _DRIVERS,
        "siw siw_query_qp(): cap.max_inline_data = SIW_MAX_INLINE whatever was asked; "
        "i40iw: I40IW_MAX_INLINE_DATA_SIZE; mlx5 (libmlx5 mlx5_query_qp: qp->max_inline_data), "
        "irdma, efa, hns, rxe: the QP's own value",
    ),
    kind=MAY,
    layer=DRIVER,
)
CQ_CQE = Rule(
    "create.cq.cqe",
    "create_cq returns a CQ with at least the cqe entries asked (ibv_cq.cqe; it may be more)",
    Source("rdma-core libibverbs/man/ibv_create_cq.3", "cqe: minimum number of entries; the "
           "actual size may be larger (mlx5 and siw round up to a power of two, rxe keeps it)"),
    kind=MUST,
    layer=DRIVER,
)
CUR_STATE = Rule(
    "query.cur_qp_state",
    "query_qp's cur_qp_state is the qp_state it reports, or RESET (0) from a driver that "
    "zeroes the attribute struct and never writes the field",
    Source(
        _DRIVERS,
        "core/uverbs_cmd.c ib_uverbs_query_qp(): resp.cur_qp_state = attr->cur_qp_state, "
        "attr kmalloc'd and filled by the driver; mlx5 (mlx5_ib_query_qp), irdma, hns, rxe: "
        "cur_qp_state = qp_state; bnxt_re: its qplib cur_qp_state; efa_query_qp: memset 0, "
        "never written (RESET); siw_query_qp does not write it either (left as kmalloc left "
        "it: not conforming)",
    ),
    kind=MAY,
    layer=DRIVER,
)

#: The rules declared above: models/catalog.py lists the model's rules from these.
RULES: tuple[Rule, ...] = (CREATE_CAP, QUERY_CAP, QUERY_INLINE, CQ_CQE, CUR_STATE)

#: One difference: (rule, field, what was allowed, what the device returned).
Miss = tuple[Rule, str, str, int]


def created_cap(asked: Mapping[str, int], returned: Mapping[str, int]) -> list[Miss]:
    """The capabilities create_qp wrote back below what was asked (CREATE_CAP)."""
    return [(CREATE_CAP, f, f">= {asked[f]}", returned[f])
            for f in CAP_FIELDS if f in asked and f in returned and returned[f] < asked[f]]


def queried_cap(
    asked: Mapping[str, int], created: Mapping[str, int], queried: Mapping[str, int]
) -> list[Miss]:
    """query_qp's capabilities against create_qp's: the sizes equal (QUERY_CAP), inline data
    at least what was asked (QUERY_INLINE)."""
    found: list[Miss] = [(QUERY_CAP, f, f"{created[f]} (as created)", queried[f])
                         for f in SIZED if f in created and f in queried
                         and queried[f] != created[f]]
    f = "max_inline_data"
    if f in asked and f in queried and queried[f] < asked[f]:
        found.append((QUERY_INLINE, f, f">= {asked[f]}", queried[f]))
    return found


def cqe_short(asked: int, cqe: Mapping[str, int]) -> list[Miss]:
    """The CQs (by queue) create_cq made smaller than asked (CQ_CQE)."""
    return [(CQ_CQE, f"{queue} cq cqe", f">= {asked}", got)
            for queue, got in cqe.items() if got < asked]


def cur_state_allowed(state: QPState) -> frozenset[int]:
    """The cur_qp_state values a query_qp reporting qp_state `state` may carry (CUR_STATE)."""
    return frozenset({int(state), int(QPState.RESET)})
