"""A device that vanishes mid-run fails the run with one clear error, never a skip.

"Unsupported" is decided once, by the probe at session start: a QP type that
was created then and cannot be created now means the device is lost.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from fixtures import guards
from fixtures.guards import RunGuards
from fixtures.run_state import RunState
from models.enums import QPType
from qpconform.adapters import identity
from qpconform.adapters.pyverbs_device import PyverbsDevice, _Probe
from qpconform.engine.device import DeviceLost, UnsupportedQPType
from reports.html import verdict_line
from reports.qualification import INCOMPLETE, build_report, verdict


def probed_device(monkeypatch, tmp_path: Path, present: bool) -> PyverbsDevice:
    """A PyverbsDevice whose probe found RC supported and XRC_SEND not, and whose
    create now fails the way a removed rxe0 fails (no errno: 'Failed to find device')."""
    sysfs = tmp_path / "infiniband"
    (sysfs / "rxe0").mkdir(parents=True) if present else sysfs.mkdir()
    monkeypatch.setattr(identity, "SYSFS_IB", sysfs)
    device = object.__new__(PyverbsDevice)
    device.name = "rxe0"
    device._probe = _Probe(
        supported=[QPType.RC], reasons={QPType.XRC_SEND: "XRC_SEND unsupported: EOPNOTSUPP"}
    )

    def build(qp_type, *_options):
        raise UnsupportedQPType(
            f"{qp_type.name} unsupported by rxe0: create -> no errno (Failed to find device rxe0)"
        )

    device._build_qp = build
    device._listed_at_open = True
    return device


def test_a_type_supported_at_start_that_fails_later_is_a_lost_device(monkeypatch, tmp_path):
    device = probed_device(monkeypatch, tmp_path, present=False)
    with pytest.raises(DeviceLost) as exc:
        device.create_qp(QPType.RC)
    text = str(exc.value)
    assert "rxe0" in text and "create_qp(RC) worked at session start" in text
    assert "gone from" in text and "Failed to find device" in text


def test_the_message_says_when_the_kernel_still_lists_the_device(monkeypatch, tmp_path):
    device = probed_device(monkeypatch, tmp_path, present=True)
    with pytest.raises(DeviceLost, match="still listed by the kernel"):
        device.create_qp(QPType.RC)


def test_a_type_the_probe_could_not_create_stays_a_reported_skip(monkeypatch, tmp_path):
    device = probed_device(monkeypatch, tmp_path, present=True)
    with pytest.raises(UnsupportedQPType, match="EOPNOTSUPP"):
        device.create_qp(QPType.XRC_SEND)


def test_a_device_gone_before_the_probe_is_lost_not_every_type_unsupported(
    monkeypatch, tmp_path
):
    device = probed_device(monkeypatch, tmp_path, present=False)
    device._probe = None
    with pytest.raises(DeviceLost, match="the probe's create_qp"):
        device.supported_qp_types()


def test_a_device_the_kernel_never_listed_is_probed_as_before(monkeypatch, tmp_path):
    device = probed_device(monkeypatch, tmp_path, present=False)
    device._probe = None
    device._listed_at_open = False
    assert device.supported_qp_types() == []
    assert "Failed to find device" in device.unsupported_reason(QPType.RC)


def fake_item(device: str | None):
    config = NS(getoption=lambda name, default=None: device if name == "device" else default)
    return NS(config=config, session=NS(shouldstop=False))


def test_device_lost_stops_the_session_and_marks_the_record(monkeypatch, tmp_path):
    monkeypatch.setattr(guards, "device_present", lambda name: True)
    recorder = NS(settings={})
    item = fake_item("rxe0")
    call = NS(excinfo=NS(value=DeviceLost("device rxe0: create_qp(RC) ... gone")))
    RunGuards(RunState(recorder=recorder)).stop_if_device_lost(item, call, NS(failed=True))
    assert "device rxe0: create_qp(RC)" in item.session.shouldstop
    assert "never a skip" in item.session.shouldstop
    assert recorder.settings["aborted"] == "device rxe0: create_qp(RC) ... gone"


def test_any_failure_with_the_device_gone_stops_the_session(monkeypatch):
    monkeypatch.setattr(guards, "device_present", lambda name: False)
    item = fake_item("rxe0")
    error = NS(excinfo=NS(value=OSError(5, "EIO")))
    RunGuards(RunState()).stop_if_device_lost(item, error, NS(failed=True))
    assert "device rxe0 is gone" in item.session.shouldstop


def test_a_failure_with_the_device_present_does_not_stop(monkeypatch):
    monkeypatch.setattr(guards, "device_present", lambda name: True)
    item = fake_item("rxe0")
    run_guards = RunGuards(RunState())
    run_guards.stop_if_device_lost(item, NS(excinfo=NS(value=AssertionError())), NS(failed=True))
    run_guards.stop_if_device_lost(item, NS(excinfo=None), NS(failed=False))
    assert item.session.shouldstop is False


def test_a_stopped_run_is_incomplete_never_conformant():
    run = {
        "settings": {"aborted": "device rxe0 is gone from /sys/class/infiniband"},
        "steps": [
            {
                "qp_type": "RC",
                "verb": "modify",
                "state_before": "RESET",
                "target": "INIT",
                "result": "match",
                "count": 40,
                "rules": {},
            }
        ],
        "divergences": [],
        "identity": {"device": "rxe0"},
    }
    assert verdict(run)["code"] == INCOMPLETE
    line = verdict_line(build_report(run))
    assert "INCOMPLETE" in line and "stopped early: device rxe0 is gone" in line
    run["settings"] = {}
    assert verdict(run)["code"] != INCOMPLETE
