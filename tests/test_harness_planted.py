"""Planted faults: the checker and the stateful machine must catch each one, shrunk short.

Each fault of tests/fake_device.py is a bug a driver could have. For each, a
targeted checker sequence must raise DivergenceError with the right rule, and
QPMachine (suites/test_stateful.py) must find it by itself and shrink it to a
few verbs, with a reproducer written for the minimal sequence. The clean fake
(the model itself) must pass the machine: no false positives.
"""

from __future__ import annotations

import fnmatch
import py_compile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import settings

from models.enums import Attr, QPState, QPType
from qpconform.engine import unmasked
from qpconform.engine.judge import DivergenceError
from qpconform.engine.lone import CheckedQP, Checker
from qpconform.engine.records import DivergenceList
from qpconform.machines.lone import MachineConfig, machine_settings, run_machine
from reports.divergence import read_divergences
from reports.reproducer import DivergenceKeeper
from tests.example_counts import PLANTED_RUN, SHRINK, examples, shrunk_within
from tests.fake_device import FAULTS, LATE, FakeDevice
from tests.sequences import drain, extra_bit_without_state, init_to_rts

S = QPState
TYPES = [QPType.RC, QPType.UC, QPType.UD]
#: Each example waits out its (zero) windows before the next begins (park=False): the run a
#: delivered divergence is replayed and shrunk in on a device. Parked, an example's QPs are still
#: observed while the next ones run, so what a shrink reaches can follow the host's load: CI's
#: full set shrank cq_overrun to 8 verbs on one xdist worker (5 alone). tests/test_pair_park.py
#: and tests/test_lone_unreplayed.py cover the parked run.
FAST = MachineConfig(settle_window=0.0, must_wait=0.0, park=False)
#: FAST, parked as on a device (run_machine's first run)
PARKED = MachineConfig(settle_window=0.0, must_wait=0.0)
MAX_SHRUNK_VERBS = 6
#: Faults that need a longer minimal sequence (bring-up to RTS, RTS->SQD, SQD->SQD: 5 verbs).
#: cq_overrun shrinks to 5 verbs (INIT, three receives, ERR) alone, in its file, and in the
#: same order on one worker, but in CI's full set on two xdist workers it stopped at 8 (the
#: same three receives and ERR, after a bring-up to SQD) in three runs of three, on either
#: worker, parked or not; the cause is not found yet (docs/measured.md, stop 57).
LONGER_MINIMUM = {"sq_drained_on_sqd_to_sqd": 8, "sq_drained_on_sqd_to_sqd_late": 9,
                  "cq_overrun": 8}
#: The kind an unshrunk sequence (the dev set) meets a fault as, where not the shrunk one's: a
#: lost flush with later completions behind it reads as out of order.
UNSHRUNK_KIND = {"lost_flush": "order"}

