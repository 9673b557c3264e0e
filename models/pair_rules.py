"""The rules two connected QPs are judged by: what the wire does to one send (delivered, RNR,
retry exhausted, dropped, refused by a key, a short receive or a receive with a bad lkey)
and what each end sees of it. PairModel (models/pair.py) names one of them for every
decision, as QPModel names models/rules.py's."""

from models.sources import DRIVER, MAY, MUST, Rule, Source, ibta

_TRANSPORT = "ch. 9.7 Reliable service (ACK/NAK protocol)"
_UNRELIABLE = "ch. 9.8 Unreliable service"
_STATES = "ch. 10.3.1 QP states"

SEND_DELIVERED = Rule(
    "pair.send.delivered",
    "a SEND reaching a receiving peer with a posted receive consumes the peer's oldest receive; "
    "both complete with SUCCESS",
    ibta(_TRANSPORT + " and ch. 10.8 Work request processing", "receives are consumed in order"),
    kind=MUST,
    layer=DRIVER,
)
WRITE_DELIVERED = Rule(
    "pair.write.delivered",
    "an RDMA WRITE with a valid rkey completes with SUCCESS and consumes no receive",
    ibta("ch. 9.4.3 RDMA WRITE"),
    kind=MUST,
    layer=DRIVER,
)
RC_RNR_EXHAUSTED = Rule(
    "pair.rc.rnr_retry_exc",
    "an RC SEND (or WRITE with immediate) meeting an empty receive queue is RNR NAKed; "
    "after rnr_retry retries (7 = "
    "forever) the requester completes it with RNR_RETRY_EXC_ERR and enters ERR",
    ibta(_TRANSPORT + ", RNR NAK and ch. 10.8.3 Completion status", "RNR Retry Counter Exceeded"),
    kind=MUST,
    layer=DRIVER,
)
RC_RNR_WAITING = Rule(
    "pair.rc.rnr_wait",
    "with rnr_retry = 7 an RNR-NAKed SEND (or WRITE with immediate) is retried until a "
    "receive is posted",
    ibta(_TRANSPORT + ", RNR NAK", "a value of 7 indicates infinite retry"),
    kind=MUST,
    layer=DRIVER,
)
RC_RETRY_EXHAUSTED = Rule(
    "pair.rc.retry_exc",
    "an RC request to a peer that does not answer (gone, RESET, INIT or ERR) times out; after "
    "retry_cnt retries the requester completes it with RETRY_EXC_ERR and enters ERR",
    ibta(_TRANSPORT + ", Local ACK Timeout", "Transport Retry Counter Exceeded"),
    kind=MUST,
    layer=DRIVER,
)
UNRELIABLE_DROPPED = Rule(
    "pair.unreliable.dropped",
    "a UD/UC message the peer cannot take (no receive, or peer not in RTR/RTS/SQD/SQE) is "
    "silently dropped; the requester still completes it with SUCCESS and the peer sees nothing",
    ibta(_UNRELIABLE + " and " + _STATES, "incoming packets are silently dropped"),
    kind=MUST,
    layer=DRIVER,
)
RC_BAD_RKEY = Rule(
    "pair.rc.bad_rkey",
    "an RC RDMA WRITE or READ with an invalid rkey is NAKed (Remote Access Error): the "
    "requester "
    "completes it with REM_ACCESS_ERR and enters ERR; the responder enters ERR with the "
    "QP_ACCESS_ERR affiliated event (Local Access Violation Work Queue Error)",
    ibta(
        "ch. 9.7.5.2 Responder error behavior (class C) and ch. 11.6.3.1 Affiliated "
        "asynchronous errors",
        "Local Access Violation Work Queue Error",
    ),
    kind=MUST,
    layer=DRIVER,
)
UC_BAD_RKEY = Rule(
    "pair.uc.bad_rkey",
    "a UC RDMA WRITE (with or without immediate) with an invalid rkey is dropped by the "
    "responder; the requester completes it with SUCCESS (unreliable: no NAK)",
    ibta(_UNRELIABLE + ", responder error behavior", "the packet is silently dropped"),
    kind=MUST,
    layer=DRIVER,
)
BAD_LKEY = Rule(
    "pair.bad_lkey",
    "a send WR whose local SGE has an invalid lkey completes with LOC_PROT_ERR; nothing reaches "
    "the peer (RC then enters ERR, UD/UC enter SQE)",
    ibta("ch. 10.8.3 Completion status and ch. 10.6 Memory protection", "Local Protection Error"),
    kind=MUST,
    layer=DRIVER,
)
RC_RECV_TOO_SHORT = Rule(
    "pair.rc.recv_too_short",
    "an RC SEND (or SEND with immediate) longer than the responder's oldest receive buffer: "
    "the receive completes with LOC_LEN_ERR and the responder enters ERR, flushing the rest "
    "(ibta.err.recv_error); the responder NAKs it (Invalid Request): the requester completes "
    "it with REM_INV_REQ_ERR and enters ERR (ibta.err.send_error). A WRITE with immediate "
    "places no data in the receive buffer: a short receive takes it as any other",
    Source(
        "IBTA and linux drivers/infiniband, rdma-core providers",
        "IBTA ch. 9.7.5.2.1 Responder class C errors (a message too long for the receive "
        "WQE: Invalid Request NAK, the receive WQE completes in error, the QP enters Error), "
        "ch. 10.8.3 completion status Local Length Error / Remote Invalid Request Error; man "
        "ibv_poll_cq(3): IBV_WC_LOC_LEN_ERR 'a Work Request that was posted in a local "
        "Receive Queue isn't big enough for holding the incoming message', "
        "IBV_WC_REM_INV_REQ_ERR at the requester; mlx5 cq.c mlx5_handle_error_cqe() "
        "(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR -> IBV_WC_LOC_LEN_ERR); siw siw_qp_rx.c "
        "siw_send_check_ntoh() ('receive space short': SIW_WC_LOC_LEN_ERR, DDP Terminate); "
        "rxe means RESPST_ERR_LENGTH -> do_class_ac_error(AETH_NAK_INVALID_REQ) but "
        "copy_data() returns -EINVAL for a message longer than the receive, so "
        "send_data_in() takes RESPST_ERR_MALFORMED_WQE (Remote Operational Error NAK; "
        "quirk rxe.recv_too_short_as_malformed_wqe)",
        "the receive WQE is completed with Local Length Error",
    ),
    kind=MUST,
    layer=DRIVER,
)
UNRELIABLE_RECV_TOO_SHORT = Rule(
    "pair.unreliable.recv_too_short",
    "a UC or UD SEND (or SEND with immediate) longer than the responder's oldest receive "
    "buffer: the requester completes it with SUCCESS (no acknowledgement on an unreliable "
    "service) and stays in RTS; the responder either drops the message (the receive is not "
    "consumed and stays first, nothing completes, the QP keeps its state) or completes the "
    "receive with LOC_LEN_ERR and enters ERR, flushing the rest (ibta.err.recv_error; an "
    "affiliated error event may come with it, the driver's). The device chooses one way "
    "and keeps to it for the whole run",
    Source(
        "IBTA and linux drivers/infiniband, rdma-core providers",
        "IBTA ch. 9.9.3.1 Responder error behavior: a length error on an unreliable service "
        "is class D (the packet silently dropped) with a receive queue of its own, class E "
        "(the receive WQE completed in error) with an SRQ, as rxe_resp.c names them "
        "(RESPST_ERR_LENGTH: 'UC/UD - class D' drop_msg, 'UC/UD - class E' with an SRQ); "
        "ch. 10.8.3 completion status Local Length Error and ch. 10.3.1 (a receive "
        "completing in error takes the QP to Error); man ibv_poll_cq(3): IBV_WC_LOC_LEN_ERR "
        "'a Work Request that was posted in a local Receive Queue isn't big enough for "
        "holding the incoming message'; mlx5 cq.c (MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR -> "
        "IBV_WC_LOC_LEN_ERR, an error CQE with the QP in error); hns hns_roce_hw_v2.c "
        "hns_roce_v2_poll_one() (any error CQE but a flush: init_flush_work(), the QP to "
        "ERR); irdma IRDMA_AE_DDP_UBE_DDP_MESSAGE_TOO_LONG_FOR_AVAILABLE_BUFFER -> "
        "FLUSH_LOC_LEN_ERR (IB_WC_LOC_LEN_ERR) with IRDMA_QP_EVENT_CATASTROPHIC; efa "
        "(EFA_IO_COMP_STATUS_LOCAL_ERROR_BAD_LENGTH -> IBV_WC_LOC_LEN_ERR on its UD/SRD "
        "receives); rxe copy_data() refuses the copy with -EINVAL, so send_data_in() "
        "takes RESPST_ERR_MALFORMED_WQE (the receive LOC_QP_OP_ERR, the QP in ERR) unless "
        "rxe_resp_check_length() finds a UD message too long first (class D: dropped). "
        "iWARP has no UC or UD (siw: a short receive is a DDP Terminate, iwarp.*)",
        "a message too long for the receive WQE: dropped, or the WQE completed in error",
    ),
    kind=MAY,
    layer=DRIVER,
)
#: The two outcomes UNRELIABLE_RECV_TOO_SHORT allows (PairModel.too_long).
TOO_LONG_DROPPED, TOO_LONG_ERROR = "dropped", "recv_error"
RC_RECV_BAD_LKEY = Rule(
    "pair.rc.recv_bad_lkey",
    "an RC SEND (or SEND with immediate) meets a receive whose SGE names no MR (a bad "
    "lkey): post_recv accepted it (the key is checked when data is placed); the receive "
    "completes with LOC_PROT_ERR and the responder enters ERR, flushing the rest "
    "(ibta.err.recv_error); the responder NAKs it (Remote Operational Error): the "
    "requester completes it with REM_OP_ERR and enters ERR (ibta.err.send_error). Only a "
    "SEND is judged against such a receive (a WRITE with immediate places no data in it: "
    "not modelled)",
    Source(
        "IBTA and linux drivers/infiniband, rdma-core providers",
        "IBTA ch. 9.7.5.2 Responder error behavior (an error local to the responder, such "
        "as a receive WQE whose L_Key is not valid: Remote Operational Error NAK, the "
        "receive WQE completes in error, the QP enters Error) and ch. 10.8.3 completion "
        "status Local Protection Error / Remote Operation Error; man ibv_poll_cq(3): "
        "IBV_WC_LOC_PROT_ERR 'the locally posted Work Request's buffers in the scatter/"
        "gather list does not reference a Memory Region that is valid for the requested "
        "operation', IBV_WC_REM_OP_ERR 'Responder QP related error that prevented the "
        "responder from completing the request'. Accepted at post: rdma-core providers/rxe "
        "rxe_post_one_recv() and providers/mlx5 mlx5_post_recv() copy the SGE into the WQE "
        "unchecked (no MR table in user space). The completion status comes from the "
        "device: mlx5 cq.c maps MLX5_CQE_SYNDROME_LOCAL_PROT_ERR -> IBV_WC_LOC_PROT_ERR and "
        "MLX5_CQE_SYNDROME_REMOTE_OP_ERR -> IBV_WC_REM_OP_ERR; rxe rxe_resp.c send_data_in(): "
        "copy_data() returns -EINVAL for an lkey no MR has, RESPST_ERR_MALFORMED_WQE -> "
        "do_class_ac_error(qp, AETH_NAK_REM_OP_ERR, IB_WC_LOC_QP_OP_ERR) (the receive "
        "LOC_QP_OP_ERR: quirk rxe.recv_bad_lkey_as_malformed_wqe)",
        "Local Protection Error: the receive WQE's L_Key is not valid",
    ),
    kind=MUST,
    layer=DRIVER,
)
NO_EVENT_ON_COMPLETION_ERROR = Rule(
    "pair.completion_error.no_event",
    "an error reported in a completion raises no affiliated async event on the requester",
    ibta("ch. 11.6.3 Asynchronous events", "errors reported through a CQE are not also events"),
    kind=MUST,
    layer=DRIVER,
)

