"""Allure labels, attachments and environment.properties, checked in a real pytest run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from models.sources import Rule, Source
from qpconform.engine.records import Divergence
from reports import allure_labels

REPO = Path(__file__).resolve().parents[1]
IDENTITY = {
    "device": "rxe0",
    "fw_ver": "1.2.3",
    "node_guid": "5054:00ff:fe12:3456",
    "driver": "rdma_rxe",
    "kernel": "6.1.0",
}

LABELLED_TEST = """
from models.variant import variant
from models.enums import QPState, QPType
from reports import allure_labels

def test_rts(tmp_path):
    allure_labels.set_device({identity!r})
    rule = variant("linux").table.lookup(QPType.RC, QPState.RTR, QPState.RTS).rule
    allure_labels.label_test("transitions", QPType.RC, "RTR->RTS", rule)
    script = tmp_path / "repro.py"
    script.write_text("print('reproduce')\\n")
    allure_labels.attach_divergence({{"qp_type": "RC", "verb": "modify", "state": "RTR",
        "rule_id": rule.id, "expected": "accept", "observed": "refused (EINVAL)",
        "steps": [{{"verb": "modify", "mask": ["STATE"]}}], "reproducer": str(script)}})
    assert False, "divergence"
"""


def test_source_url_and_device_parameters() -> None:
    kernel = Source("linux drivers/infiniband/core/verbs.c", "qp_state_table")
    assert allure_labels.source_url(kernel).endswith("/drivers/infiniband/core/verbs.c")
    assert allure_labels.source_url(Source("IBTA Vol. 1", "ch. 10.3.1")) is None
    assert allure_labels.device_parameters(IDENTITY) == {
        "device": "rxe0",
        "firmware": "1.2.3",
        "node_guid": "5054:00ff:fe12:3456",
        "driver": "rdma_rxe",
    }


def test_divergence_text_takes_a_record_or_a_dict() -> None:
    rule = Rule("ibta.post_send.INIT", "post_send in INIT: refused", Source("IBTA", "10.3.1"))
    d = Divergence(
        "RC",
        "INIT",
        "post_send",
        {},
        [],
        "refuse",
        "accepted",
        rule.id,
        rule.summary,
        str(rule.source),
        IDENTITY,
        [],
        known_quirk="q1",
    )
    text = allure_labels.divergence_text(d)
    assert "RC post_send in INIT: ibta.post_send.INIT" in text and "known quirk: q1" in text
    assert allure_labels.divergence_text(d.to_dict()) == text


def test_environment_properties(tmp_path: Path) -> None:
    path = allure_labels.write_environment(
        {**IDENTITY, "gid": "fe80::1"}, {"variant": "linux", "qp_types": ["RC", "UD"]}, tmp_path
    )
    lines = path.read_text().splitlines()
    assert "device.device=rxe0" in lines and "run.qp_types=RC,UD" in lines
    assert "device.gid=fe80::1" in lines
    assert [p.name for p in tmp_path.iterdir()] == ["environment.properties"]


def test_labels_parameters_and_attachments_in_allure_results(tmp_path: Path) -> None:
    pytest.importorskip("allure_pytest")
    (tmp_path / "test_labelled.py").write_text(LABELLED_TEST.format(identity=IDENTITY))
    results = tmp_path / "allure-results"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--alluredir={results}",
            "test_labelled.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1, run.stdout + run.stderr  # the test fails on purpose
    [result] = [json.loads(p.read_text()) for p in results.glob("*-result.json")]
    labels = {(lb["name"], lb["value"]) for lb in result["labels"]}
    assert {
        ("epic", "QP state machine"),
        ("feature", "transitions"),
        ("story", "RC RTR->RTS"),
        ("rule", "linux.transition.RC.RTR->RTS"),
    } <= labels
    assert any(name == "spec" and "verbs.c" in value for name, value in labels)
    params = {p["name"]: p["value"] for p in result["parameters"]}
    assert params["device"] == "'rxe0'" or params["device"] == "rxe0"
    assert "firmware" in params and "node_guid" in params
    assert result["links"] and result["links"][0]["url"].endswith("core/verbs.c")
    names = [a["name"] for a in result["attachments"]]
    assert "divergence" in names and "repro.py" in names
    assert any(n.startswith("shrunk steps") for n in names)
