"""`qpconform vm --host-engine` end to end (boots the VM; set QPCONFORM_VM_TESTS=1): pytest
runs lone-QP suites on this host, each xdist worker against its own executor session in
the guest, with the same verdict rules as a run inside; a session nobody opens is ended
by the runner, so the guest powers off at once instead of waiting out the executor's
600 s for a host. One boot for both (the main job runs the same path on both releases:
scripts/conformance.sh, part 1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from tests.vm_helpers import REPO, VM_ONLY, out_dir

pytestmark = VM_ONLY

#: COMMAND: pytest -n 2 on the first two of three sessions, the third left unused.
TWO_OF_THREE = (
    'QPCONFORM_EXECUTORS="${QPCONFORM_EXECUTORS%,*}" exec "$0" -m pytest '
    "suites/test_stateful.py suites/test_post_rules.py --device rxe0 -n 2 "
    "--hypothesis-profile ci -p no:cacheprovider -q"
)


def test_workers_run_on_the_host_each_with_its_session_an_unused_one_is_ended() -> None:
    out = out_dir("selftest-host-engine")
    env = dict(os.environ, QPCONFORM_OUT_DIR=str(out))
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "qpconform", "vm", "--host-engine", "3", "--log-dir", str(out),
         "--timeout", "900", "--", "sh", "-c", TWO_OF_THREE, sys.executable],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1200,
    )
    took = time.monotonic() - started
    print(result.stdout[-3000:])
    print(result.stderr[-3000:], file=sys.stderr)
    text = result.stdout + result.stderr
    assert result.returncode == 0, text[-2000:]
    assert took < 300, took  # the unused third session did not keep the guest up 600 s
    assert "qpconform verdict for rxe0: CONFORMANT" in text
    assert "qpconform executor: leak check: nothing leaked" in text  # in the guest, at its end
    records = [json.loads(p.read_text()) for p in sorted(out.glob("run-host-gw*.json"))]
    assert len(records) == 2  # a session per worker (a session serves one process)
    assert all(r["identity"]["engine"] == "on the host, the device behind an executor"
               for r in records)
    assert all(r["identity"]["kernel"].startswith("6.") for r in records)  # the guest's
    verdict = json.loads((out / "report.json").read_text())["verdict"]
    assert verdict["divergences"] == 0 and not verdict["aborted"], verdict  # none unknown
    assert verdict["steps"] > 500, verdict
