"""A fake connected QP pair for self-tests: a correct device, or one with a planted fault.

The fake behaves exactly as PairModel says (it runs its own PairModel), so a
harness over an unfaulted fake must find nothing; each planted fault breaks one
promise (a flush lost or out of order, a completion twice, SQ_DRAINED missing or
unasked, a discarded WR run after RESET, an error event on top of an error
completion) and the harness must catch it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping

import pytest
from hypothesis import seed, settings
from hypothesis.stateful import RuleBasedStateMachine

from models import access
from models.enums import Attr, EventType, QPState, QPType, WCOpcode, WCStatus
from models.iwarp_pair import LLP_CLOSED, NO_RECEIVE, IwarpPairModel
from models.operations import MESSAGE_LEN, SINK_PAYLOAD, SINK_STALE, WC_WITH_IMM, Op
from models.outcomes import Expectation, ExpectedCompletion, Outcome
from models.pair import PairModel
from models.pair_rules import (
    BAD_LKEY,
    RC_RETRY_EXHAUSTED,
    TOO_LONG_DROPPED,
    TOO_LONG_ERROR,
    UNRELIABLE_RECV_TOO_SHORT,
)
from models.qp import QPModel
from models.variant import LINUX
from models.wire import Fault, WireSettings, WireStep
from qpconform.engine.connect import FAST, connect_values
from qpconform.engine.device import AsyncEvent, Completion, QueryResult, SrqCreated, VerbResult
from qpconform.engine.judge import DivergenceError
from qpconform.engine.pair import PairHarness
from qpconform.engine.records import Divergence
from tests.example_counts import PLANTED_RUN
from tests.fake_srq import SRQ_SIZE_FAULTS, FakeSrqSizes

FAULTS = (
    "lost_flush",
    "flush_out_of_order",
    "duplicate_completion",
    "event_missing",
    "event_unasked",
    "run_after_reset",
    "event_on_completion_error",
    # behaviours of real drivers (rxe), and near misses of them
    "bad_lkey_loc_qp_op_err",
    "bad_lkey_rem_access_err",
    "bad_lkey_flush",
    "send_error_to_err",
    "send_error_stays_rts",
    "sqd_rts_no_resume",
    "sqd_rts_resume_bad_status",
    # rxe's SQD->RTS leaves the held sends waiting for the next post_send's doorbell; near
    # misses after that step: the doorbell runs them with a wrong status, or loses them
    "sqd_rts_no_resume_then_bad_status",
    "sqd_rts_no_resume_then_lost",
    "sqd_rts_no_resume_then_stays_rts",  # the doorbell runs a bad send; the QP stays RTS
    "drain_early",
    "drain_never_ends",
    "no_access_err_event",
    "access_err_as_fatal",
    "stale_sq_after_sqd_reset",
    "stale_sq_after_any_reset",
    # rxe 6.12: after a RESET that discarded sends, the next drain never ends
    "stale_sq_drain_never_ends",
    "stale_sq_drain_never_ends_lost_flush",  # ... and a later move to ERR loses a flush
    # COMM_EST on the first packet in RTR (mlx5, hfi1, qib), and raising it twice
    "comm_est_first_packet",
    "comm_est_twice",
    # a CQ smaller than asked: it holds CQ_ROOM unpolled completions, then raises CQ_ERR
    "cq_overrun",
    # the retry timer fires late (rxe under TCG): RETRY_EXC_ERR comes TIMER_DELAY s after
    "late_timer",
    # completions of the other operations: a wrong opcode (a READ reported as a WRITE, a
    # WRITE with immediate received as a plain RECV), immediate data lost
    "read_as_write",
    "atomic_as_read",
    "write_imm_as_recv",
    "imm_lost",
    # unsignaled WRs: a success completes anyway; a flush of one is lost; its own error
    # completion is lost
    "unsignaled_completes",
    "unsignaled_flush_lost",
    "unsignaled_error_lost",
    # shared receive queues (FakePair(srq_sides=...)): an SRQ's receives flushed when its QP
    # enters ERR, Last WQE Reached missing or raised by a QP without an SRQ, SRQ Limit
    # Reached missing or raised again without being re-armed
    "srq_recv_flushed",
    "last_wqe_missing",
    "last_wqe_without_srq",
    "srq_limit_missing",
    "srq_limit_twice",
)
#: Faults of an iWARP fake pair (iwarp=True): the peer never sees the connection end, it
#: sees it but flushes nothing, a SEND with no receive waits (IB's RNR) instead of ending
#: the connection.
IWARP_FAULTS = (
    "close_not_seen", "close_without_flush", "no_terminate",
    "bad_lkey_loc_qp_op_err", "bad_lkey_rem_access_err",  # siw's status, and a near miss
    # siw on a bad lkey: LOC_QP_OP_ERR and QP_FATAL, the connection dropped, but the QP
    # itself stays in RTS and flushes nothing; and a near miss that leaves it in SQE
    "siw_bad_lkey", "bad_lkey_to_sqe",
    # siw's RTS->SQE (TERMINATE) flushes nothing of its own; the same on RTS->SQD: near miss
    "sqe_keeps_own_wrs", "sqd_keeps_own_wrs",
    # siw's user rings: a receive posted in SQD (CLOSING) or SQE (TERMINATE) is accepted and
    # never flushed; a near miss flushes it with SUCCESS
    "recv_in_closing_unflushed", "recv_in_closing_wrong_status",
    # shared receive queues: Last WQE Reached missing (siw), or raised without an SRQ
    "last_wqe_missing", "last_wqe_without_srq",
)
#: Faults of post_recv on an SRQ's QP, IB or iWARP: it kills the process making it (libsiw:
#: SIGFPE), or (a near miss of that quirk) it is accepted.
SRQ_QP_FAULTS = ("srq_qp_post_recv_kills", "srq_qp_post_recv_accepted")
#: Faults of the inline, foreign-operation and initiator-depth rules (models/operations.py):
#: an inline WR within the cap completes in error; one beyond the cap is accepted and run;
#: an operation the QP type lacks completes with SUCCESS; a READ beyond max_rd_atomic fails
#: instead of waiting. Played by FakeEnd._post_extra and FakePair._bent_extra.
OPS_EXTRA_FAULTS = (
    "inline_fails", "inline_over_cap_accepted", "op_not_of_type_succeeds",
    "read_beyond_depth_fails",
    "op_not_of_type_flush",  # rxe 6.4+: the foreign operation completes as a flush
    # an atomic to a misaligned remote address executes as an aligned one; and not a fault:
    # the provider refuses it at post with EINVAL (rdma-core's rxe provider)
    "misaligned_atomic_executes", "misaligned_atomic_refused",
)
#: Faults of several QPs on one CQ (FakePair(shared_cq_sides=...): the end shares its CQs
#: with a bystander QP): the end's flush takes the bystander's WRs too, the bystander's
#: completions name the end's qp_num or the end's name the bystander's, a RESET of the end
#: cleans the bystander's entries off the CQ. "reset_cleans_own" is a near miss, not a
#: fault: RESET cleans the end's own entries only (mlx5, hns), which conforms.
SHARED_CQ_FAULTS = (
    "flush_touches_bystander", "bystander_wrong_qp_num", "end_as_bystander_qp_num",
    "reset_cleans_bystander", "reset_cleans_own",
)
#: Faults of fences and receives completing in error (FakeEnd.post_recv, FakePair.emit): a
#: fenced SEND carries its READ sink's bytes from before the READ (the fence ignored); a
#: SEND longer than the receive completes at both ends with SUCCESS; rxe's malformed-WQE
#: path (the receive LOC_QP_OP_ERR, the SEND REM_OP_ERR), and near misses of it (the
#: receive LOC_PROT_ERR; the SEND REM_OP_ERR, the receive as it should).
FENCE_RECV_FAULTS = (
    "fence_ignored", "short_recv_succeeds", "recv_len_err_as_malformed_wqe",
    "recv_len_err_loc_prot_err", "recv_len_err_rem_op_err_only",
)
#: Faults of the ibv_wc fields a successful receive completion reports (docs/fields.md;
#: FakePair._bent_wc): byte_len one more than the message, IBV_WC_WITH_IMM clear while the
#: immediate data is there, IBV_WC_WITH_IMM set on a message without it, a UD receive's
#: src_qp naming the receiver instead of the sender. Near misses, not faults: a UD receive
#: whose byte_len leaves out the 40 GRH bytes (efa), a WRITE with immediate whose byte_len
#: is 0 (the "may" rules allow both). And a device that chooses both ways: every second UD
#: receive without the GRH's bytes (inconsistent, under pair.ud.wc.byte_len).
WC_FIELD_FAULTS = (
    "byte_len_one_more", "imm_flag_clear", "imm_flag_unasked", "src_qp_is_receiver",
    "ud_byte_len_without_grh", "write_imm_byte_len_zero", "ud_byte_len_flips",
)
#: (receive status, SEND status) each planted fault gives a SEND longer than the receive
#: (None: the model's).
_RECV_LEN_STATUS = {
    "recv_len_err_as_malformed_wqe": (WCStatus.LOC_QP_OP_ERR, WCStatus.REM_OP_ERR),
    "recv_len_err_loc_prot_err": (WCStatus.LOC_PROT_ERR, None),
    "recv_len_err_rem_op_err_only": (None, WCStatus.REM_OP_ERR),
}
#: Faults of a receive whose lkey names no MR (FakeEnd.post_recv, FakePair.emit): the bad key
#: ignored (the SEND lands, SUCCESS at both ends); rxe's malformed-WQE path (the receive
#: LOC_QP_OP_ERR; the SEND REM_OP_ERR, as the model says), and near misses of it (the
#: receive LOC_LEN_ERR; the SEND REM_ACCESS_ERR, the receive as it should).
RECV_BAD_LKEY_FAULTS = (
    "recv_bad_lkey_succeeds", "recv_bad_lkey_as_malformed_wqe", "recv_bad_lkey_loc_len_err",
    "recv_bad_lkey_rem_access_err",
)
#: (receive status, SEND status) each planted fault gives a SEND into a bad-lkey receive
#: (None: the model's).
_RECV_BAD_LKEY_STATUS = {
    "recv_bad_lkey_as_malformed_wqe": (WCStatus.LOC_QP_OP_ERR, None),
    "recv_bad_lkey_loc_len_err": (WCStatus.LOC_LEN_ERR, None),
    "recv_bad_lkey_rem_access_err": (None, WCStatus.REM_ACCESS_ERR),
}
#: Faults of a UC/UD SEND longer than the receive (pair.unreliable.recv_too_short; the fake
#: drops it unless told otherwise) and of inline bytes (pair.inline.delivered): the near
#: miss "too_long_error" completes the receive LOC_LEN_ERR and enters ERR (the other
#: outcome the rule allows); the receive completes SUCCESS; LOC_LEN_ERR but the QP stays
#: RTS; the first one dropped, the next completed in error (two choices in one run); the
#: requester completes in error; an inline SEND delivers other bytes than it was posted with.
TOO_LONG_INLINE_FAULTS = (
    "too_long_error", "too_long_succeeds", "too_long_error_stays_rts", "too_long_inconsistent",
    "too_long_requester_error", "inline_wrong_bytes",
    "too_long_as_malformed_wqe",  # rxe's UC: the receive LOC_QP_OP_ERR, the QP in ERR
    "too_long_error_fatal",  # near miss: the error outcome with QP_FATAL (irdma)
    # the QP enters ERR and flushes, but the receive's LOC_LEN_ERR never comes: a flush
    # alone must not pass for the error outcome (the harness learns the choice from it)
    "too_long_error_recv_lost",
)
#: The faults under which the fake completes a too-long UC/UD message's receive in error.
_TOO_LONG_AS_ERROR = ("too_long_error", "too_long_succeeds", "too_long_error_stays_rts",
                      "too_long_as_malformed_wqe", "too_long_error_fatal",
                      "too_long_error_recv_lost")
#: Faults of memory protection (models/access.py; FakeEnd.post_send, FakePair.place): a
#: WRITE into a target MR without REMOTE_WRITE lands as if granted; a granted WRITE
#: places one byte past its window; a granted WRITE completes and places nothing. The QP's
#: own access flags (models/access.py RC_QP_RIGHTS, UC_QP_RIGHTS; FakeEnd.modify,
#: FakePair._bent): a QP that ignores its flags (a narrowing modify keeps every right); a
#: refusal completed REM_OP_ERR; the other allowed status, REM_INV_REQ_ERR (a near miss);
#: each allowed status in turn (a "may" choice not held).
ACCESS_FAULTS = ("write_without_right", "write_one_past", "write_lost", "qp_rights_ignored",
                 "qp_rights_wrong_status", "qp_rights_as_invalid_request",
                 "qp_rights_inconsistent")
#: A fault of the Q_Key check (models/qkey.py; FakeEnd.post_send): the responder takes a
#: UD datagram whatever Q_Key it carries.
QKEY_FAULTS = ("qkey_ignored",)
#: The requester's status of a refusal by the QP's access flags, per planted fault.
_QP_RIGHTS_STATUS = {
    "qp_rights_wrong_status": WCStatus.REM_OP_ERR,
    "qp_rights_as_invalid_request": WCStatus.REM_INV_REQ_ERR,
}
#: A fault of the fields an opcode does not use (models/unused_fields.py): a SEND without
#: immediate whose imm_data holds a value hands it to the receive (IBV_WC_WITH_IMM).
UNUSED_WR_FAULTS = ("imm_from_unused",)
#: A fault of the fields outside a modify's mask (models/outside_mask.py): a modify without
#: IBV_QP_CUR_STATE whose cur_qp_state names another valid state is table-checked from that
#: state (the driver takes it as the current one): refused where that move is illegal.
OUTSIDE_MASK_FAULTS = ("cur_state_from_unmasked",)
#: The byte write_one_past places after a window (the guard pattern never has it there).
_STRAY = 0x00
#: The max_inline_data a fake QP reports: the 64 bytes asked, rounded up as rxe may.
FAKE_MAX_INLINE = 72
#: How many unpolled completions cq_overrun's CQ holds.
CQ_ROOM = 2
#: late_timer: seconds before a retry-exhausted send completes (and what it flushes).
TIMER_DELAY = 0.02
#: Faults of the requester's local SGE checks (models/local_access.py; FakeEnd.post_send,
#: FakePair._bent): the bounds check skipped, the PD check skipped (the WR goes out as if
#: its SGE were valid: a WRITE into the peer's granted window), the sink's LOCAL_WRITE
#: not checked (a READ's or atomic's response placed: it succeeds); an SGE past its MR's
#: end completed LOC_LEN_ERR (the tempting wrong status); a receive's LOCAL_WRITE not
#: checked (a SEND into it succeeds, FakeEnd.post_recv).
LOCAL_FAULTS = ("local_bounds_unchecked", "local_pd_unchecked", "sink_write_unchecked",
                "local_bounds_loc_len_err", "recv_write_unchecked", "local_loc_qp_op_err",
                "local_flush")
_LOCAL_UNCHECKED = {"local_bounds_unchecked": Fault.LOCAL_PAST_END,
                    "local_pd_unchecked": Fault.LOCAL_OTHER_PD,
                    "sink_write_unchecked": Fault.SINK_READ_ONLY}
#: The status a send whose local SGE is past its MR or in another PD completes with, per
#: planted fault (rxe 6.1: LOC_QP_OP_ERR for the PD; 6.4+: both flushed).
_LOCAL_STATUS = {
    "local_loc_qp_op_err": WCStatus.LOC_QP_OP_ERR,
    "local_flush": WCStatus.WR_FLUSH_ERR,
}
#: The status a send with a bad lkey completes with, per planted fault.
_BAD_LKEY_STATUS = {
    "bad_lkey_loc_qp_op_err": WCStatus.LOC_QP_OP_ERR,
    "bad_lkey_rem_access_err": WCStatus.REM_ACCESS_ERR,
    "bad_lkey_flush": WCStatus.WR_FLUSH_ERR,
}


class FakeEnd:
    """One end of the fake pair (the PairEnd protocol)."""

    def __init__(self, pair: FakePair, side: str, qp_num: int) -> None:
        self.pair, self.side, self.qp_num = pair, side, qp_num
        self.closed = False
        self.cq: list[Completion] = []
        self.async_events: list[EventType] = []
        self.stale = False  # stale_sq_*: the next send runs a zeroed slot and fails
        self.waiting: set[int] = set()  # sqd_rts_no_resume*: held sends the doorbell starts
        self.delayed: list[tuple[float, Completion]] = []  # late_timer: (when, completion)
        self.stale_drain = False  # stale_sq_drain_never_ends: the next drain never ends
        self.max_inline = FAKE_MAX_INLINE  # as query_qp reports it
        self.bystander: FakeBystander | None = None  # a QP on this end's CQs
        self.srq_sizes = FakeSrqSizes(lambda: pair.model.qp(side).srq, pair.fault)

    def modify(self, attrs: Mapping[str, int], mask: Attr) -> VerbResult:
        """Accept or refuse as the model says; effects happen at once."""
        model = self.pair.model
        qp = model.qp(self.side)
        before_sends, before_recvs = qp.queues.outstanding_sends, list(qp.queues.recvs)
        held = set(before_sends) - set(qp.queues.in_flight)
        notify = Attr.EN_SQD_ASYNC_NOTIFY in mask and bool(attrs.get("en_sqd_async_notify"))
        was = qp.state
        if self.pair.fault == "qp_rights_ignored" and Attr.ACCESS_FLAGS in mask:
            full = self.pair.values(self.side)["qp_access_flags"]  # the bring-up's rights
            attrs = {**attrs, "qp_access_flags": full}
        exp = model.modify(self.side, attrs, mask)
        ok = exp.outcome is not Outcome.REFUSE and not self._reads_cur_state(attrs, mask)
        model.apply(self.side, exp, ok)
        if not ok:
            return VerbResult(False, 22, "refused by the fake")
        kept = {"sqe_keeps_own_wrs": QPState.SQE, "sqd_keeps_own_wrs": QPState.SQD}
        if was == QPState.RTS and kept.get(str(self.pair.fault)) == exp.state_if_accepted:
            exp = dataclasses.replace(exp, completions=())
        self.pair.emit(self.side, exp)
        nxt = QPState(attrs["qp_state"]) if Attr.STATE in mask else was
        self._bent_shared_cq(was, exp.state_if_accepted)
        fault = self.pair.fault
        if was == QPState.SQD and nxt == QPState.RTS:
            if str(fault).startswith("sqd_rts_no_resume"):  # held until the next doorbell
                model.qp(self.side).queues.hold(sorted(held))
                self.waiting = set(held)
            else:
                self.pair.resumed |= held
        if nxt == QPState.RESET and (
            fault == "stale_sq_after_any_reset"
            or (fault == "stale_sq_after_sqd_reset" and was == QPState.SQD and held)
        ):
            self.stale = True
        if str(fault).startswith("stale_sq_drain_never_ends") and nxt == QPState.RESET and (
            before_sends
        ):
            self.stale_drain = True
        if was == QPState.RTS and nxt == QPState.SQD and self.stale_drain:
            self.async_events = [e for e in self.async_events if e != EventType.SQ_DRAINED]
            qp.draining = True  # the fake drains for good: it reports sq_draining = 1
        if fault == "drain_early" and was == QPState.RTS and nxt == QPState.SQD and qp.draining:
            self.async_events.append(EventType.SQ_DRAINED)
        if fault == "event_unasked" and was == QPState.RTS and nxt == QPState.SQD and not notify:
            self.async_events.append(EventType.SQ_DRAINED)
        if fault == "run_after_reset" and nxt == QPState.RESET:
            self.pair.zombies[self.side] += [(w, "send") for w in before_sends]
            self.pair.zombies[self.side] += [(w, "recv") for w in before_recvs]
        self.pair.run_wire()
        return VerbResult(True)

    def _reads_cur_state(self, attrs: Mapping[str, int], mask: Attr) -> bool:
        """cur_state_from_unmasked: would taking cur_qp_state (outside the mask) as the
        current state refuse this move?"""
        if self.pair.fault != "cur_state_from_unmasked" or Attr.CUR_STATE in mask:
            return False
        cur, state = attrs.get("cur_qp_state"), self.pair.model.qp(self.side).state
        if cur is None or cur == state or cur > QPState.ERR or Attr.STATE not in mask:
            return False
        nxt = QPState(attrs["qp_state"])
        return LINUX.table.lookup(self.pair.qp_type, QPState(cur), nxt) is None

    def _bent_shared_cq(self, was: QPState, now: QPState) -> None:
        """SHARED_CQ_FAULTS at a modify: entering ERR flushes the bystander's WRs too; a
        RESET cleans the bystander's (or, the near miss, its own) entries off the CQ."""
        by, fault = self.bystander, self.pair.fault
        if by is None:
            return
        if fault == "flush_touches_bystander" and now == QPState.ERR != was:
            flush = WCStatus.WR_FLUSH_ERR
            self.cq += [Completion(w, "recv", flush, by.qp_num) for w in by.model.queues.recvs]
        if now == QPState.RESET:
            gone = {"reset_cleans_bystander": by.qp_num, "reset_cleans_own": self.qp_num}
            if fault in gone:
                self.cq = [c for c in self.cq if c.qp_num != gone[str(fault)]]

    def query(self) -> QueryResult:
        """The fake's state and sq_draining."""
        if self.side in self.pair.stuck:
            return QueryResult(QPState.RTS, None)
        qp = self.pair.model.qp(self.side)
        if qp.state != QPState.SQD:
            return QueryResult(qp.state, None)
        draining = {"drain_early": False, "drain_never_ends": True}.get(
            str(self.pair.fault), qp.draining
        )
        return QueryResult(qp.state, draining)

    def post_send(
        self, wr_id: int, op: Op, fault: Fault, signaled: bool = True, inline: bool = False,
        fence: bool = False, unused: Mapping[str, int] | None = None,
    ) -> VerbResult:
        """Post through the fake's model (`unused` ignored, but by imm_from_unused)."""
        imm = (unused or {}).get("imm_data")
        if imm and self.pair.fault == "imm_from_unused" and not op.carries_imm:
            self.pair.leaked_imm[wr_id] = imm
        if self.pair.fault == "read_beyond_depth_fails" and self.pair.model.burst is None:
            self.pair.model.burst = {}  # READs since the last poll: outstanding together
        if fault is Fault.MISALIGNED and self.pair.fault == "misaligned_atomic_executes":
            fault = Fault.NONE
        if fault is Fault.BAD_QKEY and self.pair.fault == "qkey_ignored":
            fault = Fault.NONE  # delivered as if its Q_Key were the peer's
        if fault is Fault.NO_RIGHT and op is Op.RDMA_WRITE and (
            self.pair.fault == "write_without_right"
        ):  # the responder skips the rights check: the WRITE lands in the MR without them
            self.pair.redirect[wr_id] = access.window_of(op, fault)
            fault = Fault.GRANTED
        if _LOCAL_UNCHECKED.get(str(self.pair.fault)) is fault:  # the SGE goes unchecked
            fault = Fault.GRANTED if op in access.TARGETED_OPS else Fault.NONE
        exp = self.pair.model.post_send(self.side, wr_id, op, fault, signaled, inline, fence)
        if self.pair.fault in OPS_EXTRA_FAULTS and self._post_extra(exp):
            return VerbResult(True)
        if fault is Fault.MISALIGNED and self.pair.fault == "misaligned_atomic_refused" and (
            exp.outcome is Outcome.EITHER
        ):
            self.pair.model.apply(self.side, exp, False)
            return VerbResult(False, 22, "EINVAL: remote_addr & 7")
        qp = self.pair.model.qp(self.side)
        if self.stale and qp.state == QPState.RTS:  # a zeroed slot runs first: ERR, all flushed
            self.stale = False
            qp.apply(exp, True)
            for c in qp.follow(QPState.ERR):
                self.cq.append(_wc(c, self.qp_num))
            return VerbResult(True)
        return self._post(exp)

    def _post_extra(self, exp: Expectation) -> bool:
        """inline_over_cap_accepted: a post the model refuses for its inline length is
        accepted (and would run). True when the post is done so."""
        if self.pair.fault != "inline_over_cap_accepted" or exp.rule.id != "pair.inline.over_cap":
            return False
        self.pair.model.apply(self.side, exp, True)
        return True

    def post_recv(
        self, wr_id: int, short: bool = False, bad_lkey: bool = False, isolated: bool = False,
        read_only: bool = False,
    ) -> VerbResult:
        """Post through the fake's model (recv_in_closing_*: bent in SQD and SQE;
        short_recv_succeeds: a short receive is as long as any; recv_bad_lkey_succeeds: a
        bad key is as good as any; srq_qp_post_recv_*: a post on an SRQ's QP kills the
        process, `isolated` or not, or is accepted and never completes)."""
        short = short and self.pair.fault != "short_recv_succeeds"
        bad_lkey = bad_lkey and self.pair.fault != "recv_bad_lkey_succeeds"
        read_only = read_only and self.pair.fault != "recv_write_unchecked"
        exp = self.pair.model.post_recv(self.side, wr_id, short, bad_lkey, read_only)
        if self.side in self.pair.model.srq_sides and self.pair.fault == "srq_qp_post_recv_kills":
            return VerbResult(False, None, "killed by SIGFPE", killed="SIGFPE")
        if self.side in self.pair.model.srq_sides and self.pair.fault == (
            "srq_qp_post_recv_accepted"
        ):
            return VerbResult(True)
        closing = self.pair.model.qp(self.side).state in (QPState.SQD, QPState.SQE)
        if not (closing and exp.completions and str(self.pair.fault).startswith("recv_in_clos")):
            return self._post(exp)
        self.pair.model.apply(self.side, exp, True)  # accepted: the user ring took it
        if self.pair.fault == "recv_in_closing_wrong_status":
            flushed = exp.completions[0]
            self.cq.append(Completion(flushed.wr_id, "recv", WCStatus.SUCCESS, self.qp_num))
        return VerbResult(True)  # recv_in_closing_unflushed: never completes

    def targets(self) -> dict[str, bytes]:
        """The bytes of this end's target MRs (every one: the fake registers them all)."""
        return {name: bytes(self.pair.target(self.side, name)) for name in access.TARGETS}

    def post_srq_recv(self, wr_id: int) -> VerbResult:
        """Post to the end's SRQ through the fake's model."""
        return self._post(self.pair.model.post_srq_recv(self.side, wr_id))

    def srq_created(self) -> SrqCreated | None:
        """What the fake's create_srq wrote back (tests/fake_srq.py)."""
        return self.srq_sizes.created()

    def query_srq(self) -> dict[str, int] | None:
        """query_srq of the end's fake SRQ."""
        return self.srq_sizes.query()

    def resize_srq(self, max_wr: int) -> VerbResult:
        """modify_srq(IBV_SRQ_MAX_WR) of the end's fake SRQ."""
        return self.srq_sizes.resize(max_wr)

    def arm_srq(self, limit: int, max_wr: int | None = None) -> VerbResult:
        """Arm the end's SRQ limit through the fake's model (max_wr, outside the mask, is
        ignored as it must be)."""
        return self._post(self.pair.model.arm_srq(self.side, limit))

    def _post(self, exp: Expectation) -> VerbResult:
        ok = exp.outcome is not Outcome.REFUSE
        self.pair.model.apply(self.side, exp, ok)
        if ok:
            self.pair.emit(self.side, exp)
            if exp.verb == "post_send" and self.waiting:
                self._doorbell()
            self.pair.run_wire()
        return VerbResult(ok, None if ok else 22)

    def _doorbell(self) -> None:
        """sqd_rts_no_resume*: the post's doorbell starts the held sends (rxe); the near
        misses then give them a wrong status, or lose them."""
        started = self.pair.model.doorbell(self.side)
        if not started:
            return
        waiting, self.waiting = self.waiting, set()
        if self.pair.fault == "sqd_rts_no_resume_then_bad_status":
            self.pair.resumed |= waiting  # _bent gives a resumed send LOC_QP_OP_ERR
        elif self.pair.fault == "sqd_rts_no_resume_then_stays_rts":
            self.pair.stuck_in_rts.add(self.side)  # its error completes, the QP stays RTS
        elif self.pair.fault == "sqd_rts_no_resume_then_lost":
            self.pair.model.qp(self.side).queues.hold(sorted(waiting))  # never run, never complete

    def poll(self) -> list[Completion]:
        """Everything queued on both CQs (and any zombie WR planted to run after RESET)."""
        zombies = self.pair.zombies[self.side]
        if zombies and self.pair.model.qp(self.side).state == QPState.RTS:
            self.cq += [Completion(w, q, WCStatus.SUCCESS, self.qp_num) for w, q in zombies]
            zombies.clear()
        now = time.monotonic()
        self.cq += [c for when, c in self.delayed if when <= now]
        self.delayed = [(when, c) for when, c in self.delayed if when > now]
        out, self.cq = self.cq, []
        by = self.bystander
        if by is not None and self.pair.fault == "bystander_wrong_qp_num":
            out = [dataclasses.replace(c, qp_num=self.qp_num) if c.qp_num == by.qp_num else c
                   for c in out]
        if by is not None and self.pair.fault == "end_as_bystander_qp_num":
            out = [dataclasses.replace(c, qp_num=by.qp_num) if c.qp_num == self.qp_num else c
                   for c in out]
        if self.pair.fault == "read_beyond_depth_fails":
            self.pair.model.burst = None  # a poll between READs: not back to back
        return out

    def events(self, timeout: float) -> list[AsyncEvent]:
        """Queued async events (the fake never blocks)."""
        out = [AsyncEvent(e, self.qp_num) for e in self.async_events]
        self.async_events = []
        return out

    def destroy(self) -> None:
        """Destroy through the fake's model."""
        if not self.closed:
            exp = self.pair.model.destroy(self.side)
            self.pair.model.apply(self.side, exp, True)
            self.closed = True
            if self.pair.iwarp:  # the connection ends with the QP
                self.pair.run_wire()