#: The rule (glob) each fault breaks.
EXPECTED_RULE = {
    "accept_illegal_transition": "linux.transition.invalid.*->RTS",
    "skip_required_bit_check": "linux.transition.*.required",
    "misreport_state": "*",  # caught by the state read back after the modify into RTR
    "run_failed_post": "ibta.post_send.*",
    "lost_flush": "ibta.err.flush",
    "flush_out_of_order": "ibta.err.flush",
    "duplicate_completion": "*",  # the rule that made the first completion due
    "event_not_raised": "ibta.sqd.drained_event",
    "event_unasked": "ibta.sqd.drained_event.unasked",
    "wr_run_after_reset": "ibta.reset.discard",
    "refuse_sqd_exit": "linux.transition.*.SQD->*",
    "refuse_sqd_exit_draining": "linux.transition.*.SQD->*",
    "event_in_rts": "ibta.sqd.drained_event.outside_sqd",
    "error_event_on_err": "ibta.modify.no_error_event",
    "sq_drained_twice": "ibta.sqd.drained_event.once",
    "sq_drained_on_sqd_to_sqd": "ibta.sqd.drained_event.*",  # the first one is unasked
    "sq_drained_on_sqd_to_sqd_late": "ibta.sqd.drained_event.*",
    "failed_post_completes_at_once": "ibta.post_send.*",
    "recv_in_err_unflushed": "ibta.post_recv.ERR",
    "recv_in_err_wrong_status": "ibta.post_recv.ERR",
    "accept_out_of_range": "attr.*",
    "accept_out_of_range_no_move": "attr.*",
    "accept_attr_only_modify": "linux.transition.*",
    "late_duplicate_completion": "*",  # the rule that made the first completion due
    "store_in_wrong_field": "attr.readback",
    "read_unmasked_field": "attr.readback.unmasked",
    "state_from_unmasked_qp_state": "linux.modify.outside_mask_ignored",
    "cq_overrun": "ibta.cq.no_overrun",
    "err_is_final": "linux.transition.*.ERR->RESET",  # any type: the fault is not RC's
    "query_err_as_init": "*",  # caught by the state read back after the modify into ERR
    "query_state_unset": "linux.transition.*.RESET->INIT",  # read back after RESET->INIT
    "cap_below_asked": "create.cap.at_least",
    "cqe_below_asked": "create.cq.cqe",
    "query_cap_differs": "query.cap.as_created",
    "query_cap_lower": "query.cap.as_created",
    "query_inline_below_asked": "query.cap.inline",
    "cur_state_stale": "query.cur_qp_state",
}
EXPECTED_KIND = {
    "accept_illegal_transition": "outcome",
    "skip_required_bit_check": "outcome",
    "misreport_state": "state",
    "run_failed_post": "completion",
    "lost_flush": "missing_completion",
    "flush_out_of_order": "order",
    "duplicate_completion": "completion",
    "event_not_raised": "missing_event",
    "event_unasked": "event",
    "wr_run_after_reset": "completion",
    "refuse_sqd_exit": "outcome",
    "refuse_sqd_exit_draining": "outcome",
    "event_in_rts": "event",
    "error_event_on_err": "event",
    "sq_drained_twice": "event",
    "sq_drained_on_sqd_to_sqd": "event",
    "sq_drained_on_sqd_to_sqd_late": "event",
    "failed_post_completes_at_once": "completion",
    "recv_in_err_unflushed": "missing_completion",
    "recv_in_err_wrong_status": "status",
    "accept_out_of_range": "outcome",
    "accept_out_of_range_no_move": "outcome",
    "accept_attr_only_modify": "outcome",
    "late_duplicate_completion": "completion",
    "store_in_wrong_field": "readback",
    "read_unmasked_field": "readback",
    "state_from_unmasked_qp_state": "outcome",
    "cq_overrun": "event",
    "err_is_final": "state",
    "query_err_as_init": "state",
    "query_state_unset": "state",
    "cap_below_asked": "readback",
    "cqe_below_asked": "readback",
    "query_cap_differs": "readback",
    "query_cap_lower": "readback",
    "query_inline_below_asked": "readback",
    "cur_state_stale": "readback",
}


def _checker(device: FakeDevice) -> Checker:
    return Checker(device, settle_window=0.0, must_wait=0.0, sink=DivergenceList())


def _missing_pkey(qp: CheckedQP) -> None:
    attrs, mask = qp.values.transition_attrs(S.INIT)
    qp.modify(attrs, mask & ~Attr.PKEY_INDEX)


def _post_then(*moves: QPState, recvs: int = 1, send: bool = False) -> Callable[[CheckedQP], None]:
    def run(qp: CheckedQP) -> None:
        if send:
            qp.post_send()  # refused in RESET
        qp.bring_to(S.INIT)
        for _ in range(recvs):
            qp.post_recv()
        for state in moves:
            qp.bring_to(state)
        qp.settle()

    return run


def _sqd_again(qp: CheckedQP) -> None:
    drain(qp, True)
    qp.settle()
    qp.modify(*qp.values.transition_attrs(S.SQD))
    qp.settle()


def _sqd_again_then_rts(qp: CheckedQP) -> None:
    """SQD->SQD, then back to RTS: the second SQ_DRAINED comes only after that."""
    _sqd_again(qp)
    qp.modify(*qp.values.transition_attrs(S.RTS))
    qp.settle()


