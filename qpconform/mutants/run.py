"""``qpconform mutants``: run the suite against mutant drivers and report the mutation score.

A mutant is a small patch of the stock driver source (qpconform/mutants/<driver>/<kernel
series>/<id>.patch, described in qpconform/mutants/<driver>/catalog.toml): a bug a
driver author could plausibly write.  For each guest release the stock source
of the guest kernel is fetched once, rebuilt unmodified (the baseline, which
must pass), then each mutant is patched, built against the guest's headers and
gated in its own VM boot with ``--module``, the suite stopping at its first
failure.  A mutant counts as detected only when the gate fails: a divergence
that only matches a known quirk is a miss.  Each mutant's records go to
reports/out/mutants/<release>/<id>/; the summary to mutants.json and a
Markdown table.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from qpconform.vm import driver_setup, drivers, image, prereqs, runner
from qpconform.vm.buildenv import BuildError
from qpconform.vm.host_engine import ALL_SUITES, HOST_ENGINE_DRIVERS, PEER_DEVICE
from reports.atomic import ReportWriteError, write_atomic_many
from reports.divergence import read_divergences
from reports.junit import read_junit
from reports.run_record import RUN_ID_ENV

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parents[1]
CATEGORIES = (
    "transition",
    "attr_storage",
    "query",
    "post_state",
    "flush",
    "auto_err",
    "reset",
    "sqd",
    "events",
    "opcode",
    "read",
    "imm",
    "unsignaled",
    "srq",
    "fence",
    "recv_error",
    "wc_fields",
    "payload",
)
#: Exit statuses of ``qpconform vm`` (qpconform/vm/runner.py) and what they mean for a mutant.
EXIT_FAILED, EXIT_TIMEOUT, EXIT_INFRA = 1, runner.EXIT_TIMEOUT, runner.EXIT_INFRA


class MutantError(Exception):
    """A catalog or patch problem the user can fix (message names it)."""


@dataclass(frozen=True)
class Mutant:
    id: str
    category: str
    summary: str
    observable: str
    kernels: tuple[str, ...]
    ci: bool = False  #: one of the small fixed sample CI runs


def catalog_path(driver: str, base: Path = HERE) -> Path:
    return base / driver / "catalog.toml"


def load_catalog(driver: str, base: Path = HERE) -> list[Mutant]:
    """The mutants of ``driver``, checked: known keys and category, a patch per kernel."""
    path = catalog_path(driver, base)
    if not path.is_file():
        known = sorted(p.parent.name for p in base.glob("*/catalog.toml"))
        raise MutantError(f"no mutants for driver {driver!r}; mutants exist for: {known}")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise MutantError(f"{path}: {exc}") from None
    fields = {"id", "category", "summary", "observable", "kernels", "ci"}
    found: list[Mutant] = []
    for n, entry in enumerate(data.get("mutant", []), 1):
        unknown = set(entry) - fields
        if unknown or not {"id", "category", "summary", "kernels"} <= set(entry):
            raise MutantError(
                f"{path}: mutant #{n} ({entry.get('id', '?')}): keys must be "
                f"{sorted(fields)} (id, category, summary, kernels required); got {sorted(entry)}"
            )
        if entry["category"] not in CATEGORIES:
            raise MutantError(
                f"{path}: mutant {entry['id']}: category {entry['category']!r} is not one of "
                + ", ".join(CATEGORIES)
            )
        mutant = Mutant(
            id=entry["id"],
            category=entry["category"],
            summary=entry["summary"],
            observable=entry.get("observable", ""),
            kernels=tuple(entry["kernels"]),
            ci=bool(entry.get("ci", False)),
        )
        for series in mutant.kernels:
            if not patch_file(driver, series, mutant.id, base).is_file():
                raise MutantError(f"{path}: mutant {mutant.id}: no {series}/{mutant.id}.patch")
        found.append(mutant)
    ids = [m.id for m in found]
    if len(set(ids)) != len(ids):
        raise MutantError(f"{path}: duplicate mutant ids")
    return found


def patch_file(driver: str, series: str, mutant_id: str, base: Path = HERE) -> Path:
    return base / driver / series / f"{mutant_id}.patch"


def kernel_series(kernel_release: str) -> str:
    """'6.1' for 6.1.0-50-amd64, '6.12' for 6.12.117+deb13-amd64."""
    match = re.match(r"(\d+\.\d+)", kernel_release)
    if not match:
        raise MutantError(f"cannot tell the kernel series of {kernel_release!r}")
    return match.group(1)


def apply_patch(stock: Path, patch: Path, dest: Path) -> Path:
    """A copy of ``stock`` in ``dest`` with ``patch`` applied exactly (no fuzz)."""
    shutil.copytree(stock, dest, ignore=shutil.ignore_patterns(".qpconform-source"))
    result = subprocess.run(
        ["patch", "-p1", "--batch", "--forward", "--fuzz=0", "-d", str(dest), "-i", str(patch)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise MutantError(f"{patch} does not apply to {stock}:\n{result.stdout}{result.stderr}")
    return dest


# --- one gated run ------------------------------------------------------------


@dataclass
class Outcome:
    """What the gate did with one driver build."""

    id: str
    release: str
    kernel: str
    verdict: str  #: detected | survived | known-only | error
    how: str = ""  #: test failure, guest kernel log, timeout
    test: str = ""  #: the first failing test
    rule: str = ""  #: the rule of the first unknown divergence
    message: str = ""  #: first line of the failure
    seconds_to_fail: float | None = None  #: pytest time until the gate failed
    wall_seconds: float = 0.0  #: the whole VM run, boot included
    shrunk_verbs: int | None = None  #: shortest stateful reproducer, when one caught it
    exit_status: int = 0
    new_known: list[str] = field(default_factory=list)  #: quirks matched beyond the baseline

    @property
    def detected(self) -> bool:
        return self.verdict == "detected"


def _divergences(out_dir: Path) -> list[dict[str, Any]]:
    """The run's records; a damaged file is said, and judged as no records (the verdict
    comes from the exit status; the records only name the rule)."""
    try:
        return read_divergences(out_dir / "divergences.json")
    except (OSError, ValueError) as exc:
        _note(f"warning: {exc}")
        return []


def known_matches(out_dir: Path) -> set[str]:
    """The quirk ids a run matched (what a mutant must go beyond to count)."""
    return {d["known_quirk"] for d in _divergences(out_dir) if d.get("known_quirk")}


def judge(
    mutant_id: str,
    release: str,
    kernel: str,
    out_dir: Path,
    status: int,
    wall: float,
    baseline_known: set[str],
) -> Outcome:
    """Turn one VM run's exit status and records into an Outcome."""
    found = read_junit(out_dir / "junit.xml")
    seconds, failed = found.seconds, found.failed
    divs = _divergences(out_dir)
    unknown = [d for d in divs if not d.get("known_quirk")]
    outcome = Outcome(mutant_id, release, kernel, "survived", exit_status=status, wall_seconds=wall)
    outcome.new_known = sorted(known_matches(out_dir) - baseline_known)
    if unknown:
        first_test = failed[0][0].split("::")[-1] if failed else None
        same = [d for d in unknown if (d.get("test") or "").split("::")[-1] == first_test]
        outcome.rule = (same or unknown)[0].get("rule_id", "")
        stateful = [
            sum(1 for s in d.get("steps", []) if s.get("verb") != "settle")
            for d in unknown
            if "stateful" in (d.get("test") or "")
        ]
        outcome.shrunk_verbs = min(stateful) if stateful else None
    if status == 0:
        outcome.verdict = "known-only" if outcome.new_known else "survived"
    elif status == EXIT_TIMEOUT:
        outcome.verdict, outcome.how = "detected", "the run hung until the VM timeout"
    elif status == EXIT_INFRA:
        outcome.verdict, outcome.how = "error", "the VM runner failed (module refused?)"
    elif failed:
        outcome.verdict, outcome.how = "detected", "test failure"
        outcome.test, outcome.message = failed[0]
        outcome.seconds_to_fail = seconds
    else:
        outcome.verdict, outcome.how = "detected", "guest kernel log (oops/WARN)"
        outcome.seconds_to_fail = seconds
    return outcome


