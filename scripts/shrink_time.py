"""How long the lone machine's shrink took on a mutant, and how short its reproducer is.

    qpconform mutants --no-baseline --only ID -- suites/test_stateful.py -p scripts.shrink_time
    .venv/bin/python scripts/shrink_time.py reports/out/mutants/bookworm/ID [...] [--json]

Loaded as a pytest plugin (`-p scripts.shrink_time`, where pytest runs: on the host
against the guest's executor, as the gate runs it, or in the guest with --in-guest), it watches
test_qp_state_machine: a Hypothesis statistics collector (Hypothesis' own
--hypothesis-show-statistics sees only @given tests, not a machine run inside a plain
test) and an observability callback (a wall-clock time, phase, status and, for a failing
example, the verbs its DivergenceError names, per example; line coverage off) go to
$QPCONFORM_OUT_DIR/shrink-stats.json. Run as a script on the record folders, it prints
per mutant the generate and shrink phase seconds of the failing batch, the seconds from
the first failing example to the end of the shrink and to the first failing example as
short as the final one, the seconds after the shrink (the replay of the minimal example,
its report), and the verbs of the stateful test's shrunk unknown divergence
(divergences.json; its reproducer is under reproducers/), counted as `qpconform mutants`
counts them: settle steps (waits, not verbs) left out. docs/shrink.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from hypothesis.internal import observability
from hypothesis.statistics import collector

TEST = "test_qp_state_machine"
STATS = "shrink-stats.json"
#: The verbs of a failing example's divergence, from its message (DivergenceError).
VERBS = re.compile(r"steps \((\d+) verbs?\)")


# --- the pytest plugin (in the guest) -------------------------------------------------


def _phase(stats: dict[str, Any]) -> dict[str, Any]:
    statuses = Counter(c["status"] for c in stats.get("test-cases", []))
    return {
        "seconds": round(stats.get("duration-seconds", 0.0), 3),
        "cases": dict(statuses),
        "shrinks_successful": stats.get("shrinks-successful"),
    }


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, None]:
    """Time every example Hypothesis runs inside the stateful test (observability, without
    its line coverage: no tracer slows the device's steps), and keep its statistics."""
    if item.name != TEST:
        yield
        return
    runs: list[dict[str, Any]] = []
    cases: list[dict[str, Any]] = []

    def note(stats: dict[str, Any]) -> None:
        phases = {k[: -len("-phase")]: _phase(v) for k, v in stats.items() if k.endswith("-phase")}
        runs.append({"noted_at": time.time(), "phases": phases,
                     "stopped_because": stats.get("stopped-because", "")})

    def seen(observation: Any) -> None:
        if getattr(observation, "type", "") == "test_case":
            verbs = VERBS.search(observation.metadata.traceback or "")
            cases.append({"at": time.time(), "status": observation.status,
                          "phase": observation.metadata.phase, "run": len(runs),
                          "verbs": int(verbs.group(1)) if verbs else None})

    started = time.time()
    coverage = observability.OBSERVABILITY_COLLECT_COVERAGE
    observability.OBSERVABILITY_COLLECT_COVERAGE = False
    try:
        with collector.with_value(note), observability.with_observability_callback(seen):
            outcome = yield
    finally:
        observability.OBSERVABILITY_COLLECT_COVERAGE = coverage
    record = {"test": item.nodeid, "started": started, "ended": time.time(),
              "failed": outcome.excinfo is not None, "runs": runs, "cases": cases}
    out = Path(os.environ.get("QPCONFORM_OUT_DIR") or "reports/out")
    (out / STATS).write_text(json.dumps(record, indent=2) + "\n")


# --- the figures (on the host) ---------------------------------------------------------


def shrunk(divergences: Path) -> dict[str, Any]:
    """The stateful test's unknown divergence: its rule, QP type, verbs and reproducer."""
    records = json.loads(divergences.read_text())
    records = records if isinstance(records, list) else records.get("divergences", [])
    unknown = [r for r in records if not r.get("known_quirk") and TEST in (r.get("test") or "")]
    if not unknown:
        return {}
    r = min(unknown, key=lambda r: len(r.get("steps", [])))
    verbs = [s for s in r.get("steps", []) if s.get("verb") != "settle"]
    return {
        "rule": r.get("rule_id", ""),
        "qp_type": r.get("qp_type", ""),
        "verbs": len(verbs),
        "verb_list": [s.get("verb") for s in verbs],
        "kernel": (r.get("device") or {}).get("kernel", ""),
        "reproducer": r.get("reproducer", ""),
    }


def measure(folder: Path) -> dict[str, Any]:
    """The figures of one mutant's record folder (the last, failing, engine run)."""
    result: dict[str, Any] = {"mutant": folder.name}
    stats = json.loads((folder / STATS).read_text())
    last = stats["runs"][-1] if stats["runs"] else {"phases": {}, "noted_at": stats["ended"]}
    phases = last["phases"]
    result["generate_s"] = phases.get("generate", {}).get("seconds")
    result["generate_cases"] = phases.get("generate", {}).get("cases")
    shrink = phases.get("shrink", {})
    result["shrink_s"] = shrink.get("seconds")
    result["shrink_cases"] = shrink.get("cases")
    result["shrinks_successful"] = shrink.get("shrinks_successful")
    result.update(shrunk(folder / "divergences.json"))
    run = len(stats["runs"]) - 1  # the failing engine run is the last one
    failed = [c for c in stats["cases"] if c["run"] == run and c["status"] == "failed"]
    if failed:  # the first failing example's end to the end of the shrink (statistics noted)
        result["first_failure_to_shrunk_s"] = round(last["noted_at"] - failed[0]["at"], 3)
        result["failing_examples"] = len(failed)
        result["verbs_per_failure"] = [c.get("verbs") for c in failed]
        final = result.get("verbs")
        reached = next((c for c in failed if final is not None and c.get("verbs") == final), None)
        if reached:  # when a failing example first had the shrunk reproducer's length
            result["first_failure_to_final_verbs_s"] = round(reached["at"] - failed[0]["at"], 3)
    result["after_shrink_s"] = round(stats["ended"] - last["noted_at"], 3)
    result["test_s"] = round(stats["ended"] - stats["started"], 3)
    result["stopped_because"] = last.get("stopped_because", "")
    return result


def row(m: dict[str, Any]) -> str:
    """One Markdown row of the measured figures."""

    def num(key: str) -> str:
        value = m.get(key)
        return "-" if value is None else f"{value:.1f}" if isinstance(value, float) else str(value)

    tried = sum((m.get("shrink_cases") or {}).values())
    return (f"| {m['mutant']} | `{m.get('rule', '-')}` | {num('generate_s')} "
            f"| {num('first_failure_to_shrunk_s')} | {num('first_failure_to_final_verbs_s')} "
            f"| {num('shrink_s')} | {num('after_shrink_s')} "
            f"| {num('test_s')} | {num('shrinks_successful')}/{tried} | {num('verbs')} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("folders", nargs="+", type=Path, help="reports/out/mutants/RELEASE/ID")
    parser.add_argument("--json", action="store_true", help="JSON instead of Markdown rows")
    args = parser.parse_args(argv)
    found = [measure(f) for f in args.folders]
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    print("| mutant | rule | generate s | first failure to shrunk s | to final length s "
          "| shrink phase s | after shrink s | test s | shrinks ok/tried | verbs |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for m in found:
        print(row(m))
    return 0


if __name__ == "__main__":
    sys.exit(main())
