"""The qualification report as a person sees it: rendered by headless Chromium.

Renders report.html from a run's report.json, keeps a screenshot as a CI artefact
(reports/out/report-screenshot.png) and checks the text the browser actually shows
(body.innerText, which leaves out what CSS or a closed <details> hides): the
verdict, a transition-matrix cell and a divergence entry.
Needs Debian's `chromium` package; skipped with the reason when it is absent.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from reports.html import render_html, write_reports
from tests.test_reports_run import synthetic_run

ARTEFACTS = Path(__file__).resolve().parents[1] / "reports" / "out"
SCREENSHOT = ARTEFACTS / "report-screenshot.png"
WIDTH, HEIGHT = 1280, 2400
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
# As root in a sandbox with no network: no sandbox, no GPU, no background connections.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
# Appended to a copy of the page only: the report itself carries no script.
VISIBLE_TEXT_PROBE = """<script>
document.addEventListener("DOMContentLoaded", () => {
  const out = document.createElement("pre");
  out.id = "visible-text";
  out.textContent = document.body.innerText;
  document.body.appendChild(out);
});
</script>"""

pytestmark = pytest.mark.skipif(
    BROWSER is None,
    reason="headless browser test needs Debian's chromium (apt-get install chromium)",
)


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BROWSER), *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """report.html rendered from the report.json of a (synthetic, two-worker) run."""
    root = tmp_path_factory.mktemp("browser")
    synthetic_run(root / "out")
    _, _, json_path = write_reports([root / "out"], root / "out")
    page = root / "out" / "report.html"
    page.write_text(render_html(json.loads(json_path.read_text())))
    return page


def test_screenshot_is_kept_as_an_artefact(page: Path, tmp_path: Path) -> None:
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    SCREENSHOT.unlink(missing_ok=True)
    _chromium(
        tmp_path / "profile",
        f"--window-size={WIDTH},{HEIGHT}",
        f"--screenshot={SCREENSHOT}",
        page.as_uri(),
    )
    assert _png_size(SCREENSHOT) == (WIDTH, HEIGHT)
    assert SCREENSHOT.stat().st_size > 50_000  # a blank page compresses to a few KB


def test_browser_shows_verdict_matrix_and_divergence(page: Path, tmp_path: Path) -> None:
    probe = page.with_name("report-probe.html")
    probe.write_text(page.read_text().replace("</body>", VISIBLE_TEXT_PROBE + "</body>"))
    dom = _chromium(tmp_path / "profile", "--dump-dom", probe.as_uri()).stdout
    found = re.search(r'<pre id="visible-text">(.*?)</pre>', dom, re.S)
    assert found, "the browser did not run the probe: " + dom[:500]
    visible = html.unescape(found.group(1))

    assert "Verdict: Not conformant" in visible
    # the RC matrix, with its divergent RTS->SQD cell (3 steps, 1 divergent)
    assert "RC\n7/22 legal transitions exercised" in visible
    # row RTS: nothing to RESET..RTS, 3 steps to SQD of which 1 divergent, 2 to ERR
    assert re.search(r"\nRTS\t·\t·\t·\t·\t3\s*✗1\s*\t·\t2\n", visible), "RC RTS row not shown"
    # the divergence entry: rule, expected vs observed, reproducer link
    assert "RC · modify in RTS" in visible
    assert "linux.transition.RC.RTS->SQD" in visible
    assert "refused with EINVAL (22), state RTS" in visible
    assert "rc-rts-sqd.py" in visible
    # what a closed <details> hides is not visible: the check is about rendering
    assert "import pyverbs" not in visible
    assert "import pyverbs" in page.read_text()
