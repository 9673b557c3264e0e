"""qpconform/adapters/cm_connect.py without a device: the bounded CM waits and the release order.

The connection itself needs siw and rdma_cm: tests/test_vm_cm.py does it in the VM.
"""

from __future__ import annotations

import time

import pytest

from qpconform.adapters import cm_connect as cm
from qpconform.adapters import cm_pair
from qpconform.adapters.resources import ResourceStack


class FakeEvent:
    def __init__(self, name: str, log: list[str]) -> None:
        self.event_type = cm.CM_EVENTS.index(name)
        self.log = log

    def close(self) -> None:  # the ack
        self.log.append(f"ack {cm.event_name(self.event_type)}")


def channel(names: list[str], log: list[str]) -> cm.Channel:
    """A Channel whose events come from `names`, then none (as if the select timed out)."""
    ch = cm.Channel.__new__(cm.Channel)
    ch.label = "active siw0"
    ch.seen = []
    pending = [FakeEvent(n, log) for n in names]

    def next_event(timeout: float):
        if pending:
            return pending.pop(0)
        time.sleep(min(timeout, 1.0))
        return None

    ch.next_event = next_event  # type: ignore[method-assign]
    return ch


def test_wait_returns_on_the_expected_event_and_acks_every_event():
    log: list[str] = []
    seen = []
    ch = channel(["ADDR_CHANGE", "ESTABLISHED", "DISCONNECTED"], log)
    ch.wait("ESTABLISHED", 1.0, "connect", on_event=lambda e: seen.append(e.event_type))
    assert seen == [cm.CM_EVENTS.index("ESTABLISHED")]  # on_event sees only the expected one
    assert log == ["ack ADDR_CHANGE", "ack ESTABLISHED"]  # the later one is left queued
    assert ch.seen == ["ADDR_CHANGE", "ESTABLISHED"]


@pytest.mark.parametrize("bad", ["REJECTED", "UNREACHABLE", "CONNECT_ERROR", "ADDR_ERROR"])
def test_a_failure_event_ends_the_wait_at_once_naming_it(bad):
    log: list[str] = []
    start = time.monotonic()
    with pytest.raises(cm.CMError, match=f"active siw0: connect: got {bad} instead of ESTABLISHED"):
        channel([bad], log).wait("ESTABLISHED", 30.0, "connect")
    assert time.monotonic() - start < 5
    assert log == [f"ack {bad}"]


def test_no_event_is_a_bounded_wait_with_a_clear_message():
    start = time.monotonic()
    with pytest.raises(cm.CMError) as info:
        channel(["ROUTE_RESOLVED"], []).wait("ESTABLISHED", 0.3, "connect")
    assert 0.3 <= time.monotonic() - start < 5
    assert str(info.value) == (
        "active siw0: connect: no ESTABLISHED within 0.3 s (seen: ROUTE_RESOLVED)"
    )


def test_drain_acks_what_came_and_returns_the_names():
    log: list[str] = []
    ch = channel(["DISCONNECTED", "TIMEWAIT_EXIT"], log)
    assert ch.drain(0.1) == ["DISCONNECTED", "TIMEWAIT_EXIT"]
    assert log == ["ack DISCONNECTED", "ack TIMEWAIT_EXIT"]
    assert ch.drain(0.0) == []


class Closable:
    def __init__(self, name: str, log: list[str], fail: bool = False) -> None:
        self.name, self.log, self.fail = name, log, fail

    def close(self) -> None:
        self.log.append(self.name)
        if self.fail:
            raise RuntimeError(f"{self.name} would not close")


def side(role: str, log: list[str], fail: str = "") -> cm.CMSide:
    s = cm.CMSide("siw0", "192.0.2.1", 1, role, stack=ResourceStack())
    for name in ("channel", "listen cm_id", "cm_id"):
        s.stack.push(Closable(f"{role} {name}", log, fail == name), name)
    return s


def test_a_link_closes_ids_before_channels_and_goes_on_past_a_failure():
    log: list[str] = []
    link = cm.CMLink(side("active", log, fail="cm_id"), side("passive", log))
    with pytest.raises(Exception, match="active cm_id would not close"):
        link.close()
    assert log == [
        "active cm_id", "active listen cm_id", "active channel",
        "passive cm_id", "passive listen cm_id", "passive channel",
    ]
    link.close()  # idempotent
    assert len(log) == 6


def test_a_pair_closes_the_link_before_the_qps():
    log: list[str] = []
    a = cm_pair.CMEnd("siw0", "192.0.2.1", "active")
    b = cm_pair.CMEnd("siw1", "192.0.2.2", "passive")
    for end in (a, b):
        for name in ("context", "pd", "qp"):
            end.stack.push(Closable(f"{end.role} {name}", log), name)
    pair = cm_pair.CMPair(a, b, cm.CMLink(side("active", log), side("passive", log)))
    pair.close()
    assert log.index("passive channel") < log.index("active qp")
    assert log[-6:] == [
        "active qp", "active pd", "active context", "passive qp", "passive pd", "passive context",
    ]
