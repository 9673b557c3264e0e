"""Short verb sequences on one checked QP, shared by the planted-fault and near-miss tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from models.enums import Attr, QPState, QPType
from qpconform.engine.device import Device
from qpconform.engine.lone import CheckedQP, Checker

S = QPState


def drain(qp: CheckedQP, notify: bool) -> None:
    """Up to RTS, then RTS->SQD with EN_SQD_ASYNC_NOTIFY = notify."""
    qp.bring_to(S.RTS)
    mask = Attr.STATE | Attr.EN_SQD_ASYNC_NOTIFY
    attrs = qp.values.attrs_for(mask, S.SQD)
    attrs["en_sqd_async_notify"] = int(notify)
    qp.modify(attrs, mask)


def init_to_rts(qp: CheckedQP) -> None:
    """INIT->RTS, an invalid transition, with the INIT->RTR mask."""
    qp.bring_to(S.INIT)
    attrs, mask = qp.values.transition_attrs(S.RTR)
    attrs["qp_state"] = int(S.RTS)
    qp.modify(attrs, mask)


def extra_bit_without_state(qp: CheckedQP) -> None:
    """In INIT, a modify without STATE carrying SQ_PSN, which INIT->INIT does not allow."""
    qp.bring_to(S.INIT)
    qp.modify(qp.values.attrs_for(Attr.SQ_PSN), Attr.SQ_PSN)


#: A valid value for every modify field (model-only tests: no device caps to consult).
VALID_ATTRS: dict[str, int] = {
    "qp_state": 0, "cur_qp_state": 0, "pkey_index": 0, "port_num": 1, "qkey": 0x11,
    "qp_access_flags": 0, "ah_port_num": 1, "ah_sgid_index": 0, "path_mtu": 3, "timeout": 14,
    "retry_cnt": 7, "rnr_retry": 7, "rq_psn": 0, "max_rd_atomic": 1, "max_dest_rd_atomic": 1,
    "min_rnr_timer": 12, "sq_psn": 0, "dest_qp_num": 1, "en_sqd_async_notify": 1,
    "path_mig_state": 0, "alt_port_num": 1, "alt_ah_port_num": 1,
}


def recv_in_err(qp: CheckedQP) -> None:
    """Into ERR, then a receive posted there (it must be refused or flushed)."""
    qp.bring_to(S.ERR)
    qp.post_recv()
    qp.settle()


def post_in_idle_then_err(qp: CheckedQP, verb: str) -> None:
    """In INIT (iWARP: IDLE) one post_send or post_recv, then into ERR: its flush is due."""
    qp.bring_to(S.INIT)
    getattr(qp, verb)()
    qp.bring_to(S.ERR)
    qp.settle()


@dataclass
class SuiteRun:
    """What run_suites did: cases run, and the groups skipped with their reason (a case
    the device's caps cannot express, a start state a known quirk keeps the QP from)."""

    ran: int = 0
    skipped: dict[str, str] = field(default_factory=dict)


def run_suites(
    checker: Checker, device: Device, variant: str, qp_types: Sequence[QPType]
) -> SuiteRun:
    """Every case of the transition, attribute and post suites of `variant` on `qp_types`,
    as the suites run them (one QP per case; fails on an unknown divergence, as a suite
    test would); a group the suite test would skip is counted as skipped."""
    from suites import steps
    from suites.cases import (
        attribute_groups,
        post_groups,
        sends_then_err_groups,
        transition_groups,
    )

    def modify_case(qp: CheckedQP, case: Any) -> None:
        steps.run_modify_case(qp, device, case)

    bodies = {"post_send_twice": steps.run_sends_then_err, "post_send": steps.run_post_case,
              "post_recv": steps.run_post_case}
    run = SuiteRun()
    types = list(qp_types)
    for group in [*transition_groups(variant, types), *attribute_groups(variant, types),
                  *post_groups(variant, types), *sends_then_err_groups(variant, types)]:
        if group.skip is not None:
            continue
        body = bodies.get(group.cases[0].kind, modify_case)
        try:
            steps.run_group(checker, group, body, device.caps)
        except pytest.skip.Exception as skipped:
            run.skipped[group.id] = str(skipped)
            continue
        run.ran += len(group.cases)
    return run


def run_iwarp_suites(checker: Checker, device: Device) -> int:
    """Every runnable case of the iwarp transition, attribute and post suites on RC, as the
    suites run them (one QP per case; fails on an unknown divergence); how many ran."""
    return run_suites(checker, device, "iwarp", [QPType.RC]).ran


def run_stateful(
    device: Device,
    out_dir: Any,
    variant: str,
    qp_types: Sequence[QPType],
    quirks: Any = None,
    **hypothesis: Any,
) -> Any:
    """The stateful machine on `qp_types` under `variant`, no quiet windows (a fake device),
    derandomized; `hypothesis` settings (max_examples, stateful_step_count...) on top.
    Returns the known divergences (one per kind); raises on an unknown one."""
    from qpconform.machines.lone import MachineConfig, machine_settings, run_machine
    from reports.reproducer import DivergenceKeeper

    return run_machine(
        device, list(qp_types), variant, quirks,
        config=MachineConfig(settle_window=0.0, must_wait=0.0), keep=DivergenceKeeper(out_dir),
        hypothesis_settings=machine_settings(derandomize=True, database=None, **hypothesis),
    )


def run_iwarp_machine(device: Device, out_dir: Any, quirks: Any = None, **hypothesis: Any) -> Any:
    """The stateful machine on RC under the iwarp variant, no quiet windows (a fake device),
    derandomized; `hypothesis` settings (max_examples, stateful_step_count...) on top."""
    return run_stateful(device, out_dir, "iwarp", [QPType.RC], quirks, **hypothesis)
