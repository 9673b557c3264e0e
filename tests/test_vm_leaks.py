"""End to end: the leak check on rxe0 in the VM (slow; QPCONFORM_VM_TESTS=1).

A clean run (-n 2) ends with the kernel's counts where they began, and so do serial
runs that end badly: a divergence found and shrunk on the device (no quirks, so
rxe's known divergences are unknown), a test stopped by its timeout, and Ctrl-C. A
test that keeps a context and a PD makes the run fail, naming what grew.
"""

from __future__ import annotations

import json
import re

from tests.vm_helpers import VM_ONLY, out_dir, run_in_vm

pytestmark = VM_ONLY

LEAKY_TEST = """
import pyverbs.device
import pyverbs.pd

KEPT = []


def test_keeps_a_context_and_a_pd(device):
    ctx = pyverbs.device.Context(name="rxe0")
    KEPT.append((ctx, pyverbs.pd.PD(ctx)))
"""

GUEST = """
run() {{ QPCONFORM_OUT_DIR={out}/$1 python3 -m pytest $2 --device rxe0 --qp-type RC \
    --hypothesis-profile ci -p no:cacheprovider -q $3; echo "RC-$1 $?"; }}
# Ctrl-C once the stateful test holds a QP of its own (mid-test, verbs objects live; a fixed
# delay after the session's context could land before the test began, on a slow TCG guest)
# (a background job of a script ignores SIGINT: the exec gives pytest SIGINT back)
UNIGNORE='import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); \
os.execvp(sys.argv[1], sys.argv[1:])'
interrupt() {{ QPCONFORM_OUT_DIR={out}/interrupted python3 -c "$UNIGNORE" python3 -m pytest \
    suites/test_stateful.py --device rxe0 --qp-type RC --hypothesis-profile ci \
    -p no:cacheprovider -q & pid=$!
    for i in $(seq 1 240); do rdma resource show qp | grep -q python3 && break; sleep 0.5; done
    sleep 1; kill -INT $pid && echo "INTERRUPT-SENT"; wait $pid; echo "RC-interrupted $?"; }}
run xdist suites/test_post_rules.py "-n 2"
run diverged suites/test_stateful.py "--quirks none"
run timeout suites/test_stateful.py "--timeout 8"
interrupt
run leaky {leaky} ""
"""
#: Runs that end badly and must still leave the kernel's counts where they began.
FAILING = ("diverged", "timeout", "interrupted")


def test_leak_check_passes_clean_runs_and_fails_a_leaking_one():
    out = out_dir("selftest-leaks")
    leaky = out / "leaky" / "test_leaky.py"
    leaky.parent.mkdir()
    leaky.write_text(LEAKY_TEST)
    text = run_in_vm(out, GUEST.format(out=out, leaky=leaky)).stdout
    status = dict(re.findall(r"RC-(\w+) (\d+)", text))
    assert status.get("xdist") == "0", "the clean run failed"
    settings = json.loads((out / "xdist" / "report.json").read_text())["settings"]
    assert settings["leak_check"] == "no growth"
    for failing in FAILING:
        assert status.get(failing) not in (None, "0"), f"the {failing} run did not fail"
        settings = json.loads((out / failing / "report.json").read_text())["settings"]
        assert settings["leak_check"] == "no growth", failing
    diverged = json.loads((out / "diverged" / "report.json").read_text())
    assert diverged["divergences"], "without quirks, rxe's known divergences must be unknown"
    assert "SuiteTestTimedOut: Timeout" in text  # the timeout run really timed out
    assert "INTERRUPT-SENT" in text
    for unfinished in ("timeout", "interrupted"):
        verdict = json.loads((out / unfinished / "report.json").read_text())["verdict"]
        assert verdict["code"] == "incomplete", (unfinished, verdict)
    assert status.get("leaky") not in (None, "0")
    leak_line = next(line for line in text.splitlines() if "leaked verbs objects on rxe0" in line)
    assert "pd " in leak_line and "ctx " in leak_line
