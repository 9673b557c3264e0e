"""The fleet matrix page as a person sees it: rendered by headless Chromium.

The three synthetic runs of tests/test_report_matrix.py and one run of another suite
version go through `qpconform report --matrix`; the browser's body.innerText (what CSS
shows) must hold the table: its run columns, a row of each section and the excluded run.
A screenshot is kept as a CI artefact (reports/out/matrix-screenshot.png). Needs Debian's
`chromium` package; skipped with the reason when it is absent (as tests/test_reports_browser.py).
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from reports import cli as report_cli
from tests.test_report_matrix import SQD_RULE, TIMEOUT_RULE, _run, fleet  # noqa: F401 (fixture)
from tests.test_reports_browser import (
    ARTEFACTS,
    BROWSER,
    VISIBLE_TEXT_PROBE,
    _chromium,
    _png_size,
)

SCREENSHOT = ARTEFACTS / "matrix-screenshot.png"
WIDTH, HEIGHT = 1400, 1800

pytestmark = pytest.mark.skipif(
    BROWSER is None,
    reason="headless browser test needs Debian's chromium (apt-get install chromium)",
)


@pytest.fixture
def page(fleet: list[Path], tmp_path: Path) -> Path:  # noqa: F811 (the fixture imported above)
    other = _run(tmp_path / "other-suite", {"kernel": "6.15.0"}, unknown=False, choices={},
                 version="0.0.9+rules.0123456789")
    out = tmp_path / "matrix"
    args = ["--matrix", *map(str, fleet), str(other), "--output", str(out)]
    assert report_cli.main(args) == 0
    return out / "matrix.html"


def test_browser_shows_the_matrix_table(page: Path, tmp_path: Path) -> None:
    probe = page.with_name("matrix-probe.html")
    probe.write_text(page.read_text().replace("</body>", VISIBLE_TEXT_PROBE + "</body>"))
    dom = _chromium(tmp_path / "profile", "--dump-dom", probe.as_uri()).stdout
    assert '<table class="fleet" id="matrix">' in dom
    found = re.search(r'<pre id="visible-text">(.*?)</pre>', dom, re.S)
    assert found, "the browser did not run the probe: " + dom[:500]
    visible = html.unescape(found.group(1))

    assert "qpconform fleet matrix" in visible
    assert "Excluded runs, not comparable (1)" in visible
    assert "0.0.9+rules.0123456789" in visible
    # the header row: one column per run, labelled by device identity
    for label in ("rxe0 · rdma_rxe · 6.1.0-28-amd64 · rdma-core 44.0 · fw 0.0.0",
                  "rxe0 · rdma_rxe · 6.12.9-amd64 · rdma-core 52.0 · fw 0.0.0",
                  "mlx5_0 · mlx5_ib · 6.1.0-28-amd64 · rdma-core 44.0 · fw 22.36.1010"):
        assert label in visible
    # one row of each section, cells in run order (tab-separated by the browser)
    assert "Divergences (unknown) (1)" in visible
    # (a divergence cell shows where, on a line of its own, before the next cell)
    assert re.search(rf"\n{re.escape(SQD_RULE)}\t✗ 1\nRC modify in RTS[^\t]*\tok\tok\n", visible)
    matched = r"\t1 matched\n[^\t]*"  # a matched quirk's cell: the count, then its kinds
    assert re.search(rf"\nrxe-uc-post-send-rtr{matched}{matched}{matched}\n", visible)
    assert re.search(rf"\n{TIMEOUT_RULE}\trefused \(EINVAL\) 2\taccepted 1\t·\n", visible)
    assert re.search(r"\nATOMICS\thas\thas\tlacks\n", visible)


def test_matrix_screenshot_is_kept_as_an_artefact(page: Path, tmp_path: Path) -> None:
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    SCREENSHOT.unlink(missing_ok=True)
    _chromium(tmp_path / "profile", f"--window-size={WIDTH},{HEIGHT}",
              f"--screenshot={SCREENSHOT}", page.as_uri())
    assert _png_size(SCREENSHOT) == (WIDTH, HEIGHT)
    assert SCREENSHOT.stat().st_size > 30_000  # a blank page compresses to a few KB
