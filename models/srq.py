"""A shared receive queue (SRQ) and the rules of a QP attached to one.

A QP created with an SRQ has no receive queue of its own: receives are posted to the
SRQ, an incoming message takes the SRQ's oldest receive and completes on the QP's
receive CQ. The SRQ is not the QP's: a QP that enters ERR flushes its sends but leaves
the SRQ's receives posted (another QP, or this one after RESET, takes them), and says
so with the Last WQE Reached event; RESET discards nothing of the SRQ. An armed SRQ
limit raises SRQ Limit Reached once, when a receive taken leaves fewer than the limit.

`SRQModel` holds the SRQ's receives and its limit; models/qp.py asks it when its QP
has one (QPModel(srq=...)). An SRQ is an optional feature (SRQ: a device with
max_srq 0 has none; efa, and irdma before its GEN3 hardware).
"""

from dataclasses import dataclass, field

from models.enums import EventType
from models.sources import CORE, DRIVER, MAY, MUST, Rule, Source, ibta

_SRQ = "ch. 10.2.9 Shared receive queue"
_EVENTS = "ch. 11.6.3.1 Affiliated asynchronous events"

SRQ_RECV_CONSUMED = Rule(
    "srq.recv.consumed",
    "a message that needs a receive, to a QP attached to an SRQ, takes the SRQ's oldest "
    "receive (one QP on the SRQ) and completes it on the QP's receive CQ, naming the QP",
    ibta(_SRQ, "a receive WQE is taken from the SRQ when a message arrives on an attached QP"),
    kind=MUST,
    layer=DRIVER,
)
SRQ_KEEPS_RECEIVES = Rule(
    "srq.err.keeps_receives",
    "a QP attached to an SRQ that enters ERR flushes its own sends only: the SRQ's receives "
    "stay posted (no flush completion), and RESET discards none of them",
    ibta(_SRQ, "the WQEs of an SRQ are not associated with any QP until they are consumed"),
    kind=MUST,
    layer=DRIVER,
)
SRQ_QP_POST_RECV = Rule(
    "srq.qp.post_recv",
    "post_recv on a QP attached to an SRQ is refused (it has no receive queue of its own; "
    "the errno is the provider's)",
    Source(
        "rdma-core providers/rxe/rxe.c, providers/mlx5/qp.c; linux drivers/infiniband/sw/siw/"
        "siw_verbs.c",
        "rxe_post_recv(): rq->queue is NULL -> EINVAL; siw_post_receive(): if (qp->srq) "
        "-EINVAL; mlx5_post_recv(): an RQ of 0 WQEs overflows -> ENOMEM",
        "receives of an SRQ-attached QP go to the SRQ",
    ),
    kind=MUST,
    layer=DRIVER,
)
LAST_WQE_REACHED = Rule(
    "srq.last_wqe_reached",
    "a QP attached to an SRQ that enters ERR (by modify, an error completion or an "
    "affiliated error) raises QP_LAST_WQE_REACHED: it will take no more receives of the SRQ",
    ibta(_EVENTS + " (Last WQE Reached)", "generated for a QP associated with an SRQ that "
         "transitioned to the Error state"),
    # Linux depends on it: ib_drain_rq() of an SRQ-attached QP (core/verbs.c
    # __ib_drain_srq()) moves it to ERR and waits for the event. mlx5
    # (MLX5_EVENT_TYPE_SRQ_LAST_WQE), hns (HNS_ROCE_EVENT_TYPE_SRQ_LAST_WQE_REACH), rdmavt
    # (rvt_error_qp(): lastwqe), rxe 6.12 (flush_recv_queue(): notify) and cxgb4 (iWARP,
    # since 2020) raise it; rxe 6.1 and siw never do (their quirks).
    kind=MUST,
    layer=DRIVER,
)
LAST_WQE_REPEATED = Rule(
    "srq.last_wqe_reached.repeated",
    "while an SRQ-attached QP stays in ERR, a further QP_LAST_WQE_REACHED may follow "
    "(rxe 6.12 raises one each time its responder runs in ERR): allowed, never required",
    Source(
        "linux drivers/infiniband/sw/rxe/rxe_resp.c (6.12)",
        "rxe_receiver(): in ERR, flush_recv_queue(qp, notify) raises "
        "IB_EVENT_QP_LAST_WQE_REACHED on every run of the responder task",
        "the spec names when the event is due, not that it comes once",
    ),
    kind=MAY,
    layer=DRIVER,
)
NO_LAST_WQE_WITHOUT_SRQ = Rule(
    "srq.last_wqe_reached.no_srq",
    "a QP without an SRQ never raises QP_LAST_WQE_REACHED",
    ibta(_EVENTS + " (Last WQE Reached)", "applies to QPs associated with an SRQ only"),
    kind=MUST,
    layer=DRIVER,
)
SRQ_LIMIT_REACHED = Rule(
    "srq.limit_reached",
    "an SRQ armed with a limit (modify_srq IBV_SRQ_LIMIT) raises SRQ_LIMIT_REACHED once, when "
    "a receive taken leaves fewer receives than the limit; the limit is then disarmed",
    ibta(_SRQ + " (SRQ limit) and " + _EVENTS + " (SRQ Limit Reached)",
         "the event is generated when the number of WQEs drops below the limit"),
    kind=MUST,
    layer=DRIVER,
)
SRQ_POST_RECV = Rule(
    "srq.post_recv",
    "post_srq_recv is accepted whatever the state of the QPs attached to the SRQ; the "
    "receive waits in the SRQ",
    ibta(_SRQ, "an SRQ has no state of its own tied to a QP"),
    kind=MUST,
    layer=DRIVER,
)
SRQ_ARM = Rule(
    "srq.modify.limit",
    "modify_srq with IBV_SRQ_LIMIT and a limit below the SRQ's size is accepted and arms it",
    Source(
        "rdma-core libibverbs ibv_modify_srq(3); linux drivers/infiniband/core/uverbs_cmd.c",
        "ib_uverbs_modify_srq() -> the driver's modify_srq (rxe_srq_chk_attr(): limit <= "
        "the queue's size; siw_modify_srq(): limit <= num_rqe)",
        "srq_limit: the value below which SRQ Limit Reached is generated",
    ),
    kind=MUST,
    layer=CORE,
)

#: The rules declared above, by name (models/catalog.py lists the model's rules from these).
RULES: tuple[Rule, ...] = (
    SRQ_RECV_CONSUMED, SRQ_KEEPS_RECEIVES, SRQ_QP_POST_RECV, LAST_WQE_REACHED,
    LAST_WQE_REPEATED, NO_LAST_WQE_WITHOUT_SRQ, SRQ_LIMIT_REACHED, SRQ_POST_RECV, SRQ_ARM,
)


@dataclass
class SRQModel:
    """The receives waiting in one SRQ (oldest first) and its armed limit (0: disarmed)."""

    recvs: list[int] = field(default_factory=list)
    limit: int = 0

    def take(self) -> tuple[int, tuple[EventType, ...]]:
        """An incoming message takes the oldest receive: its wr_id, and SRQ_LIMIT_REACHED
        when fewer than an armed limit remain (the limit is then disarmed)."""
        wr_id = self.recvs.pop(0)
        if self.limit and len(self.recvs) < self.limit:
            self.limit = 0
            return wr_id, (EventType.SRQ_LIMIT_REACHED,)
        return wr_id, ()

    def snapshot(self) -> tuple:
        """Everything a verb may change."""
        return tuple(self.recvs), self.limit
