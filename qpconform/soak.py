"""``qpconform soak``: the newcomer's run, many times, each with a fresh random seed.

The derandomized ``ci`` profile draws the same examples every run, so it can stay
green while the first random run a newcomer makes fails. A soak runs the suites
with a random profile (default ``default``) on each target (a guest release and a
software driver: ``trixie/rxe``, ``bookworm/siw``...) once per seed, each in its own
VM boot, and lists each run's verdict, its unknown divergences (test and rule) and
the exact command that replays it. Seeds are fresh unless given (``--seed``, to
replay the seeds of an earlier soak or an issue). On stock drivers every unknown
divergence it lists is a finding: a new real behaviour (a quirk with evidence and a
near miss) or a model or harness fix, never noise.

With ``--profile ci`` every run draws the same examples (derandomized: no seed), and
``--busy N`` keeps N busy loops running on the host beside each run: the check that a
saturated host changes no verdict, divergence or quirk (compare the runs' folders with
``qpconform report --same``).

Results: ``<output>/soak.json``, ``<output>/<target>-<seed>/`` (each run's records and
report) and the Markdown table (``--markdown``, default docs/soak.md).
Exit status 0 when every run was conformant (known divergences allowed), 1 when
any run was not, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from qpconform.vm.host_engine import ALL_SUITES, HOST_ENGINE_DRIVERS, PEER_DEVICE
from reports import html
from reports.divergence import read_divergences
from reports.junit import read_junit

PROJECT = Path(__file__).resolve().parent.parent
#: pytest-xdist workers of each run (a host-engine run: one executor session each).
WORKERS = 2
DRIVERS = ("rxe", "siw")
#: qpconform/vm/image.py RELEASES (a self-test checks)
RELEASES = ("bookworm", "trixie", "trixie-backports")
DEFAULT_TARGETS = ("bookworm/rxe:5", "trixie/rxe:5", "trixie/siw:3")
#: The derandomized profile: its runs take no seed (each is labelled by its number).
DERANDOMIZED = "ci"


@dataclass(frozen=True)
class Target:
    """One guest release and software driver, run `runs` times with fresh seeds, or once
    per seed of `seeds` (a replay of seeds found earlier)."""

    release: str
    driver: str
    runs: int
    seeds: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.release}/{self.driver}"


_TARGET_FORM = "RELEASE/DRIVER[:RUNS|@SEED,SEED...]"


def parse_target(text: str) -> Target:
    """RELEASE/DRIVER[:RUNS] (fresh seeds) or RELEASE/DRIVER@SEED,SEED... (these seeds),
    e.g. trixie/rxe:5, trixie/rxe@408919583; ArgumentTypeError naming the allowed values."""
    spec, at, seeds = text.partition("@")
    spec, _, count = spec.partition(":")
    release, _, driver = spec.partition("/")
    if release not in RELEASES or driver not in DRIVERS:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give {_TARGET_FORM} with RELEASE one of {', '.join(RELEASES)} "
            f"and DRIVER one of {', '.join(DRIVERS)}, e.g. trixie/rxe:5 or trixie/rxe@408919583"
        )
    if at:
        if count or not all(s.strip().isdigit() for s in seeds.split(",")):
            raise argparse.ArgumentTypeError(
                f"{text!r}: after @ give whole-number seeds separated by commas ({_TARGET_FORM})"
            )
        chosen = tuple(int(s) for s in seeds.split(","))
        return Target(release, driver, len(chosen), chosen)
    runs = int(count) if count.isdigit() else 0 if count else 5
    if runs < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: RUNS must be a whole number >= 1")
    return Target(release, driver, runs)


@dataclass
class SoakRun:
    """What one seeded run on one target gave."""

    target: str
    seed: int
    verdict: str = "error"
    exit_status: int = 0
    wall_seconds: float = 0.0
    passed: int = 0
    failed: int = 0
    known: int = 0
    unknown: list[dict[str, Any]] = field(default_factory=list)  # test, rule, count
    replay: str = ""
    stateful_batches: str = ""  # the batches each stateful test ran (fixtures/budget.py)
    out_dir: str = ""


def on_host(target: Target) -> bool:
    """Does the main job run this target's suites with their engine on this host?"""
    return target.driver in HOST_ENGINE_DRIVERS


