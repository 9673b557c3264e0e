"""Quiet windows per device family, and the report's warning when a delivery outran them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fixtures.record_writer import record_timing
from qpconform import cli
from qpconform.engine.timing import WINDOWS_FILE, DeliveryLog, Windows, load_windows


def test_the_shipped_table_has_rxe_and_a_default() -> None:
    rxe = load_windows("rxe")
    assert rxe.source.startswith("windows.toml [rxe]")
    other = load_windows("mlx5")
    assert other.source.startswith("windows.toml [default]")
    assert 0 < rxe.quiet <= rxe.must_wait
    assert WINDOWS_FILE.is_file()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[default]\nquiet_window = 0.1\n", "must be numbers"),
        ("[default]\nquiet_window = 'soon'\nmust_wait = 1\n", "must be numbers"),
        ("[default]\nquiet_window = 2\nmust_wait = 1\n", "event_window <= must_wait"),
        ("[rxe]\nquiet_window = 0.1\nmust_wait = 1\n", "no [mlx5] and no [default]"),
        ("quiet_window = [", "cannot read"),
    ],
)
def test_a_bad_table_is_a_clear_error(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "windows.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        load_windows("mlx5", path)


class _Recorder:
    def __init__(self) -> None:
        self.settings: dict[str, Any] = {}


def test_a_delivery_slower_than_the_window_is_flagged() -> None:
    log = DeliveryLog()
    log.add("completion", 0.002)
    log.add("event", 0.150)
    rec = _Recorder()
    record_timing(rec, log, Windows(0.1, 1.0, "test"))
    assert "quiet window 100 ms" in rec.settings["windows"]
    assert "150 ms" in rec.settings["timing_warning"]
    fast = _Recorder()
    log.samples["event"] = [0.01]
    record_timing(fast, log, Windows(0.1, 1.0, "test"))
    assert "timing_warning" not in fast.settings
    assert "events: 1" in fast.settings["delivery_latency"]


def test_bench_refuses_a_bad_duration(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["bench", "--device", "rxe0", "--seconds", "-3"])
    assert "positive number of seconds" in capsys.readouterr().err


def test_bench_without_pyverbs_says_how_to_get_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    if importlib.util.find_spec("pyverbs") is not None:
        pytest.skip("pyverbs is installed here: the missing-pyverbs message cannot be shown")
    assert cli.main(["bench", "--device", "rxe0", "--seconds", "1"]) == 4
    assert "pyverbs" in capsys.readouterr().err
