"""A fake Device for the self-tests, built on the model itself, with faults to plant.

Each fake QP holds a QPModel that decides every verb and applies it, so the
clean fake agrees with the checker by construction; a planted fault (chosen by
name) makes it diverge the way a buggy driver would. Completions and events go
to per-QP fake queues, at once, or `delay` seconds after the first poll that could
have seen them (a device that delivers asynchronously: what the engine's quiet
windows are for).

A `Behaviour` stands for a driver's own code (tests/driver_fakes.py: one per NIC driver,
written from its source): it is asked first about every modify and post and may answer
in the driver's place (`Verdict`); where it says nothing the model decides, as for the
plain fake. It also sees every accepted modify (the driver's private state) and the
events the QP would raise.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from models.attributes import DeviceCaps
from models.enums import MTU, Attr, EventType, QPState, QPType, WCStatus
from models.outcomes import Expectation, ExpectedCompletion, Outcome
from models.qp import QPModel
from qpconform.engine.device import (
    AsyncEvent,
    AttrValues,
    Completion,
    Created,
    QueryResult,
    UnsupportedQPType,
    VerbResult,
)

S = QPState

#: How many unpolled completions cq_overrun's CQ holds.
CQ_ROOM = 2
#: Planted faults, each a bug a real driver could have.
FAULTS: dict[str, str] = {
    "accept_illegal_transition": "an invalid transition to RTS (e.g. INIT->RTS) is accepted",
    "skip_required_bit_check": "a modify missing a required mask bit is accepted",
    "misreport_state": "query reports INIT while the QP is in RTR",
    "run_failed_post": "a refused post_send is kept and runs (completes) later",
    "lost_flush": "one flush completion is missing when the QP enters ERR",
    "flush_out_of_order": "the first two flushes of a queue complete swapped",
    "duplicate_completion": "the first completion of a batch is delivered twice",
    "event_not_raised": "SQ_DRAINED is not raised although requested",
    "event_unasked": "SQ_DRAINED is raised although not requested",
    "wr_run_after_reset": "WRs discarded by ->RESET complete (with flush error) afterwards",
    "refuse_sqd_exit": "leaving SQD for RESET or RTS is refused with EINVAL (rxe 6.12 draining)",
    "refuse_sqd_exit_draining": "refuse_sqd_exit, and query reports sq_draining = 1 in SQD "
    "(rxe while its drain runs)",
    "event_in_rts": "SQ_DRAINED is raised on RTR->RTS, by a QP that never drained",
    "error_event_on_err": "a modify into ERR raises QP_FATAL (no modify raises an error event)",
    "sq_drained_twice": "RTS->SQD raises SQ_DRAINED twice",
    "sq_drained_on_sqd_to_sqd": "SQD->SQD raises SQ_DRAINED again (rxe 6.4+)",
    "sq_drained_on_sqd_to_sqd_late": "sq_drained_on_sqd_to_sqd, the event seen only after the "
    "next modify (a loaded host)",
    "failed_post_completes_at_once": "a refused post_send completes at once, with SUCCESS",
    "recv_in_err_unflushed": "a receive posted in ERR is never flushed (rxe user QPs)",
    "recv_in_err_wrong_status": "a receive posted in ERR completes with SUCCESS",
    "accept_out_of_range": "a modify refused only for an attribute value is accepted",
    "accept_out_of_range_no_move": "as accept_out_of_range, but the QP stays in its state",
    "accept_attr_only_modify": "a modify without STATE that the table refuses is accepted",
    "late_duplicate_completion": "the first completion of a batch comes again, LATE s later",
    "store_in_wrong_field": "min_rnr_timer is stored into timeout (query reports it there)",
    "read_unmasked_field": "timeout is taken from the attr struct even when TIMEOUT is not in "
    "the mask",
    "state_from_unmasked_qp_state": "a modify without STATE is table-checked as cur -> "
    "attr.qp_state (qp_state read outside the mask: from INIT with qp_state 0, a legal "
    "attribute-only modify is refused as INIT->RESET with extra bits)",
    "cq_overrun": f"the CQ holds only {CQ_ROOM} unpolled completions (smaller than asked): the "
    "rest are lost and CQ_ERR is raised",
    "err_is_final": "ERR->RESET is accepted and the QP stays in ERR (siw: ERROR is final)",
    "query_err_as_init": "query reports INIT while the QP is in ERR",
    "query_state_unset": "query_qp never sets qp_state, so it reads RESET whatever the state "
    "(siw in Linux 6.1; fixed upstream by 'RDMA/siw: Set qp_state in siw_query_qp')",
    "cap_below_asked": "create_qp writes back a max_send_wr one below what was asked",
    "cqe_below_asked": "create_cq makes the receive CQ one entry smaller than asked",
    "query_cap_differs": "query_qp reports a max_recv_wr one above what create_qp wrote back",
    "query_cap_lower": "query_qp reports a max_send_wr one below what create_qp wrote back",
    "query_inline_below_asked": "query_qp reports a max_inline_data one below what was asked",
    "cur_state_stale": "query_qp's cur_qp_state is the state before the last accepted modify",
}
#: What a fake QP asks of create_qp (ibv_qp_cap) and of create_cq (cqe).
ASKED_CAP: dict[str, int] = {"max_send_wr": 64, "max_recv_wr": 64, "max_send_sge": 1,
                             "max_recv_sge": 1, "max_inline_data": 16}
ASKED_CQE = 64
#: What the fake stores and query_qp reports, per mask bit (a driver's attribute struct).
STORED_FIELDS: dict[Attr, tuple[str, ...]] = {
    Attr.ACCESS_FLAGS: ("qp_access_flags",), Attr.PKEY_INDEX: ("pkey_index",),
    Attr.PORT: ("port_num",), Attr.QKEY: ("qkey",), Attr.PATH_MTU: ("path_mtu",),
    Attr.TIMEOUT: ("timeout",), Attr.RETRY_CNT: ("retry_cnt",), Attr.RNR_RETRY: ("rnr_retry",),
    Attr.RQ_PSN: ("rq_psn",), Attr.SQ_PSN: ("sq_psn",), Attr.MAX_QP_RD_ATOMIC: ("max_rd_atomic",),
    Attr.MAX_DEST_RD_ATOMIC: ("max_dest_rd_atomic",), Attr.MIN_RNR_TIMER: ("min_rnr_timer",),
    Attr.DEST_QPN: ("dest_qp_num",),
}
#: Fake iWARP devices (variant iwarp) where the Linux iWARP drivers differ: "siw-like" names
#: IDLE INIT (siw 6.12, cxgb4), refuses wherever the model lets it (siw's ENOTCONN posts) and
#: stays put where a "may" move lets it; "irdma-like" names each state as asked and accepts.
IWARP_STYLES: dict[str, dict[str, Any]] = {
    "siw-like": {"names": {S.RESET: S.INIT, S.RTR: S.INIT}, "refuse_either": True,
                 "land_elsewhere": True},
    "irdma-like": {},
}
#: siw's caps: no P_Key table (iWARP has no P_Keys), one GID.
SIW_CAPS = DeviceCaps(pkey_tbl_len=0, gid_tbl_len=1)
#: How late late_duplicate_completion delivers its duplicate (seconds).
LATE = 0.03


def _errno_of(exp: Expectation) -> int:
    return min(exp.errnos) if exp.errnos else errno.EINVAL


def _refusal(exp: Expectation, verdict: Verdict | None) -> int:
    """The errno of a refused post: the driver's, else the model's."""
    if verdict is not None and verdict.errno is not None:
        return verdict.errno
    return _errno_of(exp)


@dataclass(frozen=True)
class Verdict:
    """A driver's own answer to a verb (accepted, or refused with errno), given in place
    of the model's; `state`: where an accepted modify leaves the QP (None: as asked)."""

    accepted: bool
    errno: int | None = None
    state: QPState | None = None