@dataclass
class Plan:
    """How every mutant of one run is gated."""

    driver: str = "rxe"
    releases: tuple[str, ...] = ("bookworm",)
    only: tuple[str, ...] = ()
    ci_sample: bool = False
    pytest_args: tuple[str, ...] = ("suites/",)
    profile: str = "ci"
    timeout: float = 1500.0
    out_root: Path = PROJECT / "reports" / "out" / "mutants"
    stop_at_first: bool = True
    workers: int = 2
    baseline: bool = True  #: gate the unmodified rebuild first (it must pass)
    host_engine: bool = True  #: pytest on this host (False: --in-guest)

    @property
    def uses_host_engine(self) -> bool:
        """pytest on this host against the guest's executor, as the main job runs (a
        selection of your own too: it is what a shrink measurement times); --in-guest runs
        it inside."""
        return self.host_engine and self.driver in HOST_ENGINE_DRIVERS

    @property
    def host_selection(self) -> tuple[str, ...]:
        """What pytest runs on the host: every suite in host order (the lone-QP suites
        first) for the default selection, else the selection as given."""
        return ALL_SUITES if tuple(self.pytest_args) == ("suites/",) else self.pytest_args

    def selected(self, catalog: list[Mutant]) -> list[Mutant]:
        if self.only:
            unknown = set(self.only) - {m.id for m in catalog}
            if unknown:
                raise MutantError(
                    f"unknown mutant(s) {sorted(unknown)}; known: "
                    + ", ".join(m.id for m in catalog)
                )
            return [m for m in catalog if m.id in self.only]
        if self.ci_sample:
            return [m for m in catalog if m.ci]
        return catalog


