"""The engine on the host, the device behind an executor: planted faults are still caught
with the same rule and shrink as short, a clean device passes, a step costs about one round
trip, and a dead executor is a lost device."""

from __future__ import annotations

import fnmatch
import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from models.enums import QPState, QPType, WCOpcode, WCStatus
from qpconform.adapters import wire
from qpconform.adapters.executor_ports import await_host
from qpconform.adapters.pyverbs_sets import ResourceSet, SetPool
from qpconform.adapters.resources import ResourceStack
from qpconform.engine.device import AsyncEvent, Completion, DeviceLost, QueryResult
from qpconform.engine.judge import DivergenceError
from qpconform.machines.lone import machine_settings, run_machine
from reports.reproducer import DivergenceKeeper
from tests.example_counts import shrunk_within
from tests.fake_device import FAULTS, FakeDevice
from tests.remote_fake import remote
from tests.test_harness_planted import (
    CONFIG,
    EXPECTED_RULE,
    FAST,
    LONGER_MINIMUM,
    MAX_SHRUNK_VERBS,
    PARKED,
    TYPES,
    _planted_settings,
    kinds_found,
)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_planted_fault_caught_through_the_executor(fault: str, tmp_path: Path) -> None:
    device = FakeDevice([fault])
    with remote(device) as dev, pytest.raises(DivergenceError) as caught:
        run_machine(dev, TYPES, config=CONFIG.get(fault, FAST),
                    hypothesis_settings=_planted_settings(), keep=DivergenceKeeper(tmp_path))
    record = caught.value.record
    assert fnmatch.fnmatchcase(record.rule_id, EXPECTED_RULE[fault]), record.rule_id
    assert record.kind in kinds_found(fault), record.format()
    assert shrunk_within(record.verb_steps, LONGER_MINIMUM.get(fault, MAX_SHRUNK_VERBS)), \
        record.format()
    assert device.live == []  # the executor freed every QP when the session ended


def test_clean_device_passes_with_about_one_round_trip_per_step(tmp_path: Path) -> None:
    device = FakeDevice()
    steps = []

    class Count:
        def step(self, *args: object) -> None:
            steps.append(args)

        def choice(self, *args: object) -> None:
            return None

    with remote(device) as dev:
        known = run_machine(
            dev, TYPES, config=PARKED, keep=DivergenceKeeper(tmp_path), recorder=Count(),
            hypothesis_settings=machine_settings(max_examples=60, stateful_step_count=8,
                                                 derandomize=True, database=None),
        )
        trips = dev.channel.round_trips
    assert known == []
    assert device.live == []
    assert len(device.qps) > 60  # it really ran
    verbs = [s for s in steps if s and s[1] not in ("quiet", "settle")]
    # a verb's reply carries the reads after it (without that: 2.8 per checked step), a
    # post's its QP's query_qp too; a destroy rides with the next request; the rest are
    # creates (one each: counted apart, their share depends on the drawn sequences),
    # queries and the waits for what is due. Measured (659 checked steps, 140 creates):
    # 1.66 round trips per checked step with a round trip per destroy and a query after
    # posts, 1.45 with the destroys carried, 1.31 with posts read back (191 -> 98
    # queries), 1.10 without the creates; 1.07 on other sequences (496 steps, 184 creates)
    creates = dev.channel.by_verb["create_qp"]
    assert trips - creates < 1.15 * len(verbs), (trips, creates, len(verbs))
    assert "destroy" not in dev.channel.by_verb and dev.channel.carried["destroy"] > 60


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
    st.none() | st.sampled_from(["stale", "read", "atomic", "other"]),
    byte_len=st.none() | st.integers(0, 2**32 - 1), wc_flags=st.none() | st.integers(0, 0xFF),
    src_qp=st.none() | st.integers(0, 2**24 - 1),
)


@given(_completions)
def test_a_completion_crosses_the_wire_unchanged(c: Completion) -> None:
    frame = wire.pack(wire.completion(c))
    assert wire.to_completion(wire.msgpack.unpackb(frame[4:])) == c


def test_a_completion_from_an_older_executor_reads_no_wc_fields() -> None:
    """Seven values (before byte_len, wc_flags and src_qp crossed): those are not read."""
    old = wire.completion(Completion(3, "recv", WCStatus.SUCCESS, 0x12, WCOpcode.RECV))[:7]
    got = wire.to_completion(old)
    assert (got.byte_len, got.wc_flags, got.src_qp) == (None, None, None)
    assert got.opcode == WCOpcode.RECV


