"""`qpconform vm --host-engine` end to end (boots the VM; set QPCONFORM_VM_TESTS=1): pytest
runs suites on this host, each xdist worker against its own executor session in the
guest, with the same verdict rules as a run inside; two such runs of the ci profile (the
lone and the traffic machine, lone QPs and pairs) give the same verdict and divergences
(`qpconform report --same`: the main job runs every suite this way); a session nobody
opens is ended by the runner, so the guest powers off at once instead of waiting out the
executor's 600 s for a host; --then-in-guest runs inside the same guest once the host's
COMMAND ended. One boot for all of it. The five-run measurement of the whole suite is
`scripts/determinism.sh` (docs/measured.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

from tests.vm_helpers import REPO, VM_ONLY, out_dir

pytestmark = VM_ONLY

#: COMMAND ($0 is this host's python): two runs of pytest -n 2, each on two of the five
#: sessions (--executor picks them), the fifth left unused.
TWO_RUNS_OF_FIVE = """
py=$0
set -- $(echo "$QPCONFORM_EXECUTORS" | tr , ' ')
for run in 1 2; do
    if [ $run = 1 ]; then sessions="$1,$2"; else sessions="$3,$4"; fi
    QPCONFORM_OUT_DIR="$OUT/run$run" "$py" -m pytest suites/test_stateful.py \
        suites/test_post_rules.py suites/test_traffic_stateful.py --device rxe0 -n 2 \
        --executor "$sessions" \
        --hypothesis-profile ci -p no:cacheprovider -q > "$OUT/run$run.log" 2>&1
    echo "RUN-$run $?"
done
"""


#: --then-in-guest: inside the same guest once the sessions and the host's COMMAND ended
#: (it reads the status COMMAND left), with the device there.
GUEST_PART = 'echo "GUEST-PART after $(cat {out}/host-part-ended)"; rdma link show rxe0/1'


def test_runs_on_the_host_each_worker_with_its_session_repeat_and_end_unused_ones() -> None:
    out = out_dir("selftest-host-engine")
    env = dict(os.environ, OUT=str(out))
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "qpconform", "vm", "--host-engine", "5", "--log-dir", str(out),
         "--timeout", "900", "--then-in-guest", GUEST_PART.format(out=out), "--",
         "sh", "-c", TWO_RUNS_OF_FIVE, sys.executable],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1200,
    )
    took = time.monotonic() - started
    print(result.stdout[-3000:])
    print(result.stderr[-3000:], file=sys.stderr)
    text = result.stdout + result.stderr
    assert re.findall(r"RUN-(\d) 0", text) == ["1", "2"], text[-2000:]
    assert "GUEST-PART after 0" in text and "link rxe0/1" in text  # one boot, both parts
    assert result.returncode == 0, text[-2000:]
    assert took < 400, took  # the unused fifth session did not keep the guest up 600 s
    assert "qpconform executor: leak check: nothing leaked" in text  # in the guest, at its end
    for run in ("run1", "run2"):
        assert "qpconform verdict for rxe0: CONFORMANT" in (out / f"{run}.log").read_text()
        records = [json.loads(p.read_text()) for p in sorted((out / run).glob("run-host-gw*"))]
        assert len(records) == 2  # a session per worker (a session serves one process)
        assert all(r["identity"]["engine"] == "on the host, the device behind an executor"
                   for r in records)
        assert all(r["identity"]["kernel"].startswith("6.") for r in records)  # the guest's
        verdict = json.loads((out / run / "report.json").read_text())["verdict"]
        assert verdict["divergences"] == 0 and not verdict["aborted"], verdict  # none unknown
        assert verdict["steps"] > 500, verdict
    same = subprocess.run(
        [sys.executable, "-m", "qpconform", "report", "--same", str(out / "run1"),
         str(out / "run2")],
        cwd=REPO, capture_output=True, text=True,
    )
    print(same.stdout, same.stderr)
    assert same.returncode == 0 and "SAME: 2 runs" in same.stdout, same.stdout + same.stderr