ACCEPTED = Verdict(True)


class Behaviour:
    """A driver's own code, consulted by every FakeQP of a device before the model: each
    method returns the driver's Verdict, or None to let the model decide. The base class
    is a driver that does everything as the model says."""

    name = "model"

    def modify(
        self, qp: FakeQP, exp: Expectation, attrs: AttrValues, mask: Attr
    ) -> Verdict | None:
        """modify_qp, after the model's expectation `exp` (not applied yet)."""
        return None

    def post(self, qp: FakeQP, queue: str, exp: Expectation) -> Verdict | None:
        """post_send (queue "send") or post_recv ("recv") of one WR."""
        return None

    def modified(
        self, qp: FakeQP, before: QPState, after: QPState, attrs: AttrValues, mask: Attr
    ) -> None:
        """A modify was accepted (`qp.private` keeps what the driver records per QP)."""

    def events(self, qp: FakeQP, events: list[EventType]) -> list[EventType]:
        """The affiliated events the QP raises, of those the model says it raises."""
        return events


class FakeQP:
    """One fake QP: a QPModel decides, planted faults bend the result."""

    def __init__(self, device: FakeDevice, qp_num: int, qp_type: QPType) -> None:
        self.device = device
        self.qp_num = qp_num
        self.qp_type = QPType(qp_type)
        self.model = QPModel(self.qp_type, device.variant, device.caps)
        self.cq: list[Completion] = []
        self.queued_events: list[AsyncEvent] = []
        self.late_drained = False  # sq_drained_on_sqd_to_sqd_late: due with the next modify
        self.staged: list[tuple[float, Completion]] = []  # (visible from, completion)
        self.staged_events: list[tuple[float, AsyncEvent]] = []
        self.hidden_sends: list[int] = []  # run_failed_post: refused WRs still in the ring
        self.recv_ids: set[int] = set()
        self.destroyed = False
        self.private: dict[str, Any] = {}  # what a Behaviour (driver) records per QP
        # what query_qp reports: every field, zero until a modify sets it (a driver's struct)
        self.attrs: dict[str, int] = {f: 0 for fields in STORED_FIELDS.values() for f in fields}
        self.stale_state = 0  # cur_state_stale: the state before the last accepted modify
        self.created = self._create_returned()

    def _create_returned(self) -> Created:
        """What create_qp and create_cq write back: the device's rounding, or a fault."""
        cap = {**ASKED_CAP, **self.device.rounded_cap}
        if self._has("cap_below_asked"):
            cap["max_send_wr"] = ASKED_CAP["max_send_wr"] - 1
        cqe = {"send": ASKED_CQE, "recv": ASKED_CQE - self._has("cqe_below_asked")}
        return Created(asked=dict(ASKED_CAP), cap=cap, cqe_asked=ASKED_CQE, cqe=cqe)

    def _queried_cap(self) -> dict[str, int]:
        """query_qp's init_attr.cap: create's, the device's own inline limit, or a fault."""
        cap = dict(self.created.cap)
        if self.device.query_inline is not None:
            cap["max_inline_data"] = self.device.query_inline
        if self._has("query_cap_differs"):
            cap["max_recv_wr"] += 1
        if self._has("query_cap_lower"):
            cap["max_send_wr"] -= 1
        if self._has("query_inline_below_asked"):
            cap["max_inline_data"] = ASKED_CAP["max_inline_data"] - 1
        return cap

    def _has(self, fault: str) -> bool:
        return fault in self.device.faults

    # ----------------------------------------------------------------------- verbs
    def _accepts(self, exp: Expectation) -> bool:
        """Where the model lets the device choose, this fake accepts unless told to refuse."""
        if exp.outcome is Outcome.EITHER:
            return not self.device.refuse_either
        return exp.outcome is Outcome.ACCEPT

    def modify(self, attrs: AttrValues, mask: Attr) -> VerbResult:
        mask = Attr(int(mask))
        exp = self.model.modify(attrs, mask)
        verdict = self.device.behaviour.modify(self, exp, attrs, mask)
        if verdict is not None:  # the driver's own answer
            return self._modified(
                exp, attrs, mask, verdict.accepted, verdict.state, verdict.errno
            )
        reads_state = Attr.STATE not in mask and self._has("state_from_unmasked_qp_state")
        if reads_state and not self._checks_as_read(attrs, mask):
            return self._modified(exp, attrs, mask, False, None, errno.EINVAL)
        target = S(attrs["qp_state"]) if Attr.STATE in mask and attrs["qp_state"] <= S.ERR else None
        accept, forced = self._accepts(exp), None
        if accept and exp.may_land and self.device.land_elsewhere:
            forced = min(exp.may_land)  # a driver that ignores the move (iwarp)
        if accept and self.model.state == S.ERR and target == S.RESET and self._has(
            "err_is_final"
        ):
            forced = S.ERR
        if (
            (self._has("refuse_sqd_exit") or self._has("refuse_sqd_exit_draining"))
            and self.model.state == S.SQD
            and target in (S.RESET, S.RTS)
        ):
            self.model.apply(exp, False)
            return VerbResult(False, errno.EINVAL)
        if not accept and target is not None:
            illegal = ".transition.invalid." in exp.rule.id and target == S.RTS
            if (illegal and self._has("accept_illegal_transition")) or (
                exp.rule.id.endswith(".required") and self._has("skip_required_bit_check")
            ):
                accept, forced = True, target
        value_rule = not accept and exp.rule.id.startswith("attr.")
        if value_rule and self._has("accept_out_of_range"):
            accept = True
        if value_rule and self._has("accept_out_of_range_no_move"):
            accept, forced = True, self.model.state
        table_rule = exp.rule.id.startswith(("linux.transition.", "ibta.transition."))
        if not accept and target is None and table_rule and self._has("accept_attr_only_modify"):
            accept = True
        return self._modified(exp, attrs, mask, accept, forced, None)

    def _checks_as_read(self, attrs: AttrValues, mask: Attr) -> bool:
        """state_from_unmasked_qp_state: does the table allow cur -> attr.qp_state (0 when
        the struct leaves it out, as behind libibverbs) with this mask? A state out of
        range has no entry."""
        read = int(attrs.get("qp_state", 0))
        if not 0 <= read <= S.ERR:
            return False
        return self.model.table.admits(self.model.state, S(read), self.qp_type, mask)

    def _modified(
        self,
        exp: Expectation,
        attrs: AttrValues,
        mask: Attr,
        accept: bool,
        forced: QPState | None,
        refusal: int | None,
    ) -> VerbResult:
        """Apply a decided modify: refused with `refusal` (None: the model's errno), or
        accepted (stored, flushes, events), the QP then in `forced` if given."""
        before = self.model.state
        self.model.apply(exp, accept)
        if forced is not None:
            self.model.follow(forced)
        if not accept:
            return VerbResult(False, _errno_of(exp) if refusal is None else refusal)
        self._store(attrs, mask)
        after = self.model.state
        self.stale_state = int(before)
        self._emit(exp.completions, entering_err=after == S.ERR and before != S.ERR)
        self._raise_events(exp, before, after, mask, attrs)
        self._hidden_effects(before, after, exp)
        self.device.behaviour.modified(self, before, after, attrs, mask)
        return VerbResult(True)

    def query(self) -> QueryResult:
        state = self.device.names.get(self.model.state, self.model.state)
        if state == S.RTR and self._has("misreport_state"):
            state = S.INIT
        if state == S.ERR and self._has("query_err_as_init"):
            state = S.INIT
        if self._has("query_state_unset"):
            state = S.RESET
        draining = self.model.draining or (
            state == S.SQD and self._has("refuse_sqd_exit_draining")
        )
        cur = int(state)  # a driver copies the state it reports
        if self.device.cur_unset:
            cur = 0
        elif self._has("cur_state_stale"):
            cur = self.stale_state
        return QueryResult(state=state, sq_draining=draining,
                           attrs={**self.attrs, "cur_qp_state": cur}, cap=self._queried_cap())

    def post_send(self, wr_id: int) -> VerbResult:
        exp = self.model.post_send(wr_id)
        verdict = self.device.behaviour.post(self, "send", exp)
        accept = self._accepts(exp) if verdict is None else verdict.accepted
        self.model.apply(exp, accept)
        if not accept:
            if self._has("run_failed_post"):
                self.hidden_sends.append(wr_id)
            if self._has("failed_post_completes_at_once"):
                self.cq.append(Completion(wr_id, "send", WCStatus.SUCCESS, self.qp_num))
            return VerbResult(False, _refusal(exp, verdict))
        self._emit(exp.completions)
        if self.model.state == S.RTS:  # no wire: a started send completes at once
            done = self.model.send_completed(WCStatus.SUCCESS)
            self._emit(done.completions)
            self._queue_events(done.events)
        return VerbResult(True)

    def post_recv(self, wr_id: int) -> VerbResult:
        self.recv_ids.add(wr_id)
        exp = self.model.post_recv(wr_id)
        verdict = self.device.behaviour.post(self, "recv", exp)
        accept = self._accepts(exp) if verdict is None else verdict.accepted
        self.model.apply(exp, accept)
        if not accept:
            return VerbResult(False, _refusal(exp, verdict))
        done = list(exp.completions)
        if self.model.state == S.ERR and self._has("recv_in_err_unflushed"):
            done = []
        if self.model.state == S.ERR and self._has("recv_in_err_wrong_status"):
            done = [ExpectedCompletion(c.wr_id, c.queue, WCStatus.SUCCESS) for c in done]
        self._emit(done)
        return VerbResult(True)

    def poll(self) -> list[Completion]:
        now = time.monotonic()
        self.staged.extend((now + self.device.delay, c) for c in self.cq)
        self.cq = []
        done = [c for at, c in self.staged if at <= now]
        self.staged = [(at, c) for at, c in self.staged if at > now]
        return done

    def events(self, timeout: float) -> list[AsyncEvent]:
        now = time.monotonic()
        self.staged_events.extend((now + self.device.delay, e) for e in self.queued_events)
        self.queued_events = []
        found = [e for at, e in self.staged_events if at <= now]
        self.staged_events = [(at, e) for at, e in self.staged_events if at > now]
        return found

    def destroy(self) -> None:
        if not self.destroyed:
            exp = self.model.destroy()
            self.model.apply(exp, True)
            self.destroyed = True

    # ------------------------------------------------------------------- internals
    def _store(self, attrs: AttrValues, mask: Attr) -> None:
        """An accepted modify: the fields of its mask are stored as given (PSNs masked to
        24 bits, as the BTH carries them)."""
        for bit, fields in STORED_FIELDS.items():
            for name in fields:
                if bit in mask and name in attrs:
                    value = int(attrs[name])
                    if name in ("sq_psn", "rq_psn"):
                        value &= 0xFFFFFF
                    if name == "min_rnr_timer" and self._has("store_in_wrong_field"):
                        self.attrs["timeout"] = value
                        continue
                    self.attrs[name] = value
        if Attr.TIMEOUT not in mask and "timeout" in attrs and self._has("read_unmasked_field"):
            self.attrs["timeout"] = int(attrs["timeout"])

    def _emit(self, completions: Iterable[ExpectedCompletion], entering_err: bool = False) -> None:
        batch = [Completion(c.wr_id, c.queue, c.status, self.qp_num) for c in completions]
        if entering_err and batch and self._has("lost_flush"):
            batch.pop(0)
        if entering_err and self._has("flush_out_of_order"):
            for queue in ("send", "recv"):
                idx = [i for i, c in enumerate(batch) if c.queue == queue]
                if len(idx) >= 2:
                    batch[idx[0]], batch[idx[1]] = batch[idx[1]], batch[idx[0]]
        if batch and self._has("duplicate_completion"):
            batch.insert(1, batch[0])
        if batch and self._has("late_duplicate_completion"):
            self.staged.append((time.monotonic() + LATE, batch[0]))
        if self._has("cq_overrun") and len(self.cq) + len(batch) > CQ_ROOM:
            batch = batch[: max(0, CQ_ROOM - len(self.cq))]
            self._queue_events([EventType.CQ_ERR])
        self.cq.extend(batch)

    def _raise_events(
        self,
        exp: Expectation,
        before: QPState,
        after: QPState,
        mask: Attr,
        attrs: Mapping[str, int],
    ) -> None:
        events = list(exp.events)
        if self.late_drained:  # raised by the SQD->SQD before, seen only now
            self.late_drained = False
            events.append(EventType.SQ_DRAINED)
        if self._has("event_not_raised"):
            events = [e for e in events if e != EventType.SQ_DRAINED]
        asked = Attr.EN_SQD_ASYNC_NOTIFY in mask and attrs.get("en_sqd_async_notify", 0)
        if before == S.RTS and after == S.SQD and not asked and self._has("event_unasked"):
            events.append(EventType.SQ_DRAINED)
        drained = EventType.SQ_DRAINED in events
        if before == S.RTS and after == S.SQD and drained and self._has("sq_drained_twice"):
            events.append(EventType.SQ_DRAINED)
        again = before == after == S.SQD and Attr.STATE in mask
        if again and self._has("sq_drained_on_sqd_to_sqd"):
            events.append(EventType.SQ_DRAINED)
        if again and self._has("sq_drained_on_sqd_to_sqd_late"):
            self.late_drained = True
        if before == S.RTR and after == S.RTS and self._has("event_in_rts"):
            events.append(EventType.SQ_DRAINED)
        if after == S.ERR != before and self._has("error_event_on_err"):
            events.append(EventType.QP_FATAL)
        self._queue_events(events)

    def _queue_events(self, events: Iterable[EventType]) -> None:
        raised = self.device.behaviour.events(self, list(events))
        self.queued_events.extend(AsyncEvent(e, self.qp_num) for e in raised)

    def _hidden_effects(self, before: QPState, after: QPState, exp: Expectation) -> None:
        if self.hidden_sends and after == S.RTS:
            self.cq.extend(
                Completion(w, "send", WCStatus.SUCCESS, self.qp_num) for w in self.hidden_sends
            )
            self.hidden_sends.clear()
        elif self.hidden_sends and after == S.ERR:
            self.cq.extend(
                Completion(w, "send", WCStatus.WR_FLUSH_ERR, self.qp_num) for w in self.hidden_sends
            )
            self.hidden_sends.clear()
        elif after == S.RESET:
            self.hidden_sends.clear()
            if self._has("wr_run_after_reset"):
                self.cq.extend(
                    Completion(
                        w,
                        "recv" if w in self.recv_ids else "send",
                        WCStatus.WR_FLUSH_ERR,
                        self.qp_num,
                    )
                    for w in sorted(exp.never_run)
                )


