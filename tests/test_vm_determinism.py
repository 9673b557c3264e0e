"""End to end: the ci profile repeats itself on rxe0 (slow; QPCONFORM_VM_TESTS=1).

Two runs of the lone state machine (the random-driven suite; the traffic machine is
seeded the same way) in one VM boot, -n 2 as the main job runs them, must give the same
verdict and the same divergences (`qpconform report --same`). The five-run measurement
of the whole suite is `scripts/determinism.sh` (docs/measured.md).
"""

from __future__ import annotations

import re
import subprocess
import sys

from tests.vm_helpers import REPO, VM_ONLY, out_dir, run_in_vm

pytestmark = VM_ONLY

GUEST = """
for i in 1 2; do
    QPCONFORM_OUT_DIR={out}/run$i python3 -m pytest suites/test_stateful.py \
        --device rxe0 --hypothesis-profile ci -n 2 \
        -p no:cacheprovider -q > {out}/run$i.log 2>&1
    echo "RUN-$i $?"
done
"""


def test_two_ci_runs_give_the_same_verdict_and_divergences():
    out = out_dir("selftest-determinism")
    text = run_in_vm(out, GUEST.format(out=out)).stdout
    assert re.findall(r"RUN-(\d) \d+", text) == ["1", "2"], "the guest did not finish both runs"
    same = subprocess.run(
        [sys.executable, "-m", "qpconform", "report", "--same", str(out / "run1"),
         str(out / "run2")],
        cwd=REPO, capture_output=True, text=True,
    )
    print(same.stdout, same.stderr)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "SAME: 2 runs" in same.stdout
