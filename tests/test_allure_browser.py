"""The rendered Allure report as a person sees it: headless Chromium reads a divergence's rule.

A run of the fake-device project of tests/test_one_record_path.py (one divergence,
written once to the run's store) leaves allure-pytest results; `qpconform report
--allure` renders them with Allure 3 (scripts/bootstrap.sh installs it in .allure/)
and links the page from report.html. Chromium (Debian's, headless) opens the page:
the tree groups the failed test under its rule, and the test's page shows the labels
rule, kind, layer, qp_type, state and quirk. Skipped, with the reason, without
Chromium or Allure.
"""

from __future__ import annotations

import html
import json
import re
import time
from pathlib import Path

import pytest

from reports import cli as report_cli
from reports.allure_render import ALLURE_VERSION, REPORT_DIR, allure_command
from tests.test_one_record_path import RULE, SUITE
from tests.test_plugin_errors import _run
from tests.test_reports_browser import BROWSER, _chromium
from tests.test_tap_output import FAKES

pytest_plugins = ["pytester"]

pytestmark = [
    # Allure's render and two headless Chromium loads (40 s and more): CI's full set
    pytest.mark.slow,
    pytest.mark.skipif(
        BROWSER is None,
        reason="headless browser test needs Debian's chromium (apt-get install chromium)",
    ),
    pytest.mark.skipif(
        allure_command() is None,
        reason=f"Allure {ALLURE_VERSION} is not in .allure/: scripts/test.sh installs it "
        "(qpconform_allure in scripts/bootstrap.sh; npm must reach its registry)",
    ),
]

#: Virtual milliseconds Chromium gives the page's script before it dumps the DOM.
SCRIPT_TIME = "--virtual-time-budget=30000"


def _shown_text(dom: str) -> str:
    """The text of the rendered page: the DOM without scripts, styles and tags."""
    body = dom[dom.find("<body"):]
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", body, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", body)))


def _shown_page(profile: Path, url: str, ready: str) -> str:
    """The page's text once its script has loaded the embedded results: on a loaded host
    headless Chromium's fetch of them sometimes fails ("Failed to fetch"), so up to three
    fresh loads; a page that never shows `ready` is returned as it is, for the assertion."""
    for attempt in range(3):
        shown = _shown_text(
            _chromium(profile.with_name(f"{profile.name}-{attempt}"), SCRIPT_TIME,
                      "--dump-dom", url).stdout
        )
        if ready in shown or "Failed to fetch" not in shown:
            break
    return shown


def test_the_rendered_allure_report_shows_the_divergence_rule(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    result = _run(pytester, "suites", "--device", "rxe0", "--quirks", "none",
                  "--alluredir", "allure", fake=True, suite=SUITE, conftest=FAKES)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str() + result.stderr.str()
    out = pytester.path / "out"
    capsys.readouterr()
    start = time.monotonic()
    status = report_cli.main(["--input", str(out), "--output", str(out),
                              "--allure", str(pytester.path / "allure")])
    took = time.monotonic() - start
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert f"Allure report: {REPORT_DIR}/index.html (rendered in" in printed, printed
    assert took < 60, f"rendering took {took:.1f} s"
    report = json.loads((out / "report.json").read_text())
    assert report["allure"]["rendered"] and report["allure"]["href"] == f"{REPORT_DIR}/index.html"
    assert f'<a href="{REPORT_DIR}/index.html">Allure report</a>' in (
        out / "report.html").read_text()

    page = out / REPORT_DIR / "index.html"
    tree = _shown_page(tmp_path / "p1", page.as_uri(), RULE)
    # the tree: the failed test under its rule (the group's counts between them)
    assert re.search(rf"{re.escape(RULE)} (\d+ )+test_one_divergence ", tree), tree[:2000]

    results = json.loads((out / REPORT_DIR / "test-results.json").read_text())["byId"]
    [test_id] = [k for k, v in results.items() if v["name"] == "test_one_divergence"]
    one = _shown_page(tmp_path / "p2", f"{page.as_uri()}#{test_id}", f" rule {RULE} ")
    for label, value in (("rule", RULE), ("kind", "must"), ("layer", "core"),
                         ("qp_type", "RC"), ("state", "INIT"),
                         ("quirk", "none (unknown divergence)")):
        assert f" {label} {value} " in one, f"label {label}={value} not shown: {one[:2000]}"