def _pkey_out_of_range(qp: CheckedQP) -> None:
    attrs, mask = qp.values.transition_attrs(S.INIT)
    attrs["pkey_index"] = qp.checker.device.caps.pkey_tbl_len
    qp.modify(attrs, mask)


def _timeout_outside_the_mask(qp: CheckedQP) -> None:
    qp.bring_to(S.RTS)
    attrs, mask = qp.values.transition_attrs(S.RTS)  # RTS->RTS: STATE only, timeout unmasked
    qp.modify(qp.values.with_unmasked(attrs, mask, "other"), mask)


def _attribute_only_from_init(qp: CheckedQP) -> None:
    """A legal modify without STATE (INIT->INIT, ACCESS_FLAGS), qp_state left 0 outside the
    mask as libibverbs leaves it for a kernel driver."""
    qp.bring_to(S.INIT)
    qp.modify(qp.values.attrs_for(Attr.ACCESS_FLAGS), Attr.ACCESS_FLAGS, unmasked.uniform("zero"))


def _flush_then_wait(qp: CheckedQP) -> None:
    _flush_twice(qp)
    qp.checker.settle(2 * LATE)  # the deliberate window a destroy or an example's end runs


def _flush_twice(qp: CheckedQP) -> None:
    qp.bring_to(S.ERR)
    qp.post_recv()
    qp.settle()


#: A minimal hand-written sequence that meets each fault.
TARGETED: dict[str, Callable[[CheckedQP], None]] = {
    "accept_illegal_transition": init_to_rts,
    "skip_required_bit_check": _missing_pkey,
    "misreport_state": lambda qp: qp.bring_to(S.RTR),
    "run_failed_post": _post_then(S.ERR, recvs=0, send=True),
    "lost_flush": _post_then(S.ERR),
    "flush_out_of_order": _post_then(S.ERR, recvs=2),
    "duplicate_completion": _flush_twice,
    "event_not_raised": lambda qp: (drain(qp, True), qp.settle()),
    "event_unasked": lambda qp: (drain(qp, False), qp.settle()),
    "wr_run_after_reset": _post_then(S.RESET),
    "refuse_sqd_exit": lambda qp: (drain(qp, True), qp.settle(), qp.bring_to(S.RESET)),
    "refuse_sqd_exit_draining": lambda qp: (
        drain(qp, True), qp.settle(), qp.bring_to(S.RESET)
    ),
    "event_in_rts": lambda qp: (qp.bring_to(S.RTS), qp.settle()),
    "error_event_on_err": lambda qp: (qp.bring_to(S.ERR), qp.settle()),
    "sq_drained_twice": lambda qp: (drain(qp, True), qp.settle()),
    "sq_drained_on_sqd_to_sqd": _sqd_again,
    "sq_drained_on_sqd_to_sqd_late": _sqd_again_then_rts,
    "failed_post_completes_at_once": lambda qp: (qp.post_send(), qp.settle()),
    "recv_in_err_unflushed": _flush_twice,
    "recv_in_err_wrong_status": _flush_twice,
    "accept_out_of_range": _pkey_out_of_range,
    "accept_out_of_range_no_move": _pkey_out_of_range,
    "accept_attr_only_modify": extra_bit_without_state,
    "late_duplicate_completion": _flush_then_wait,
    "store_in_wrong_field": lambda qp: qp.bring_to(S.RTR),  # RC INIT->RTR sets min_rnr_timer
    "read_unmasked_field": _timeout_outside_the_mask,
    "state_from_unmasked_qp_state": _attribute_only_from_init,
    "cq_overrun": _post_then(S.ERR, recvs=3),
    "err_is_final": lambda qp: (qp.bring_to(S.ERR), qp.bring_to(S.RESET)),
    "query_err_as_init": lambda qp: qp.bring_to(S.ERR),
    "query_state_unset": lambda qp: qp.bring_to(S.INIT),
    "cap_below_asked": lambda qp: None,  # judged when the checker opens the QP
    "cqe_below_asked": lambda qp: None,
    "query_cap_differs": lambda qp: qp.bring_to(S.INIT),
    "query_cap_lower": lambda qp: qp.bring_to(S.INIT),
    "query_inline_below_asked": lambda qp: qp.bring_to(S.INIT),
    "cur_state_stale": lambda qp: qp.bring_to(S.RTR),  # INIT after INIT->RTR (RESET may be)
}
#: Faults that only show after a delay: the machine needs a quiet window longer than it.
CONFIG = {"late_duplicate_completion": MachineConfig(settle_window=2 * LATE, must_wait=0.5,
                                                     park=False)}