COMM_EST_ON_FIRST_PACKET = Rule(
    "pair.comm_est.first_packet",
    "an RC/UC QP in RTR may raise COMM_EST once, when its first packet arrives (mlx5, hfi1, "
    "qib do; rxe does not): allowed, never required",
    Source(
        "linux drivers/infiniband/sw/rdmavt/qp.c",
        "rvt_comm_est() called by hfi1_rc_rcv()/hfi1_uc_rcv() (hfi1 rc.c, uc.c) and "
        "qib_rc_rcv()/qib_uc_rcv() when qp->state == IB_QPS_RTR && !(r_flags & "
        "RVT_R_COMM_EST); mlx5 qp.c mlx5_ib_handle_qp_event(): MLX5_EVENT_TYPE_COMM_EST",
        "Communication Established: a message was received on a QP in RTR",
    ),
    kind=MAY,
    layer=DRIVER,
)

#: The rules declared above, by name: models/catalog.py lists the model's rules from these
#: (tests/test_model_catalog.py checks that none is left out).
RULES: tuple[Rule, ...] = (
    SEND_DELIVERED, WRITE_DELIVERED, RC_RNR_EXHAUSTED, RC_RNR_WAITING, RC_RETRY_EXHAUSTED,
    UNRELIABLE_DROPPED, RC_BAD_RKEY, UC_BAD_RKEY, BAD_LKEY, NO_EVENT_ON_COMPLETION_ERROR,
    COMM_EST_ON_FIRST_PACKET, RC_RECV_TOO_SHORT, RC_RECV_BAD_LKEY, UNRELIABLE_RECV_TOO_SHORT,
)