def test_the_wc_fields_cross_the_wire() -> None:
    sent = Completion(3, "recv", WCStatus.SUCCESS, 0x12, WCOpcode.RECV, 0x5A000003,
                      byte_len=56, wc_flags=0x3, src_qp=0x34)
    got = wire.to_completion(wire.msgpack.unpackb(wire.pack(wire.completion(sent))[4:]))
    assert (got.byte_len, got.wc_flags, got.src_qp) == (56, 0x3, 0x34)


def test_a_query_and_an_event_cross_unchanged() -> None:
    q = QueryResult(QPState.SQD, True, {"qkey": 0x11111111, "port_num": 1})
    assert wire.to_query_result(wire.msgpack.unpackb(wire.pack(wire.query_result(q))[4:])) == q
    from models.enums import EventType

    e = AsyncEvent(EventType.SQ_DRAINED, 17)
    assert wire.to_event(wire.msgpack.unpackb(wire.pack(wire.event(e))[4:])) == e


class _FailingDestroy(FakeDevice):
    """A device whose destroy_qp fails once per QP (the executor reports it as an error;
    the second try, at the session's end, frees it)."""

    def create_qp(self, qp_type: QPType) -> Any:
        qp = super().create_qp(qp_type)
        real = qp.destroy

        def destroy() -> None:
            if not qp.private.get("refused"):
                qp.private["refused"] = True
                raise OSError(16, "EBUSY from destroy_qp")
            real()

        qp.destroy = destroy  # type: ignore[method-assign]
        return qp


def test_a_deferred_destroy_that_fails_fails_the_next_verb_which_does_not_run() -> None:
    device = _FailingDestroy()
    failed = r"destroy: OSError.*EBUSY.*deferred"
    with pytest.raises(RuntimeError, match=failed), remote(device) as dev:
        first = dev.create_qp(QPType.RC)
        trips = dev.channel.round_trips
        first.destroy()
        assert dev.channel.round_trips == trips  # no round trip of its own
        with pytest.raises(RuntimeError, match=failed):
            dev.create_qp(QPType.RC)
        assert len(device.qps) == 1  # the create behind the failed destroy did not run
        dev.create_qp(QPType.UD).destroy()  # fails too, when close() sends it
    assert device.live == []  # the executor freed both at the session's end


def test_close_sends_the_deferred_destroys() -> None:
    device = FakeDevice()
    with remote(device) as dev:
        qps = [dev.create_qp(QPType.RC) for _ in range(3)]
        qps[0].destroy()
        assert len(device.live) == 3  # not sent yet
    assert device.live == []


class _ScriptedChannel:
    """A Channel whose replies are given: (value, seen) per request, in order."""

    def __init__(self, replies: list[tuple[Any, dict[int, Any] | None]]) -> None:
        self.replies, self.asked = replies, []
        self.round_trips, self.broken, self.closed = 0, False, False

    def call(self, request: list[Any], wait: float = 0.0, before: Any = None) -> Any:
        self.asked.append(request[0])
        self.round_trips += 1
        return self.replies.pop(0)

    def close(self) -> None:
        self.closed = True


def test_a_query_after_a_read_completion_asks_the_device_not_the_posts_reply() -> None:
    """A post's reply carries its query_qp, taken before the executor polled the QP; when
    the same reply shows a flush (the QP left RTS since), the engine's next query must read
    the state now, not the post's: rxe 6.12's requester moving the QP to ERR right after a
    post (rxe.reset_leaves_stale_sq_index) was an unknown divergence otherwise."""
    from qpconform.adapters.executor import Executor
    from qpconform.adapters.remote_device import RemoteDevice

    rts = wire.query_result(QueryResult(QPState.RTS, False, {}))
    err = wire.query_result(QueryResult(QPState.ERR, False, {}))
    flush = wire.completion(Completion(7, "send", WCStatus.WR_FLUSH_ERR, 0x11))
    channel = _ScriptedChannel([
        ([1, 0x11, {}], None),  # create_qp
        ([wire.verb_result(wire.to_verb_result([True, None, "", None])), rts],
         {1: [[flush], []]}),  # post_send: its query (RTS), then the flush polled after it
        (err, None),  # the query the engine makes after reading the flush
        ([wire.verb_result(wire.to_verb_result([True, None, "", None])), rts], {}),
    ])
    dev = RemoteDevice(channel, Executor(FakeDevice()).hello())  # type: ignore[arg-type]
    qp = dev.create_qp(QPType.RC)
    qp.post_send(7)
    assert [c.status for c in qp.poll()] == [WCStatus.WR_FLUSH_ERR]
    assert qp.query().state == QPState.ERR and channel.asked[-1] == "query"
    qp.post_send(8)  # nothing read in between: the reply's query answers, no round trip
    assert qp.query().state == QPState.RTS and channel.asked[-1] == "post_send"