def test_every_fault_has_a_test() -> None:
    assert set(FAULTS) == set(TARGETED) == set(EXPECTED_RULE) == set(EXPECTED_KIND)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_targeted_sequence_catches(fault: str) -> None:
    device = FakeDevice([fault])
    checker = _checker(device)
    with pytest.raises(DivergenceError) as caught:  # what create returned is judged at open
        TARGETED[fault](checker.open_qp(QPType.RC))
    record = caught.value.record
    assert fnmatch.fnmatchcase(record.rule_id, EXPECTED_RULE[fault]), record.rule_id
    assert record.kind == EXPECTED_KIND[fault]
    checker.close()
    assert device.live == []


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_clean_device_passes_targeted_sequence(fault: str) -> None:
    device = FakeDevice()
    checker = _checker(device)
    TARGETED[fault](checker.open_qp(QPType.RC))
    checker.close()
    assert checker.known == []


def kinds_found(fault: str) -> set[str]:
    """The kinds the machine may report `fault` as: the shrunk one, and unshrunk (the dev set)
    its UNSHRUNK_KIND too."""
    return {EXPECTED_KIND[fault]} | ({UNSHRUNK_KIND[fault]} if fault in UNSHRUNK_KIND and
                                     not SHRINK else set())


def _planted_settings() -> settings:
    # derandomized: the same examples every run; a failure stops generation, so a high
    # max_examples costs nothing when the fault is found early
    return machine_settings(
        max_examples=800, stateful_step_count=8, derandomize=True, database=None,
        print_blob=False, **PLANTED_RUN,
    )


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_machine_finds_and_shrinks(fault: str, tmp_path: Path) -> None:
    device = FakeDevice([fault])
    with pytest.raises(DivergenceError) as caught:
        run_machine(device, TYPES, config=CONFIG.get(fault, FAST),
                    hypothesis_settings=_planted_settings(), keep=DivergenceKeeper(tmp_path))
    record = caught.value.record
    assert fnmatch.fnmatchcase(record.rule_id, EXPECTED_RULE[fault]), record.rule_id
    assert record.kind in kinds_found(fault), record.format()
    assert shrunk_within(record.verb_steps, LONGER_MINIMUM.get(fault, MAX_SHRUNK_VERBS)), \
        record.format()
    # the reproducer is written for the minimal sequence and named in the message
    assert record.reproducer is not None
    script = Path(record.reproducer)
    py_compile.compile(str(script), doraise=True)
    assert f"python3 {script}" in str(caught.value)
    for step in record.steps:
        if "wr_id" in step:
            assert f"'wr_id': {step['wr_id']}" in script.read_text()
    # the record of the minimal example, and only that one, is in divergences.json
    saved = read_divergences(tmp_path / "divergences.json")
    assert [d["id"] for d in saved] == [record.id]
    assert device.live == []


def test_clean_device_passes_machine(tmp_path: Path) -> None:
    device = FakeDevice()
    known = run_machine(
        device, TYPES, config=PARKED, keep=DivergenceKeeper(tmp_path),
        hypothesis_settings=machine_settings(
            max_examples=examples(150), stateful_step_count=8, derandomize=True, database=None
        ),
    )
    assert known == []
    assert device.live == []
    assert not (tmp_path / "divergences.json").exists()
    assert len(device.qps) > examples(150)  # it really ran
