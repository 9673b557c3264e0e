"""The Allure report rendered from a run's allure-pytest results, with Allure 3 (npm `allure`).

scripts/bootstrap.sh (`qpconform_allure`) installs the pinned Allure 3 into the
project's `.allure/` folder with npm; `qpconform report --allure DIR` renders DIR
(reports/out/allure-results) into one self-contained page beside report.html,
allure-report/index.html, which report.html links. The tree groups tests by feature
and by the rule of their divergence; every divergence carries the labels rule, kind,
layer, qp_type, state and quirk (reports/allure_labels.py).

Rendering never fails the run: without Allure (npm could not reach its registry when
the scripts installed it, or no npm), or when it fails or takes too long, the outcome
says why, and report.html and the terminal show that line instead of the link.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: The Allure 3 release scripts/bootstrap.sh installs (keep the two in step).
ALLURE_VERSION = "3.18.0"
#: Where scripts/bootstrap.sh installs it (QPCONFORM_ALLURE names another `allure`).
ALLURE_HOME = Path(__file__).resolve().parents[1] / ".allure"
REPORT_DIR = "allure-report"
#: The tree of the rendered report: feature, then the rule a divergence broke.
GROUP_BY = ("feature", "rule")
#: Seconds a render may take (it takes about 4 s for a whole run on 2 cores).
TIMEOUT = 120.0


@dataclass(frozen=True)
class AllureOutcome:
    """What `render` did: the page (relative to the report's folder) or why there is none."""

    rendered: bool
    detail: str
    href: str | None = None
    seconds: float = 0.0

    def line(self) -> str:
        """One line for the terminal."""
        if self.rendered:
            return f"qpconform: Allure report: {self.href} (rendered in {self.seconds:.1f} s)"
        return f"qpconform: Allure report NOT rendered: {self.detail}"

    def to_dict(self) -> dict[str, Any]:
        """The form report.json keeps (key `allure`)."""
        return asdict(self)


def allure_command() -> Path | None:
    """The `allure` executable: $QPCONFORM_ALLURE, else the project's .allure/ install."""
    named = os.environ.get("QPCONFORM_ALLURE")
    if named:
        found = shutil.which(named)
        return Path(found) if found else None
    local = ALLURE_HOME / "node_modules" / ".bin" / "allure"
    return local if local.is_file() and os.access(local, os.X_OK) else None


NOT_INSTALLED = (
    f"Allure {ALLURE_VERSION} is not installed ({ALLURE_HOME}/node_modules/.bin/allure is "
    "absent: npm could not reach its registry, or node/npm are missing, when "
    "scripts/bootstrap.sh ran); the raw results are in {results}; install it with "
    f"`npm install --prefix .allure allure@{ALLURE_VERSION}` and run `qpconform report "
    "--allure {results}`"
)


def config_text(name: str) -> str:
    """allurerc.json: one self-contained page (it opens from a file:// URL), grouped by
    feature and rule."""
    options = {"singleFile": True, "reportName": name, "groupBy": list(GROUP_BY)}
    return json.dumps({"name": name, "plugins": {"awesome": {"options": options}}}, indent=1)


def render(
    results: str | os.PathLike[str],
    report_dir: str | os.PathLike[str],
    name: str = "qpconform",
    timeout: float = TIMEOUT,
) -> AllureOutcome:
    """Render the allure-pytest results into report_dir/allure-report/index.html."""
    results, out = Path(results), Path(report_dir) / REPORT_DIR
    if not results.is_dir() or not any(results.glob("*-result.json")):
        return AllureOutcome(False, f"no allure-pytest results in {results}")
    command = allure_command()
    if command is None:
        return AllureOutcome(False, NOT_INSTALLED.format(results=results))
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="qpconform-allure-") as tmp:
        config = Path(tmp) / "allurerc.json"
        config.write_text(config_text(name))
        staged = Path(tmp) / REPORT_DIR
        try:
            done = subprocess.run(
                [str(command), "generate", "--config", str(config), "--output", str(staged),
                 str(results.resolve())],
                cwd=tmp, capture_output=True, text=True, timeout=timeout,
                env={**os.environ, "NO_COLOR": "1"},
            )
        except subprocess.TimeoutExpired:
            return AllureOutcome(False, f"`allure generate` took over {timeout:.0f} s: stopped")
        except OSError as exc:
            return AllureOutcome(False, f"`{command}` could not run: {exc}")
        if done.returncode != 0 or not (staged / "index.html").is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return AllureOutcome(
                False, f"`allure generate` failed (exit {done.returncode}): " + " / ".join(tail))
        shutil.rmtree(out, ignore_errors=True)  # the page of an earlier render goes
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staged), str(out))
    seconds = time.monotonic() - start
    return AllureOutcome(True, f"Allure {ALLURE_VERSION}", f"{REPORT_DIR}/index.html", seconds)
