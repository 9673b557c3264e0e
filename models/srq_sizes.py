"""What an SRQ's verbs hand back about it (issue 45 item 1): its sizes and its limit.

create_srq writes the SRQ's actual max_wr and max_sge back into the init attr it was given,
query_srq reports them and the armed limit, and modify_srq(IBV_SRQ_MAX_WR) resizes it where
the device says it can (IBV_DEVICE_SRQ_RESIZE, an optional feature: rxe has it; mlx5, siw,
bnxt_re and hns refuse the mask). A caller sizes its refills by these values, so a device
that reports less than it holds, or loses receives in a resize, breaks its consumers.

The drivers differ in what they report, never below what was asked: create writes back
the asked size (rxe, siw, bnxt_re: the kernel keeps init->attr) or the rounded one (mlx5
max - 1, hns wqe_cnt); query reports the rounded queue (rxe index_mask, siw num_rqe,
bnxt_re max_wqe, mlx5 and hns as created). So query's sizes are at least create's.
"""

from __future__ import annotations

from collections.abc import Mapping

from models.sources import DRIVER, MAY, MUST, OPTIONAL, PROVIDER, Rule, Source

#: The sizes of struct ibv_srq_attr (verbs.h); srq_limit is judged on its own.
SIZES = ("max_wr", "max_sge")
_DRIVERS = "linux drivers/infiniband (6.1 and 6.12)"
_MAN = "rdma-core libibverbs/man"

CREATE_AT_LEAST = Rule(
    "srq.create.at_least",
    "create_srq writes back into srq_init_attr.attr the SRQ's max_wr and max_sge, each at "
    "least what was asked",
    Source(_MAN + "/ibv_create_srq.3", "the function ibv_create_srq() will update the "
           "srq_init_attr struct with the original values of the SRQ that was created; the "
           "values of max_wr and max_sge will be greater than or equal to the values requested"),
    kind=MUST,
    layer=PROVIDER,
)
QUERY_SIZE = Rule(
    "srq.query.size",
    "query_srq reports max_wr and max_sge at least as large as create_srq wrote back (and "
    "max_wr at least a later accepted resize's size): never less than the SRQ holds",
    Source(
        _DRIVERS,
        "rxe_query_srq(): max_wr = queue index_mask (the rounded queue), max_sge as created; "
        "siw_query_srq(): num_rqe = roundup_pow_of_two(max_wr); mlx5_ib_query_srq() and "
        "hns: as create wrote back; bnxt_re_query_srq(): max_wqe >= max_wr + 1",
        "ibv_query_srq(3): max_wr, the maximum number of outstanding WRs in the SRQ",
    ),
    kind=MUST,
    layer=DRIVER,
)
QUERY_LIMIT = Rule(
    "srq.query.limit",
    "query_srq's srq_limit is the limit last armed by modify_srq(IBV_SRQ_LIMIT) while it has "
    "not fired (0 before any)",
    Source(_MAN + "/ibv_query_srq.3", "srq_limit: the limit value of the SRQ; rxe_query_srq(), "
           "siw_query_srq(): srq->limit; mlx5: the firmware's lwm; bnxt_re: its threshold"),
    kind=MUST,
    layer=DRIVER,
)
QUERY_LIMIT_FIRED = Rule(
    "srq.query.limit_fired",
    "once SRQ Limit Reached fired, query_srq's srq_limit is 0 (disarmed) or still the limit "
    "that fired (a driver that disarms by a flag of its own)",
    Source(
        _DRIVERS,
        "ibv_query_srq(3): 0 means not (or no longer) armed; rxe get_srq_wqe(): limit = 0 "
        "when it fires; siw_rqe_get(): armed = false, limit kept (siw_query_srq reports it)",
    ),
    kind=MAY,
    layer=DRIVER,
)
RESIZE = Rule(
    "srq.resize",
    "on a device with IBV_DEVICE_SRQ_RESIZE, modify_srq(IBV_SRQ_MAX_WR) to a size no smaller "
    "than the receives the SRQ holds (nor its armed limit) is accepted, and query_srq then "
    "reports max_wr at least that size",
    Source(
        _MAN + "/ibv_modify_srq.3",
        "IBV_SRQ_MAX_WR: resize the SRQ (if the device supports it: IBV_DEVICE_SRQ_RESIZE); "
        "rxe_srq_chk_attr() / rxe_srq_from_attr(): rxe_queue_resize()",
    ),
    kind=OPTIONAL,
    layer=DRIVER,
)
RESIZE_BELOW_HELD = Rule(
    "srq.resize.below_held",
    "a resize to fewer WRs than the SRQ holds is refused (EINVAL), or accepted only with room "
    "for every receive it holds (query_srq max_wr at least that many): no receive is lost",
    Source(
        _DRIVERS,
        "rdmavt rvt_modify_srq(): size < the WRs queued -> -EINVAL; rxe resize_finish(): the "
        "new queue full before the old is copied -> -EINVAL (it rounds the queue up, so a "
        "size a little below may fit)",
        "IBTA ch. 11.2.3 Modify Shared Receive Queue",
    ),
    kind=MUST,
    layer=DRIVER,
)
FAILED_UNCHANGED = Rule(
    "srq.modify.failed_unchanged",
    "a refused modify_srq changes nothing: query_srq reports the max_wr, max_sge and "
    "srq_limit it reported before",
    Source(_MAN + "/ibv_modify_srq.3", "if any of the modify attributes is invalid, none of "
           "the attributes will be modified; rxe_modify_srq(): rxe_srq_chk_attr() before any "
           "change, rxe_queue_resize() keeps the old queue on error"),
    kind=MUST,
    layer=DRIVER,
)