def _note(msg: str) -> None:
    print(f"qpconform mutants: {msg}", file=sys.stderr, flush=True)


def device_args(driver: str) -> list[str]:
    """The suite's device options for ``driver``: ``--device <name>0``, and for a driver
    whose pairs span two devices ``--peer-device <name>1`` (the VM sets up both)."""
    name = drivers.spec(driver).name
    args = ["--device", f"{name}0"]
    if driver in PEER_DEVICE:  # siw's iWARP pair: siw0 -> siw1, connected through rdma_cm
        args += ["--peer-device", PEER_DEVICE[driver]]
    return args


def _pytest_options(plan: Plan, junit: Path, device: list[str]) -> list[str]:
    """The suite's options but its selection: device, profile, junit file, workers."""
    options = [*device, "--hypothesis-profile", plan.profile, "-q", "-p", "no:cacheprovider",
               f"--junitxml={junit}"]
    if plan.stop_at_first:
        options.append("--maxfail=1")
    if plan.workers > 1:
        options += ["-n", str(plan.workers)]
    return options


def _vm_options(plan: Plan, release: str, ko: Path, log_dir: Path) -> list[str]:
    """``qpconform vm`` with the module under test and this gate's limits and logs."""
    return [sys.executable, "-m", "qpconform", "vm", "--release", release,
            "--driver", plan.driver, "--module", str(ko), "--timeout", str(plan.timeout),
            "--log-dir", str(log_dir)]