def pytest_command(target: Target, seed: int, profile: str, extra: list[str],
                   python: str = "python") -> list[str]:
    """The suite run of the main job (scripts/conformance.sh) with a given seed: on this host
    against the guest's executor (`python`: this host's, with the project's packages; siw's
    second device is the executor's), or inside the guest for a driver that does not run so."""
    device = f"{target.driver}0"
    if on_host(target):
        cmd = [python, "-m", "pytest", *ALL_SUITES, "--device", device]
    else:
        cmd = ["python3", "-m", "pytest", "suites/", "--device", device]
        if target.driver in PEER_DEVICE:  # iWARP: a connection needs a second device
            cmd += ["--peer-device", PEER_DEVICE[target.driver]]
    cmd += ["--hypothesis-profile", profile]
    if profile != DERANDOMIZED:
        cmd.append(f"--hypothesis-seed={seed}")
    cmd += ["-n", str(WORKERS), "-p", "no:cacheprovider", "-q", *extra]
    return cmd


def vm_options(target: Target) -> list[str]:
    """`qpconform vm`'s options for the target's run (the executor sessions, on the host)."""
    sessions = ["--host-engine", str(WORKERS)] if on_host(target) else []
    return ["--release", target.release, "--driver", target.driver, *sessions]


@contextmanager
def busy_loops(count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`count` processes spinning on the host's CPUs for the duration (a saturated host
    beside the VM); stopped on the way out, also on failure and Ctrl-C."""
    spinning = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(count)]
    try:
        yield spinning
    finally:
        for proc in spinning:
            proc.kill()
        for proc in spinning:
            proc.wait()


def run_one(target: Target, seed: int, profile: str, extra: list[str], root: Path,
            timeout: float) -> SoakRun:
    """One VM boot running the suites with `seed`; its records and report in their folder."""
    out_dir = root / f"{target.release}-{target.driver}-{seed}"
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    inner = pytest_command(target, seed, profile, [*extra, f"--junitxml={out_dir / 'junit.xml'}"],
                           python=sys.executable)
    # the records go to out_dir from wherever pytest runs (the host: its environment)
    logs = out_dir / "vm" if on_host(target) else out_dir
    cmd = [sys.executable, "-m", "qpconform", "vm", *vm_options(target), "--timeout",
           str(timeout), "--log-dir", str(logs), "--env", f"QPCONFORM_OUT_DIR={out_dir}", "--",
           *inner]
    started = time.monotonic()
    with open(out_dir / "console.txt", "w") as console:
        status = subprocess.run(cmd, cwd=PROJECT, stdout=console, stderr=subprocess.STDOUT,
                                env=dict(os.environ, QPCONFORM_OUT_DIR=str(out_dir))).returncode
    result = SoakRun(target.name, seed, exit_status=status,
                     wall_seconds=round(time.monotonic() - started, 1), out_dir=str(out_dir))
    summarise(result, out_dir)
    result.replay = replay_command(target, seed, profile, extra, result.stateful_batches)
    return result


def replay_command(target: Target, seed: int, profile: str, extra: list[str],
                   batches: str) -> str:
    """The command that replays one run: its seed and the batches each stateful test ran
    (the time budget would cut a replay's batches elsewhere: fixtures/seeds.py)."""
    more = ["--stateful-batches", batches] if batches else []
    return (f"qpconform vm {' '.join(vm_options(target))} -- "
            + " ".join(pytest_command(target, seed, profile, [*extra, *more])))


def summarise(result: SoakRun, out_dir: Path) -> None:
    """Verdict, test counts and unknown divergences of one run, from its records."""
    junit = read_junit(out_dir / "junit.xml")
    failed = junit.failed
    result.failed, result.passed = len(failed), junit.passed
    try:
        report, _, _ = html.write_reports([str(out_dir)], str(out_dir))
        result.verdict = report["verdict"]["text"]
        result.stateful_batches = report["settings"].get("stateful_batches", "")
    except (OSError, ValueError) as exc:
        result.verdict = f"no report: {exc}"
    try:
        records = read_divergences(out_dir / "divergences.json")
    except (OSError, ValueError):
        records = []
    result.known = sum(1 for d in records if d.get("known_quirk"))
    counts: dict[tuple[str, str], int] = {}
    for d in records:
        if not d.get("known_quirk"):
            key = ((d.get("test") or "").split("::")[-1], d.get("rule_id", ""))
            counts[key] = counts.get(key, 0) + 1
    result.unknown = [{"test": t, "rule": r, "count": n} for (t, r), n in sorted(counts.items())]
    if result.exit_status != 0 and not result.unknown and not failed:
        result.verdict = f"{result.verdict} (exit status {result.exit_status}: see console.txt)"


def markdown(runs: list[SoakRun], command: str, profile: str = "default", busy: int = 0) -> str:
    """The table docs/soak.md holds: one row per run."""
    how = ("derandomized (the same examples every run)" if profile == DERANDOMIZED
           else "under fresh random seeds")
    beside = f", {busy} busy loops saturating the host beside each run" if busy else ""
    lines = [
        f"# Soak: the {profile} profile {how}{beside}",
        "",
        f"Regenerated by `{command}` (each run is the main job, scripts/conformance.sh, with",
        "its seed, in its own VM boot). A run is conformant when every divergence it met is a",
        "known quirk.",
        "",
        "| target | seed | verdict | passed | known | unknown divergences (test, rule) | s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        unknown = "; ".join(f"{u['test']} `{u['rule']}` x{u['count']}" for u in r.unknown) or "0"
        lines.append(f"| {r.target} | {r.seed} | {r.verdict} | {r.passed} | {r.known} "
                     f"| {unknown} | {r.wall_seconds:.0f} |")
    bad = [r for r in runs if r.unknown or r.exit_status]
    lines += ["", f"{len(runs) - len(bad)} of {len(runs)} runs conformant.", ""]
    for r in bad:
        lines.append(f"- replay {r.target} seed {r.seed}: `{r.replay}`")
    return "\n".join(lines) + "\n"


def main(targets: list[Target], seeds: list[int], profile: str, extra: list[str],
         output: Path, markdown_path: Path | None, timeout: float, command: str,
         busy: int = 0) -> int:
    """Run every target once per seed (`busy` loops spinning beside each run); write
    soak.json and the Markdown table."""
    output = (PROJECT / output).resolve()
    if not output.is_relative_to(PROJECT):
        print(f"qpconform soak: --output {output} must be inside the project ({PROJECT}): "
              "the guest sees only the project directory", file=sys.stderr)
        return 2
    runs: list[SoakRun] = []
    for target in targets:
        if profile == DERANDOMIZED:  # no seed: runs 1..N
            chosen = list(range(1, target.runs + 1))
        else:
            chosen = list(target.seeds) or seeds or [
                random.SystemRandom().getrandbits(32) for _ in range(target.runs)
            ]
        for seed in chosen:
            print(f"qpconform soak: {target.name} seed {seed} ...", file=sys.stderr, flush=True)
            with busy_loops(busy):
                run = run_one(target, seed, profile, extra, output, timeout)
            runs.append(run)
            unknown = sum(u["count"] for u in run.unknown)
            print(f"qpconform soak: {target.name} seed {seed}: {run.verdict}, {unknown} unknown, "
                  f"{run.wall_seconds:.0f} s", file=sys.stderr, flush=True)
    table = markdown(runs, command, profile, busy)
    print(table)
    output.mkdir(parents=True, exist_ok=True)
    (output / "soak.json").write_text(
        json.dumps({"profile": profile, "command": command, "busy": busy,
                    "runs": [asdict(r) for r in runs]}, indent=2) + "\n"
    )
    if markdown_path is not None:
        markdown_path.parent.mkdir(parents=True, exist_ok=True)
        markdown_path.write_text(table)
    return 0 if all(not r.unknown and r.exit_status == 0 for r in runs) else 1