class FakeBystander:
    """A fake QP on an end's CQs (engine.device.Bystander): it runs its own QPModel and
    queues its completions on the end's CQ, naming its own qp_num."""

    def __init__(self, end: FakeEnd, qp_num: int) -> None:
        self.end, self.qp_num = end, qp_num
        self.model = QPModel(end.pair.qp_type, "iwarp" if end.pair.iwarp else "linux")

    def modify(self, attrs: Mapping[str, int], mask: Attr) -> VerbResult:
        """Accept or refuse as the model says."""
        return self._do(self.model.modify(attrs, mask))

    def query(self) -> QueryResult:
        """The bystander's state."""
        return QueryResult(self.model.state, None)

    def post_send(self, wr_id: int) -> VerbResult:
        """Post through the model (in ERR: flushed)."""
        return self._do(self.model.post_send(wr_id))

    def post_recv(self, wr_id: int) -> VerbResult:
        """Post through the model."""
        return self._do(self.model.post_recv(wr_id))

    def _do(self, exp: Expectation) -> VerbResult:
        ok = exp.outcome is not Outcome.REFUSE
        self.model.apply(exp, ok)
        if ok:
            self.end.cq += [_wc(c, self.qp_num) for c in exp.completions]
        return VerbResult(ok, None if ok else 22)

    def poll(self) -> list[Completion]:
        """Nothing: the end's poll carries both QPs' completions."""
        return []

    def events(self, timeout: float) -> list[AsyncEvent]:
        """Nothing: a bystander moved by modify raises no event."""
        return []