class FakeDevice:
    """A Device whose QPs follow the model, except for the planted faults."""

    def __init__(
        self,
        faults: Iterable[str] = (),
        variant: str = "linux",
        caps: DeviceCaps | None = None,
        qp_types: Iterable[QPType] = (QPType.RC, QPType.UC, QPType.UD),
        kernel: str = "none",
        delay: float = 0.0,
        *,
        names: Mapping[QPState, QPState] | None = None,
        refuse_either: bool = False,
        land_elsewhere: bool = False,
        behaviour: Behaviour | None = None,
        rounded_cap: Mapping[str, int] | None = None,
        query_inline: int | None = None,
        cur_unset: bool = False,
    ) -> None:
        """`names`: what query_qp calls a state (siw and cxgb4 call IDLE INIT);
        `refuse_either`: refuse where the model lets the device choose (else accept);
        `land_elsewhere`: an accepted modify that may leave the QP elsewhere does (iwarp: a
        driver that ignores the move); `behaviour`: a driver's own code, asked before the
        model (default: none, the model decides everything); `rounded_cap`: capabilities
        create_qp writes back above what was asked; `query_inline`: the max_inline_data
        query_qp reports whatever create wrote back (siw's SIW_MAX_INLINE); `cur_unset`:
        query_qp's cur_qp_state is always 0 (efa never writes it)."""
        self.rounded_cap = dict(rounded_cap or {})
        self.query_inline = query_inline
        self.cur_unset = cur_unset
        self.faults = frozenset(faults)
        self.behaviour = behaviour or Behaviour()
        self.names = dict(names or {})
        self.refuse_either = refuse_either
        self.land_elsewhere = land_elsewhere
        self.delay = delay  # seconds between a completion or event and its delivery
        unknown = self.faults - FAULTS.keys()
        if unknown:
            raise ValueError(f"unknown fault(s): {', '.join(sorted(unknown))}")
        self.variant = variant
        self.kernel = kernel
        self.caps = caps or DeviceCaps(max_mtu=MTU.MTU_4096)
        self.name = "fake0"
        self.port = 1
        self.gid_index = 1
        self._types = list(qp_types)
        self._next_qpn = 0x11
        self.qps: list[FakeQP] = []

    def identity(self) -> dict[str, str]:
        return {
            "device": self.name,
            "driver": "fake",
            "kernel": self.kernel,
            "faults": ",".join(sorted(self.faults)) or "none",
        }

    def supported_qp_types(self) -> list[QPType]:
        return list(self._types)

    def create_qp(self, qp_type: QPType) -> FakeQP:
        if QPType(qp_type) not in self._types:
            raise UnsupportedQPType(f"{QPType(qp_type).name} unsupported by {self.name}")
        qp = FakeQP(self, self._next_qpn, qp_type)
        self._next_qpn += 1
        self.qps.append(qp)
        return qp

    def valid_attrs(self, qp: FakeQP) -> dict[str, int]:
        return {
            "port_num": 1,
            "pkey_index": 0,
            "qkey": 0x11111111,
            "qp_access_flags": 7,
            "ah_port_num": 1,
            "ah_sgid_index": 1,
            "path_mtu": int(MTU.MTU_1024),
            "dest_qp_num": qp.qp_num,
            "rq_psn": 0,
            "sq_psn": 0,
            "timeout": 14,
            "retry_cnt": 7,
            "rnr_retry": 7,
            "min_rnr_timer": 12,
            "max_rd_atomic": 1,
            "max_dest_rd_atomic": 1,
            "en_sqd_async_notify": 1,
            "path_mig_state": 0,
            "alt_port_num": 1,
            "alt_timeout": 14,
            "rate_limit": 0,
        }

    def close(self) -> None:
        for qp in self.qps:
            qp.destroy()

    @property
    def live(self) -> list[FakeQP]:
        """QPs not destroyed (a leak check for the tests)."""
        return [q for q in self.qps if not q.destroyed]
