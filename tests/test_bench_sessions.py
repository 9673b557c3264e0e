"""`qpconform bench --vm --sessions N`: engines side by side, each in its own process with its
own executor session; served here by fake devices behind executors on unix sockets (the
VM's virtio-serial ports are unix sockets on the host too)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from qpconform import bench, cli
from tests.fake_device import FakeDevice
from tests.remote_fake import remote, serve_session


@contextmanager
def served(device: Any, path: Path) -> Iterator[threading.Thread]:
    """`device` behind an executor listening at `path` for one host session."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)

    def serve() -> None:
        serve_session(device, listener.accept()[0])

    thread = threading.Thread(target=serve, name="fake-executor-session", daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        thread.join(30.0)
        listener.close()


def test_two_engines_side_by_side_each_run_their_own_sequences(tmp_path: Path) -> None:
    here, there = FakeDevice(), FakeDevice()
    with served(there, tmp_path / "s1.sock") as thread, remote(here) as device:
        result = bench.side_by_side(device, 2.0, [str(tmp_path / "s1.sock")], cli.bench_tuning())
    assert not thread.is_alive()  # the other session said bye
    assert result["sessions"] == 2
    each = result["per_session"]
    assert all(r["steps"] > 0 for r in each), each
    assert all(r["cpu_ms_per_step"] > 0 for r in each), each  # each process's own CPU
    assert result["steps"] == sum(r["steps"] for r in each)
    # the aggregate is over the common wall-clock window: never more than the sum of rates
    assert result["steps_per_s_wall"] <= sum(r["steps_per_s"] for r in each) + 0.1
    assert 0 < result["window_steps"] <= result["steps"]
    assert 0 < result["window_seconds"] <= result["seconds"]
    assert result["seconds"] >= 2.0
    assert here.live == [] and there.live == []  # each executor freed its QPs
    # other seeds: the two sessions created other sequences of QP types
    ours, theirs = [q.qp_type for q in here.qps], [q.qp_type for q in there.qps]
    common = min(len(ours), len(theirs))
    assert ours[:common] != theirs[:common]


def test_a_divergence_in_another_session_stops_the_benchmark(tmp_path: Path) -> None:
    there = FakeDevice(["misreport_state"])
    with served(there, tmp_path / "s1.sock"), remote(FakeDevice()) as device, \
            pytest.raises(RuntimeError, match="side-by-side session 1: DivergenceError"):
        bench.side_by_side(device, 2.0, [str(tmp_path / "s1.sock")], cli.bench_tuning())


def _session(start: float, rate: float, steps: int) -> dict[str, Any]:
    stamps = [start + (i + 1) / rate for i in range(steps)]
    return {"steps": steps, "steps_per_s": rate, "started_at": start, "ended_at": stamps[-1],
            "stamps": stamps}


def test_sessions_combine_over_the_window_in_which_all_ran() -> None:
    # A: 10 steps/s from t=100 for 30 s; B: 10 steps/s from t=101, its last batch ending
    # at t=135: both ran from 101 to 130; B's lone tail and A's idle wait do not count
    result = bench.combined([_session(100.0, 10.0, 300), _session(101.0, 10.0, 340)])
    assert result["window_seconds"] == 29.0
    assert result["window_steps"] == 290 + 290  # A's steps after 101, B's before 130
    assert result["steps_per_s"] == 20.0  # two engines at 10 each
    assert result["steps"] == 640 and result["seconds"] == 35.0
    assert result["steps_per_s_wall"] == round(640 / 35.0, 1)  # less: the tail was one engine
    assert all("stamps" not in r and "started_at" not in r for r in result["per_session"])