class FakePair:
    """Two fake QPs of one type; `fault` plants one of FAULTS."""

    def __init__(
        self,
        qp_type: QPType,
        fault: str | None = None,
        settings: WireSettings = FAST,
        kernel: str = "none",
        iwarp: bool = False,
        atomics: bool = True,
        srq_sides: frozenset[str] = frozenset(),
        shared_cq_sides: frozenset[str] = frozenset(),
    ) -> None:
        known = (*IWARP_FAULTS, "fence_ignored") if iwarp else (
            *FAULTS, *OPS_EXTRA_FAULTS, *FENCE_RECV_FAULTS, *RECV_BAD_LKEY_FAULTS,
            *WC_FIELD_FAULTS,
        )
        known = (*known, *SHARED_CQ_FAULTS, *SRQ_QP_FAULTS, *ACCESS_FAULTS, *UNUSED_WR_FAULTS,
                 *OUTSIDE_MASK_FAULTS, *TOO_LONG_INLINE_FAULTS, *QKEY_FAULTS,
                 *SRQ_SIZE_FAULTS, *LOCAL_FAULTS)
        if fault is not None and fault not in known:
            raise ValueError(f"unknown planted fault {fault!r}")
        self.iwarp = iwarp
        self.atomics = atomics and not iwarp
        self.stuck: set[str] = set()  # ends that report RTS whatever happened (close_not_seen)
        self.qp_type = QPType(qp_type)
        self.fault = fault
        self.settings = settings
        self.identity = {"device": "fake", "fault": fault or "none", "kernel": kernel,
                         "srq_resize": "yes"}
        self.resumed: set[int] = set()  # sends SQD->RTS started
        self.stuck_in_rts: set[str] = set()  # sqd_rts_no_resume_then_stays_rts
        self.srq_sides = frozenset(srq_sides)
        self.shared_cq_sides = frozenset(shared_cq_sides)
        self.model: PairModel = (
            IwarpPairModel(self.qp_type, settings, self.srq_sides) if iwarp
            else PairModel(self.qp_type, settings=settings, srq_sides=self.srq_sides)
        )
        self.model.too_long = TOO_LONG_ERROR if fault in _TOO_LONG_AS_ERROR else TOO_LONG_DROPPED
        self._qpn = 100
        self.ends = {s: self._new_end(s) for s in ("a", "b")}
        self.zombies: dict[str, list[tuple[int, str]]] = {"a": [], "b": []}
        self.memory: dict[tuple[str, str], bytearray] = {}  # the ends' target MRs
        self.redirect: dict[int, access.Window] = {}  # write_without_right: where it lands
        self.leaked_imm: dict[int, int] = {}  # imm_from_unused: send wr_id -> imm received
        self.received = 0  # successful UD receives so far (ud_byte_len_flips)
        self.refusals = 0  # refusals by a QP's access flags so far (qp_rights_inconsistent)

    def _new_end(self, side: str) -> FakeEnd:
        self._qpn += 1
        end = FakeEnd(self, side, self._qpn)
        if side in self.shared_cq_sides:
            self._qpn += 1
            end.bystander = FakeBystander(end, self._qpn)
        return end

    def end(self, side: str) -> FakeEnd:
        """The end on `side`."""
        return self.ends[side]

    def values(self, side: str) -> dict[str, int]:
        """Valid connect attributes (the fake checks nothing beyond the model)."""
        peer = self.ends["b" if side == "a" else "a"]
        return connect_values(self.qp_type, 1, 0, 3, peer.qp_num, self.settings)

    def recreate(self, side: str) -> None:
        """A fresh fake QP in RESET."""
        self.ends[side] = self._new_end(side)
        self.model.recreate(side)
        self.stuck.discard(side)
        for key in [k for k in self.memory if k[0] == side]:
            del self.memory[key]

    def establish(self) -> None:
        """iWARP: the fake connection manager connects the two idle ends (both RTS)."""
        assert isinstance(self.model, IwarpPairModel)
        for step in self.model.establish():
            for side, exp in step.effects:
                self.emit(side, exp)

    def close(self) -> None:
        """Nothing to release."""

    def target(self, side: str, name: str) -> bytearray:
        """`side`'s target MR `name`, filled with its guard pattern when first seen."""
        return self.memory.setdefault((side, name), bytearray(access.fill(name)))

    def place(self, step: WireStep) -> None:
        """The bytes a wire step placed in a target MR, the planted fault's way."""
        for side, window, data in step.placed:
            if self.fault == "write_lost":
                continue
            window = self.redirect.pop(step.wr_id, window)
            mem = self.target(side, window.target)
            end = window.offset + len(data)
            mem[window.offset:end] = data
            if self.fault == "write_one_past" and end < access.TARGET_LEN:
                mem[end] = _STRAY

    # ------------------------------------------------------------------ behaviour
    def emit(self, side: str, exp: Expectation) -> None:
        """Queue exp's completions and events on `side`, bent by the planted fault."""
        end = self.ends[side]
        done = list(exp.completions)
        flushes = [c for c in done if c.status == WCStatus.WR_FLUSH_ERR]
        if exp.verb == "modify" and len(flushes) >= 2:
            if self.fault in ("lost_flush", "stale_sq_drain_never_ends_lost_flush"):
                done.remove(flushes[-1])
            elif self.fault == "flush_out_of_order":
                same_q = [c for c in flushes if c.queue == flushes[0].queue]
                if len(same_q) >= 2:
                    i, j = done.index(same_q[0]), done.index(same_q[1])
                    done[i], done[j] = done[j], done[i]
        done = [self._bent_fields(c) for c in done if not self._lost_unsignaled(exp, c)]
        if self.fault == "unsignaled_completes":
            done += [ExpectedCompletion(w, "send", WCStatus.SUCCESS) for w in exp.silent]
        if self.fault == "cq_overrun" and len(end.cq) + len(done) > CQ_ROOM:
            done = done[: max(0, CQ_ROOM - len(end.cq))]
            end.async_events.append(EventType.CQ_ERR)
        for c in done:
            end.cq.append(self._bent_wc(side, c, _wc(c, end.qp_num)))
            if self.fault == "duplicate_completion" and c.status == WCStatus.SUCCESS:
                end.cq.append(_wc(c, end.qp_num))
        if self.fault in ("comm_est_first_packet", "comm_est_twice"):
            times = 2 if self.fault == "comm_est_twice" else 1
            end.async_events.extend(e for e in exp.allowed_events for _ in range(times))
        self._bent_srq(side, exp)
        for e in exp.events:
            if self.fault == "event_missing" and e == EventType.SQ_DRAINED:
                continue
            if self.fault == "last_wqe_missing" and e == EventType.QP_LAST_WQE_REACHED:
                continue
            if self.fault == "srq_limit_missing" and e == EventType.SRQ_LIMIT_REACHED:
                continue
            if self.fault == "srq_limit_twice" and e == EventType.SRQ_LIMIT_REACHED:
                end.async_events.append(e)  # the limit was not disarmed: the next take too
            if e == EventType.QP_ACCESS_ERR and self.fault == "no_access_err_event":
                continue
            if e == EventType.QP_ACCESS_ERR and self.fault == "access_err_as_fatal":
                e = EventType.QP_FATAL
            end.async_events.append(e)

    def _bent_wc(self, side: str, c: ExpectedCompletion, wc: Completion) -> Completion:
        """A successful receive's src_qp (UD: the sender's QP number), then its byte_len
        and wc_flags the planted fault's way (WC_FIELD_FAULTS)."""
        if wc.queue != "recv" or wc.status != WCStatus.SUCCESS:
            return wc
        if self.qp_type is QPType.UD and not self.iwarp:
            sender = self.ends["b" if side == "a" else "a"].qp_num
            wc = dataclasses.replace(
                wc, src_qp=wc.qp_num if self.fault == "src_qp_is_receiver" else sender)
        fault, flags = self.fault, wc.wc_flags or 0
        if wc.byte_len is not None and c.byte_len is not None:
            allowed = c.byte_len[0]
            if fault == "byte_len_one_more":
                wc = dataclasses.replace(wc, byte_len=max(allowed) + 1)
            elif fault == "ud_byte_len_without_grh" and self.qp_type is QPType.UD:
                wc = dataclasses.replace(wc, byte_len=MESSAGE_LEN)
            elif fault == "ud_byte_len_flips" and self.qp_type is QPType.UD:
                self.received += 1
                if self.received % 2 == 0:
                    wc = dataclasses.replace(wc, byte_len=MESSAGE_LEN)
            elif fault == "write_imm_byte_len_zero" and wc.opcode == WCOpcode.RECV_RDMA_WITH_IMM:
                wc = dataclasses.replace(wc, byte_len=0)
        if fault == "imm_flag_clear" and wc.imm_data is not None:
            wc = dataclasses.replace(wc, wc_flags=flags & ~WC_WITH_IMM)  # imm_data kept
        if fault == "imm_flag_unasked" and wc.imm_data is None:
            wc = dataclasses.replace(wc, wc_flags=flags | WC_WITH_IMM)
        return wc

    def _bent_srq(self, side: str, exp: Expectation) -> None:
        """srq_recv_flushed: an SRQ's QP entering ERR flushes the SRQ's receives as if they
        were its own; last_wqe_without_srq: a QP without one raises Last WQE Reached."""
        entered_err = exp.state_if_accepted == QPState.ERR != exp.state_before
        if not entered_err or exp.verb.startswith("post"):
            return
        end, srq = self.ends[side], self.model.qp(side).srq
        if self.fault == "srq_recv_flushed" and srq is not None:
            end.cq += [Completion(w, "recv", WCStatus.WR_FLUSH_ERR, end.qp_num) for w in srq.recvs]
        if self.fault == "last_wqe_without_srq" and srq is None:
            end.async_events.append(EventType.QP_LAST_WQE_REACHED)

    def _lost_unsignaled(self, exp: Expectation, c: ExpectedCompletion) -> bool:
        """unsignaled_*_lost: the first unsignaled flush, or error, that goes missing;
        too_long_error_recv_lost: a too-long UC/UD message's LOC_LEN_ERR receive."""
        if self.fault == "too_long_error_recv_lost" and self.qp_type is not QPType.RC and (
            c.queue == "recv" and c.status == WCStatus.LOC_LEN_ERR
        ):
            return True
        if c.signaled or c.status == WCStatus.SUCCESS:
            return False
        flush = c.status == WCStatus.WR_FLUSH_ERR
        return self.fault == ("unsignaled_flush_lost" if flush else "unsignaled_error_lost")

    def _bent_fields(self, c: ExpectedCompletion) -> ExpectedCompletion:
        """A completion's opcode, immediate data, data or status, the planted fault's way."""
        if c.queue == "recv" and c.status == WCStatus.LOC_LEN_ERR and (
            self.fault == "too_long_succeeds" and self.qp_type is not QPType.RC
        ):  # the message truncated into the receive, which "succeeds"
            return dataclasses.replace(c, status=WCStatus.SUCCESS, opcode=WCOpcode.RECV)
        if c.queue == "recv" and c.status == WCStatus.LOC_LEN_ERR and (
            self.fault == "too_long_as_malformed_wqe" and self.qp_type is not QPType.RC
        ):
            return dataclasses.replace(c, status=WCStatus.LOC_QP_OP_ERR)
        if c.queue == "recv" and c.status == WCStatus.LOC_LEN_ERR:
            status = _RECV_LEN_STATUS.get(str(self.fault), (None, None))[0]
            return dataclasses.replace(c, status=status or c.status)
        if c.queue == "recv" and c.status == WCStatus.LOC_PROT_ERR:
            status = _RECV_BAD_LKEY_STATUS.get(str(self.fault), (None, None))[0]
            return dataclasses.replace(c, status=status or c.status)
        if c.status != WCStatus.SUCCESS:
            return c
        if self.fault == "inline_wrong_bytes" and c.data == SINK_PAYLOAD:
            return dataclasses.replace(c, data="other")  # not the bytes it was posted with
        if self.fault == "fence_ignored" and c.data not in (None, SINK_PAYLOAD):
            return dataclasses.replace(c, data=SINK_STALE)  # what the sink held before
        if self.fault == "read_as_write" and c.opcode == WCOpcode.RDMA_READ:
            return dataclasses.replace(c, opcode=WCOpcode.RDMA_WRITE)
        if self.fault == "atomic_as_read" and c.opcode in (WCOpcode.COMP_SWAP, WCOpcode.FETCH_ADD):
            return dataclasses.replace(c, opcode=WCOpcode.RDMA_READ)
        if self.fault == "write_imm_as_recv" and c.opcode == WCOpcode.RECV_RDMA_WITH_IMM:
            return dataclasses.replace(c, opcode=WCOpcode.RECV)
        if self.fault == "imm_lost" and c.imm_data is not None:
            return dataclasses.replace(c, imm_data=None)
        return c

    def run_wire(self) -> None:
        """Let the wire finish every send it can (the fake is instantaneous)."""
        for step in self.model.progress():
            self.place(step)
            if self.iwarp and self._bent_iwarp(step):
                continue
            resumed = step.wr_id in self.resumed
            self.resumed.discard(step.wr_id)
            for side, exp in step.effects:
                if side == step.requester:
                    exp = self._bent(step.rule.id, resumed, exp)
                elif step.wr_id in self.leaked_imm:
                    exp = self._leak_imm(exp, self.leaked_imm[step.wr_id])
                end = self.ends[side]
                queued = len(end.cq)
                self.emit(side, exp)
                if self.fault == "late_timer" and step.rule is RC_RETRY_EXHAUSTED:
                    due = time.monotonic() + TIMER_DELAY
                    end.delayed += [(due, c) for c in end.cq[queued:]]
                    del end.cq[queued:]
                self._after_send_error(side, exp)
            self._bent_too_long(step)
            if self.fault == "event_on_completion_error":
                for side in step.forbidden:  # the sides whose send completed in error
                    self.ends[side].async_events.append(EventType.QP_FATAL)

    @staticmethod
    def _leak_imm(exp: Expectation, imm: int) -> Expectation:
        """imm_from_unused: the receive a SEND without immediate completes carries the
        imm_data its WR held anyway."""
        done = tuple(
            dataclasses.replace(c, imm_data=imm)
            if c.queue == "recv" and c.status == WCStatus.SUCCESS and c.imm_data is None else c
            for c in exp.completions
        )
        return dataclasses.replace(exp, completions=done)

    def _bent_too_long(self, step: WireStep) -> None:
        """After a too-long UC/UD message: too_long_error_stays_rts leaves the responder in
        RTS; too_long_inconsistent completes the next one in error."""
        if step.rule is not UNRELIABLE_RECV_TOO_SHORT:
            return
        peer = self.model.peer_of(step.requester)
        if self.fault == "too_long_error_stays_rts":
            self.model.qp(peer).follow(QPState.RTS)
        if self.fault == "too_long_error_fatal":
            self.ends[peer].async_events.append(EventType.QP_FATAL)
        if self.fault == "too_long_inconsistent":
            self.model.too_long = TOO_LONG_ERROR

    def _bent_iwarp(self, step: WireStep) -> bool:
        """Play an iWARP wire step the planted fault's way; True when it is done so."""
        if self.fault == "close_not_seen" and step.rule is LLP_CLOSED:
            self.stuck.add(step.requester)  # reports RTS; flushes nothing
            return True
        if self.fault == "close_without_flush" and step.rule is LLP_CLOSED:
            for side, exp in step.effects:
                self.emit(side, dataclasses.replace(exp, completions=()))
            return True
        if self.fault in ("siw_bad_lkey", "bad_lkey_to_sqe") and step.rule is BAD_LKEY:
            req = self.ends[step.requester]
            first = step.effects[-1][1].completions[0]
            req.cq.append(Completion(first.wr_id, "send", WCStatus.LOC_QP_OP_ERR, req.qp_num))
            req.async_events.append(EventType.QP_FATAL)
            stays = QPState.RTS if self.fault == "siw_bad_lkey" else QPState.SQE
            self.model.qp(step.requester).follow(stays)
            return True
        if self.fault == "no_terminate" and step.rule is NO_RECEIVE:
            self.stuck.update(("a", "b"))  # the SEND waits: nothing completes, both stay RTS
            return True
        return False

    def _bent(self, rule_id: str, resumed: bool, exp: Expectation) -> Expectation:
        """The requester's completion with the status a planted fault gives it."""
        status = None
        if rule_id == "pair.bad_lkey":
            status = _BAD_LKEY_STATUS.get(str(self.fault))
        elif rule_id == "pair.local.bounds" and self.fault == "local_bounds_loc_len_err":
            status = WCStatus.LOC_LEN_ERR
        elif rule_id in ("pair.local.bounds", "pair.local.pd"):
            status = _LOCAL_STATUS.get(str(self.fault))
        elif rule_id == "pair.rc.recv_too_short":
            status = _RECV_LEN_STATUS.get(str(self.fault), (None, None))[1]
        elif rule_id == UNRELIABLE_RECV_TOO_SHORT.id and self.fault == "too_long_requester_error":
            status = WCStatus.LOC_LEN_ERR
        elif rule_id == access.RC_QP_RIGHTS.id:
            status = _QP_RIGHTS_STATUS.get(str(self.fault))
            if self.fault == "qp_rights_inconsistent":
                self.refusals += 1
                status = access.QP_RIGHTS_STATUSES[self.refusals % 2]
        elif rule_id == "pair.rc.recv_bad_lkey":
            status = _RECV_BAD_LKEY_STATUS.get(str(self.fault), (None, None))[1]
        elif self.fault in OPS_EXTRA_FAULTS:
            status = self._bent_extra(rule_id)
        elif resumed and self.fault in (
            "sqd_rts_resume_bad_status", "sqd_rts_no_resume_then_bad_status"
        ):
            status = WCStatus.LOC_QP_OP_ERR
        if status is None or not exp.completions:
            return exp
        first = exp.completions[0]
        bent = ExpectedCompletion(first.wr_id, first.queue, status)
        return dataclasses.replace(exp, completions=(bent, *exp.completions[1:]))

    def _bent_extra(self, rule_id: str) -> WCStatus | None:
        """The requester's status under an OPS_EXTRA_FAULTS fault (None: unbent)."""
        bent = {
            ("inline_fails", "pair.inline.delivered"): WCStatus.LOC_LEN_ERR,
            ("op_not_of_type_succeeds", "pair.op.not_of_type"): WCStatus.SUCCESS,
            ("op_not_of_type_flush", "pair.op.not_of_type"): WCStatus.WR_FLUSH_ERR,
            ("read_beyond_depth_fails", "pair.read.initiator_depth"): WCStatus.REM_INV_REQ_ERR,
        }
        return bent.get((str(self.fault), rule_id))

    def _after_send_error(self, side: str, exp: Expectation) -> None:
        """send_error_*: a UD/UC QP that the error took to SQE goes to ERR, or stays RTS;
        sqd_rts_no_resume_then_stays_rts: any QP a send error moved stays RTS."""
        qp = self.model.qp(side)
        if side in self.stuck_in_rts and exp.rule.id in ("ibta.sqe.enter", "ibta.err.send_error"):
            self.stuck_in_rts.discard(side)
            qp.follow(QPState.RTS)
            return
        if exp.rule.id != "ibta.sqe.enter":
            return
        if self.fault == "send_error_to_err":
            for c in qp.follow(QPState.ERR):
                self.ends[side].cq.append(_wc(c, self.ends[side].qp_num))
        elif self.fault == "send_error_stays_rts":
            qp.follow(QPState.RTS)