def gate_command(plan: Plan, release: str, ko: Path, out_dir: Path,
                 on_host: bool = False, run: str = "") -> list[str]:
    """The ``qpconform vm`` command line of the gate of module ``ko`` (records in
    ``out_dir``): plan.pytest_args inside the guest, or (`on_host`) on this host against
    the guest's executor (``--host-engine``; plan.host_selection); ``run``: the run id of
    its records."""
    if on_host:
        sessions = max(plan.workers, 1)
        host_pytest = [sys.executable, "-m", "pytest", *plan.host_selection,
                       *_pytest_options(plan, out_dir / "junit.xml",
                                        ["--device", f"{drivers.spec(plan.driver).name}0"])]
        return [*_vm_options(plan, release, ko, out_dir / "host-engine"),
                "--host-engine", str(sessions), "--", *host_pytest]
    guest_pytest = ["python3", "-m", "pytest", *plan.pytest_args,
                    *_pytest_options(plan, out_dir / "junit.xml", device_args(plan.driver))]
    env = [f"QPCONFORM_OUT_DIR={out_dir}"] + ([f"{RUN_ID_ENV}={run}"] if run else [])
    return [*_vm_options(plan, release, ko, out_dir),
            *[arg for pair in env for arg in ("--env", pair)], "--", *guest_pytest]


def run_id_of_gate(release: str, gate_id: str) -> str:
    """The run id both parts of one gate share (unique to this process and time)."""
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{release}-{gate_id}-{os.getpid()}"


def gate(plan: Plan, release: str, run_id: str, ko: Path) -> tuple[int, float, Path]:
    """The suite against module ``ko`` in one VM boot (with the host engine, about 2x
    faster under TCG); records in out_root/release/run_id, the console in console.txt."""
    out_dir = plan.out_root / release / run_id
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    started = time.monotonic()
    run = run_id_of_gate(release, run_id)
    cmd = gate_command(plan, release, ko, out_dir, plan.uses_host_engine, run)
    env = dict(os.environ, QPCONFORM_OUT_DIR=str(out_dir), **{RUN_ID_ENV: run})  # host engine
    with open(out_dir / "console.txt", "w") as console:
        status = subprocess.run(
            cmd, cwd=PROJECT, env=env, stdout=console, stderr=subprocess.STDOUT
        ).returncode
    return status, time.monotonic() - started, out_dir


def run_release(plan: Plan, release: str, mutants: list[Mutant]) -> list[Outcome]:
    """Baseline, then every selected mutant with a patch for this release's kernel."""
    root = image.cache_root()
    img = runner.ensure_image(runner.VmOptions(release=release, build_only=True), root)
    kernel = img.meta["kernel_release"]
    series = kernel_series(kernel)
    spec = drivers.spec(plan.driver)
    stock = driver_setup.stock_source(spec, img, root)
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="qpconform-mutants-") as tmp:
        baseline_known: set[str] = set()
        if plan.baseline:
            ko, _ = driver_setup.build_from_source(spec, stock, img, root)
            _note(f"{release} ({kernel}): baseline (stock source rebuilt out of tree)")
            status, wall, out_dir = gate(plan, release, "baseline", ko)
            base = judge("baseline", release, kernel, out_dir, status, wall, set())
            base.verdict = "passed" if status == 0 else "FAILED"
            outcomes.append(base)
            _note(f"  baseline: {base.verdict} in {wall:.0f} s")
            if status != 0:
                _note(f"  the unmodified driver fails the gate; see {out_dir}: mutants not run")
                return outcomes
            baseline_known = known_matches(out_dir)
        for mutant in mutants:
            if series not in mutant.kernels:
                _note(f"  {mutant.id}: no patch for {series}, skipped")
                continue
            source = apply_patch(
                stock, patch_file(plan.driver, series, mutant.id), Path(tmp) / mutant.id / spec.name
            )
            try:
                ko, _ = driver_setup.build_from_source(spec, source, img, root)
            except BuildError as exc:
                raise MutantError(f"mutant {mutant.id} does not build: {exc}") from None
            status, wall, out_dir = gate(plan, release, mutant.id, ko)
            outcome = judge(mutant.id, release, kernel, out_dir, status, wall, baseline_known)
            outcomes.append(outcome)
            where = f"{outcome.test} [{outcome.rule}]" if outcome.test else outcome.how
            _note(f"  {mutant.id}: {outcome.verdict} ({where}; {wall:.0f} s)")
    return outcomes