#: The rules declared above: models/catalog.py lists the model's rules from these.
RULES: tuple[Rule, ...] = (
    CREATE_AT_LEAST, QUERY_SIZE, QUERY_LIMIT, QUERY_LIMIT_FIRED, RESIZE, RESIZE_BELOW_HELD,
    FAILED_UNCHANGED,
)

#: One difference: (rule, field, what was allowed, what the device returned).
Miss = tuple[Rule, str, str, int]


def created_short(asked: Mapping[str, int], returned: Mapping[str, int]) -> list[Miss]:
    """The sizes create_srq wrote back below what was asked (CREATE_AT_LEAST)."""
    return [(CREATE_AT_LEAST, f, f">= {asked[f]}", returned[f])
            for f in SIZES if f in asked and f in returned and returned[f] < asked[f]]


def queried_short(floor: Mapping[str, int], queried: Mapping[str, int]) -> list[Miss]:
    """The sizes query_srq reported below `floor` (what create wrote back, or a resize
    asked) (QUERY_SIZE)."""
    return [(QUERY_SIZE, f, f">= {floor[f]}", queried[f])
            for f in SIZES if f in floor and f in queried and queried[f] < floor[f]]


def limit_allowed(armed: int, fired: bool) -> frozenset[int]:
    """The srq_limit values query_srq may report: the armed one, or after it fired, 0 or
    it (QUERY_LIMIT, QUERY_LIMIT_FIRED)."""
    return frozenset({0, armed}) if fired else frozenset({armed})


def limit_rule(fired: bool) -> Rule:
    """The rule that judges srq_limit now."""
    return QUERY_LIMIT_FIRED if fired else QUERY_LIMIT


def resize_must_accept(size: int, held: int, limit: int) -> bool:
    """A resize the device (with IBV_DEVICE_SRQ_RESIZE) must accept: room for what the SRQ
    holds and no less than its armed limit (RESIZE); below what it holds: RESIZE_BELOW_HELD."""
    return size >= held and size >= limit and size > 0


def resize_rule(size: int, held: int) -> Rule:
    """The rule that judges a resize to `size` of an SRQ holding `held` receives."""
    return RESIZE if size >= held else RESIZE_BELOW_HELD