def _wc(c: ExpectedCompletion, qp_num: int) -> Completion:
    """The completion a device delivers for `c` (opcode and immediate data when it succeeded;
    an error completion's are undefined, and a device leaves them so)."""
    if c.status != WCStatus.SUCCESS:
        return Completion(c.wr_id, c.queue, c.status, qp_num)
    opcode = c.opcode if c.opcode is not None else _DEFAULT_OPCODE[c.queue]
    # byte_len: the largest the model allows (a UD receive's with the 40 GRH bytes, as rxe)
    byte_len = None if c.byte_len is None else max(c.byte_len[0])
    flags = WC_WITH_IMM if c.imm_data is not None else 0
    return Completion(c.wr_id, c.queue, c.status, qp_num, opcode, c.imm_data, c.data,
                      byte_len=byte_len, wc_flags=flags)


#: The opcode of a completion the model names none for (a lone QP's SEND, its receive).
_DEFAULT_OPCODE = {"send": WCOpcode.SEND, "recv": WCOpcode.RECV}


def connected_model(qp_type: QPType = QPType.RC) -> PairModel:
    """A PairModel of `qp_type` with both ends brought to RTS: model-only tests start here."""
    m = PairModel(qp_type)
    for side in ("a", "b"):
        for state in (QPState.INIT, QPState.RTR, QPState.RTS):
            m.apply(side, m.modify(side, {"qp_state": int(state)}, 1), True)
    return m


