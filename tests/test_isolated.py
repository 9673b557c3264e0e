"""A verb made in a forked child (qpconform/adapters/isolated.py): its result comes back as
made; a call that kills its process, or hangs, is a refusal naming how, never the end of
the parent; a call that raises is an error."""

from __future__ import annotations

import os
import signal
import time

import pytest

from qpconform.adapters.isolated import call_in_child
from qpconform.engine.device import VerbResult


def test_the_child_result_comes_back() -> None:
    assert call_in_child(lambda: VerbResult(False, 22, "refused")) == VerbResult(
        False, 22, "refused")
    assert call_in_child(lambda: VerbResult(True)) == VerbResult(True, None, "")


def _die(sig: signal.Signals) -> VerbResult:
    os.kill(os.getpid(), sig)
    time.sleep(5)
    return VerbResult(True)


def test_a_call_that_kills_its_process_is_reported_with_the_signal() -> None:
    res = call_in_child(lambda: _die(signal.SIGFPE))
    assert (res.accepted, res.killed) == (False, "SIGFPE")
    assert "killed by SIGFPE" in res.detail


def test_a_call_that_hangs_is_killed_after_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    forked: list[int] = []
    real_fork = os.fork

    def fork() -> int:
        pid = real_fork()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)
    start = time.monotonic()
    res = call_in_child(lambda: (time.sleep(30), VerbResult(True))[1], timeout=0.3)
    assert time.monotonic() - start < 5
    assert (res.accepted, res.killed) == (False, "hung")
    assert len(forked) == 1
    # reaped: not running, not a zombie (the worker may have other children of its own,
    # e.g. multiprocessing's resource tracker, so only this child is asked about)
    with pytest.raises(ChildProcessError):
        os.waitpid(forked[0], os.WNOHANG)


def test_a_call_that_raises_is_an_error_not_a_result() -> None:
    def boom() -> VerbResult:
        raise RuntimeError("no pyverbs here")

    with pytest.raises(RuntimeError, match="exit 70"):
        call_in_child(boom)
