"""The engine on the host, the device behind an executor: planted faults are still caught
with the same rule and shrink as short, a clean device passes, a step costs about one round
trip, and a dead executor is a lost device."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from models.enums import QPState, QPType, WCOpcode, WCStatus
from qpconform.adapters import wire
from qpconform.engine.device import AsyncEvent, Completion, DeviceLost, QueryResult
from qpconform.engine.judge import DivergenceError
from qpconform.machines.lone import machine_settings, run_machine
from reports.reproducer import DivergenceKeeper
from tests.fake_device import FAULTS, FakeDevice
from tests.remote_fake import remote
from tests.test_harness_planted import (
    CONFIG,
    EXPECTED_KIND,
    EXPECTED_RULE,
    FAST,
    LONGER_MINIMUM,
    MAX_SHRUNK_VERBS,
    TYPES,
    _planted_settings,
)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_planted_fault_caught_through_the_executor(fault: str, tmp_path: Path) -> None:
    device = FakeDevice([fault])
    with remote(device) as dev, pytest.raises(DivergenceError) as caught:
        run_machine(dev, TYPES, config=CONFIG.get(fault, FAST),
                    hypothesis_settings=_planted_settings(), keep=DivergenceKeeper(tmp_path))
    record = caught.value.record
    assert fnmatch.fnmatchcase(record.rule_id, EXPECTED_RULE[fault]), record.rule_id
    assert record.kind == EXPECTED_KIND[fault]
    assert 1 <= record.verb_steps <= LONGER_MINIMUM.get(fault, MAX_SHRUNK_VERBS), record.format()
    assert device.live == []  # the executor freed every QP when the session ended


def test_clean_device_passes_with_about_one_round_trip_per_step(tmp_path: Path) -> None:
    device = FakeDevice()
    steps = []

    class Count:
        def step(self, *args: object) -> None:
            steps.append(args)

        def divergence(self, d: object) -> None:
            pass

        def choice(self, *args: object) -> None:
            return None

    with remote(device) as dev:
        known = run_machine(
            dev, TYPES, config=FAST, keep=DivergenceKeeper(tmp_path), recorder=Count(),
            hypothesis_settings=machine_settings(max_examples=60, stateful_step_count=8,
                                                 derandomize=True, database=None),
        )
        trips = dev.channel.round_trips
    assert known == []
    assert device.live == []
    assert len(device.qps) > 60  # it really ran
    verbs = [s for s in steps if s and s[1] not in ("quiet", "settle")]
    # a verb's reply carries the reads after it (without that: 2.8 per checked step); the
    # rest are creates and destroys (logged as no step) and the waits for what is due:
    # measured 1.96 round trips per checked step
    assert trips < 2.2 * len(verbs), (trips, len(verbs))


def test_a_dead_executor_is_a_lost_device() -> None:
    device = FakeDevice()
    with remote(device) as dev:
        qp = dev.create_qp(QPType.RC)
        os.close(os.dup(dev.channel.fd))  # still fine
        dev.channel.sock.shutdown(2)  # the guest side sees EOF and ends; we see a dead wire
        with pytest.raises(DeviceLost):
            qp.query()


def test_an_unsupported_type_is_a_skip_not_a_loss() -> None:
    from qpconform.engine.device import UnsupportedQPType

    with remote(FakeDevice(qp_types=[QPType.RC])) as dev:
        with pytest.raises(UnsupportedQPType):
            dev.create_qp(QPType.UD)
        assert dev.supported_qp_types() == [QPType.RC]


_completions = st.builds(
    Completion, st.integers(0, 2**64 - 1), st.sampled_from(["send", "recv"]),
    st.sampled_from(list(WCStatus)), st.integers(0, 2**24 - 1),
    st.none() | st.sampled_from(list(WCOpcode)), st.none() | st.integers(0, 2**32 - 1),
)


@given(_completions)
def test_a_completion_crosses_the_wire_unchanged(c: Completion) -> None:
    frame = wire.pack(wire.completion(c))
    assert wire.to_completion(wire.msgpack.unpackb(frame[4:])) == c


def test_a_query_and_an_event_cross_unchanged() -> None:
    q = QueryResult(QPState.SQD, True, {"qkey": 0x11111111, "port_num": 1})
    assert wire.to_query_result(wire.msgpack.unpackb(wire.pack(wire.query_result(q))[4:])) == q
    from models.enums import EventType

    e = AsyncEvent(EventType.SQ_DRAINED, 17)
    assert wire.to_event(wire.msgpack.unpackb(wire.pack(wire.event(e))[4:])) == e