def score(outcomes: list[Outcome]) -> dict[str, Any]:
    """Detected / counted per release (errors are not counted: such a mutant must be replaced)."""
    per: dict[str, dict[str, int]] = {}
    for o in outcomes:
        if o.id == "baseline" or o.verdict == "error":
            continue
        entry = per.setdefault(o.release, {"detected": 0, "counted": 0})
        entry["counted"] += 1
        entry["detected"] += o.detected
    for entry in per.values():
        entry["score"] = (
            round(entry["detected"] / entry["counted"], 3) if entry["counted"] else None
        )
    return per


def markdown(outcomes: list[Outcome], catalog: list[Mutant]) -> str:
    """The table of docs/mutants.md: one row per mutant and release."""
    by_id = {m.id: m for m in catalog}
    lines = [
        "| mutant | category | kernel | verdict | caught by (test, rule) | s to fail "
        "| shrunk verbs |",
        "|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        m = by_id.get(o.id)
        caught = f"`{o.test.split('::')[-1]}`, `{o.rule}`" if o.test else o.how
        if o.verdict in ("survived", "known-only"):
            caught = ", ".join(o.new_known) or "-"
        secs = f"{o.seconds_to_fail:.0f}" if o.seconds_to_fail is not None else "-"
        verbs = str(o.shrunk_verbs) if o.shrunk_verbs is not None else "-"
        category = m.category if m else "-"
        lines.append(
            f"| {o.id} | {category} | {o.kernel} | {o.verdict} | {caught} | {secs} | {verbs} |"
        )
    for release, entry in score(outcomes).items():
        lines.append(
            f"\n{release}: {entry['detected']}/{entry['counted']} detected"
            + (f" ({entry['score']:.0%})" if entry["score"] is not None else "")
        )
    return "\n".join(lines) + "\n"


def main(plan: Plan, output: Path) -> int:
    """Run the plan; 0 when every counted mutant of every release was detected and the
    baselines passed, 1 otherwise, 2 on a usage or build error."""
    try:
        catalog = load_catalog(plan.driver)
        selected = plan.selected(catalog)
        if os.geteuid() != 0:
            raise MutantError("building mutant modules needs root (chroot into the build layer)")
        prereqs.check_tools({"patch": "patch"})
        outcomes: list[Outcome] = []
        started = time.monotonic()
        for release in plan.releases:
            outcomes += run_release(plan, release, selected)
    except (
        MutantError,
        runner.UserError,
        BuildError,
        drivers.DriverError,
        prereqs.PrereqError,
    ) as exc:
        _note(f"error: {exc}")
        return 2
    result = {
        "driver": plan.driver,
        "profile": plan.profile,
        "pytest_args": list(plan.pytest_args),
        "seconds": round(time.monotonic() - started, 1),
        "score": score(outcomes),
        "outcomes": [asdict(o) for o in outcomes],
    }
    table = markdown(outcomes, catalog)
    print(table)  # shown even when the files below cannot be written
    try:
        write_atomic_many(
            {output: json.dumps(result, indent=2) + "\n", output.with_suffix(".md"): table}
        )
    except ReportWriteError as exc:
        _note(f"error: {exc}")
        return 2
    _note(f"{result['seconds']:.0f} s in all; {output} and {output.with_suffix('.md')}")
    baselines_ok = all(o.verdict == "passed" for o in outcomes if o.id == "baseline")
    missed = [o for o in outcomes if o.id != "baseline" and o.verdict != "detected"]
    return 0 if baselines_ok and not missed else 1