# ------------------------------------------------------------------ the executor's pool
class _CQ:
    def __init__(self, left: int = 0) -> None:
        self.left = left

    def poll(self, num_entries: int) -> tuple[int, list[object]]:
        found, self.left = min(self.left, num_entries), max(0, self.left - num_entries)
        return found, [object()] * found


def _fake_open(self: ResourceSet, pv: object, name: str) -> None:
    """A ResourceSet.open without a device: an fd for the Context, empty CQs."""
    read_end, write_end = os.pipe()
    self.async_fd, self.ctx = read_end, write_end
    self.pd = self.mr = None
    self.send_cq, self.recv_cq = _CQ(), _CQ()
    self.stack.push(read_end, "context", lambda: (os.close(read_end), os.close(write_end)))


def test_a_set_is_reused_only_when_clean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ResourceSet, "open", _fake_open)
    stack = ResourceStack()
    pool = SetPool(None, "rxe0", stack, keep=4)  # type: ignore[arg-type]
    first = pool.take()
    pool.give(first, reuse=True)
    assert pool.take() is first and pool.reused == 1  # clean: lent again
    first.recv_cq.left = 1  # a completion of the QP destroyed before
    pool.give(first, reuse=True)
    second = pool.take()
    assert second is not first and pool.discarded == 1
    os.write(second.ctx, b"x")  # an event pending on its Context (a CQ_ERR, a port event)
    pool.give(second, reuse=True)
    third = pool.take()
    assert third is not second and pool.discarded == 2
    pool.give(third, reuse=False)  # its QP saw its CQ overrun, or did not go cleanly
    assert pool.discarded == 3 and pool.free == [] and len(stack) == 0
    fourth = pool.take()
    assert len(stack) == 1 and stack.labels() == [fourth.label]
    fd = fourth.async_fd
    stack.close()  # the device closes: free and lent sets alike
    with pytest.raises(OSError):
        os.fstat(fd)


def test_the_pool_keeps_no_more_than_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ResourceSet, "open", _fake_open)
    stack = ResourceStack()
    pool = SetPool(None, "rxe0", stack, keep=2)  # type: ignore[arg-type]
    sets = [pool.take() for _ in range(3)]
    for lent in sets:
        pool.give(lent, reuse=True)
    assert len(pool.free) == 2 and len(stack) == 2 and pool.discarded == 1
    stack.close()
    assert pool.opened == 3


def test_after_the_executor_is_gone_every_call_fails_at_once() -> None:
    import time

    with remote(FakeDevice()) as dev:
        qp = dev.create_qp(QPType.RC)
        dev.channel.sock.shutdown(2)
        with pytest.raises(DeviceLost):
            qp.query()
        start = time.monotonic()
        with pytest.raises(DeviceLost, match="went away earlier"):
            dev.create_qp(QPType.RC)  # a replay: no wait for a dead guest
        assert time.monotonic() - start < 1.0


# ------------------------------------------------------- the executor waits for the host
def test_the_executor_says_hello_once_the_host_end_is_open() -> None:
    here, there = socket.socketpair()
    with here, there:
        assert await_host(here.fileno(), 1.0)


def test_the_executor_gives_up_on_a_host_that_never_comes() -> None:
    """A hung-up port (a virtio-serial port polls HUP until the host connects) is waited
    for no longer than the bound."""
    here, there = socket.socketpair()
    there.close()
    with here:
        start = time.monotonic()
        assert not await_host(here.fileno(), 0.3)
        assert 0.3 <= time.monotonic() - start < 2.0
