"""`qpconform vm --host-engine` end to end (boots the VM; set QPCONFORM_VM_TESTS=1): pytest
runs the lone-QP suites on this host, each xdist worker against its own executor session
in the guest, with the same verdict rules as a run inside; a run that cannot start ends
at once, the guest powered off instead of waiting for sessions nobody opens."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from tests.vm_helpers import REPO, VM_ONLY, out_dir

pytestmark = VM_ONLY

LONE_SUITES = ["suites/test_stateful.py", "suites/test_transitions.py",
               "suites/test_attributes.py", "suites/test_post_rules.py"]


def host_engine(out, sessions: int, *pytest_args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, QPCONFORM_OUT_DIR=str(out))
    result = subprocess.run(
        [sys.executable, "-m", "qpconform", "vm", "--host-engine", str(sessions), "--log-dir",
         str(out), "--timeout", "900", "--", sys.executable, "-m", "pytest", *LONE_SUITES,
         "--device", "rxe0", "--hypothesis-profile", "ci", "-p", "no:cacheprovider", "-q",
         *pytest_args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1200,
    )
    print(result.stdout[-3000:])
    print(result.stderr[-3000:], file=sys.stderr)
    return result


def test_the_lone_suites_run_on_the_host_against_the_guests_rxe0() -> None:
    out = out_dir("selftest-host-engine")
    result = host_engine(out, 2, "-n", "2")
    text = result.stdout + result.stderr
    assert result.returncode == 0, text[-2000:]
    assert "qpconform verdict for rxe0: CONFORMANT" in text
    assert "qpconform executor: leak check: nothing leaked" in text  # in the guest, at its end
    records = [json.loads(p.read_text()) for p in sorted(out.glob("run-host-gw*.json"))]
    assert len(records) == 2  # a session per worker (a session serves one process)
    assert all(r["identity"]["engine"] == "on the host, the device behind an executor"
               for r in records)
    assert all(r["identity"]["kernel"].startswith("6.") for r in records)  # the guest's
    verdict = json.loads((out / "report.json").read_text())["verdict"]
    assert verdict["divergences"] == 0 and not verdict["aborted"], verdict  # none unknown
    assert verdict["steps"] > 1000, verdict


def test_a_run_that_cannot_start_powers_the_guest_off_at_once() -> None:
    out = out_dir("selftest-host-engine-usage")
    started = time.monotonic()
    result = host_engine(out, 2)  # 2 sessions, one pytest process: a usage error
    assert result.returncode == 4, result.stderr[-2000:]
    assert "2 executor session(s) for one process" in result.stderr
    assert time.monotonic() - started < 240  # not the executor's 600 s wait for a host