def connected_fake(
    qp_type: QPType, fault: str | None = None, srq_sides: frozenset[str] = frozenset(),
    shared_cq_sides: frozenset[str] = frozenset(), iwarp: bool = False,
) -> PairHarness:
    """A harness over a fake pair of `qp_type` (planting `fault`; the `srq_sides` ends with
    an SRQ, the `shared_cq_sides` ends with a bystander on their CQs; `iwarp`: an iWARP
    pair under the iwarp variant), both ends in RTS."""
    fake = FakePair(qp_type, fault, srq_sides=srq_sides, shared_cq_sides=shared_cq_sides,
                    iwarp=iwarp)
    h = PairHarness(fake, sink=None, time_scale=0.01, variant="iwarp" if iwarp else "linux")
    h.lifecycle.connect()
    return h


def known_after(qp_type: QPType, scenario: Callable[[PairHarness], None]) -> list[Divergence]:
    """The known divergences `scenario` leaves on a clean connected fake of `qp_type` once its
    quiet window has passed (a clean fake must leave none)."""
    h = connected_fake(qp_type)
    scenario(h)
    h.quiet(0.01)
    return h.known


def scenario_divergence(h: PairHarness, scenario: Callable[[PairHarness], None]) -> Divergence:
    """The divergence `scenario` on a faulted fake pair raises, its closing quiet window and
    the harness's finish included; the test fails when it raises none."""
    with pytest.raises(DivergenceError) as caught:
        scenario(h)
        h.quiet(0.01)
        h.finish()
    return caught.value.record


def machine_divergence(
    machine: type[RuleBasedStateMachine], max_examples: int = 300, from_seed: int = 0
) -> Divergence:
    """The divergence a traffic machine over a faulted fake pair raises, from a fixed seed
    (300 examples of 30 steps, no example database: a derandomized exploration would move
    with every unrelated edit); the test fails when it finds none."""
    planted = seed(from_seed)(machine)
    planted.TestCase.settings = settings(
        max_examples=max_examples, stateful_step_count=30, deadline=None, database=None,
        derandomize=False, report_multiple_bugs=False, **PLANTED_RUN,
    )
    with pytest.raises(DivergenceError) as caught:
        planted.TestCase().runTest()
    return caught.value.record
