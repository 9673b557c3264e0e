"""report.html and report.json: the qualification report written from a run's records.

One self-contained HTML file (inline CSS, no script, no external asset) so it can
be mailed or kept as a CI artefact, and its JSON twin for machines and `--compare`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jinja2

from reports.atomic import write_atomic_many
from reports.qualification import build_report
from reports.run_record import find_runs, merge_runs

TEMPLATES = Path(__file__).parent / "templates"
HTML_NAME = "report.html"
JSON_NAME = "report.json"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["when"] = _when
    return env


def _when(stamp: str | None) -> str:
    """An ISO timestamp as "2026-11-01 13:41 UTC" (unchanged when it is not one)."""
    if not stamp:
        return "?"
    try:
        moment = dt.datetime.fromisoformat(stamp).astimezone(dt.UTC)
    except ValueError:
        return stamp
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def render_template(name: str, **context: Any) -> str:
    """One of reports/templates/ rendered with the report's environment (autoescape, strict
    undefined, the `when` filter): the report page and the fleet matrix page share it."""
    return _environment().get_template(name).render(**context)


def render_html(report: Mapping[str, Any]) -> str:
    """The report page for a report dict (as built by build_report or read from report.json)."""
    return render_template("report.html.j2", r=report)


def _add_reproducer_links(report: dict[str, Any], out_dir: Path) -> None:
    """Each reproducer as a link relative to the page, so the page and scripts move together."""
    for entry in report["divergences"] + report["known"]:
        path = entry.get("reproducer")
        entry["reproducer_href"] = (
            Path(os.path.relpath(Path(path).resolve(), out_dir.resolve())).as_posix()
            if path
            else None
        )


def run_files(inputs: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Run records named directly, or found as run-*.json in named directories."""
    files: list[Path] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            files += find_runs(p)
        elif p.is_file():
            files.append(p)
    return files


def write_reports(
    inputs: Iterable[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    extra_settings: Mapping[str, Any] | None = None,
    allure: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], Path, Path]:
    """Merge the run records, build the report, write report.html and report.json.

    `extra_settings` are what only the controller knows at the end (the leak check);
    `allure` is what rendering the Allure report gave (reports/allure_render.py): the
    page links it, or says why there is none."""
    inputs = list(inputs)
    files = run_files(inputs)
    if not files:
        where = ", ".join(map(str, inputs))
        raise FileNotFoundError(f"no run records (run-*.json) found in {where}")
    out = Path(out_dir)
    merged = merge_runs(files)
    merged.setdefault("settings", {}).update(extra_settings or {})
    report = build_report(merged, base=files[0].parent)
    _add_reproducer_links(report, out)
    if allure is not None:
        report["allure"] = dict(allure)
    json_path, html_path = out / JSON_NAME, out / HTML_NAME
    write_atomic_many(  # both or neither: the page and its JSON twin always agree
        {
            json_path: json.dumps(report, indent=1, sort_keys=True, default=str) + "\n",
            html_path: render_html(report),
        }
    )
    return report, html_path, json_path


def verdict_line(report: Mapping[str, Any]) -> str:
    """One line for a terminal: the verdict and what it rests on."""
    v, cov = report["verdict"], report["coverage"]
    device = report.get("device_name", "unknown device")
    return (
        f"qpconform verdict for {device}: {v['text'].upper()} "
        f"({v['divergences']} divergence(s), {v['known']} known, {v['stale_quirks']} stale "
        f"quirk(s){_not_provoked(v)}; {v['steps']} steps; {cov['exercised']}/{cov['total']} "
        f"model rules exercised{_applicable(cov)})"
        + (f"; stopped early: {v['aborted']}" if v.get("aborted") else "")
        + (f"; timing unsure: {v['timing_unsure']}" if v.get("timing_unsure") else "")
        + (f"; {len(v['windows_widened'])} window(s) widened by the run's own deliveries"
           if v.get("windows_widened") else "")
        + (f"; LEAKED verbs objects: {v['leaked']}" if v.get("leaked") else "")
    )


def _applicable(cov: Mapping[str, Any]) -> str:
    """", E of A applicable, N not applicable to this device": how many of the rules the
    device could exercise were; nothing for reports written before `applicable`."""
    if "applicable" not in cov:
        return ""
    text = f", {cov['exercised']} of {cov['applicable']} applicable"
    if cov["not_applicable"]:
        text += f", {cov['not_applicable']} not applicable to this device"
    return text


def _not_provoked(v: Mapping[str, Any]) -> str:
    """", N not provoked in this run" (random profile: not stale), or nothing."""
    count = v.get("not_provoked_quirks", 0)  # reports of older runs lack it
    return f", {count} not provoked in this run" if count else ""


def replay_line(report: Mapping[str, Any]) -> str | None:
    """One line for a terminal: the options that replay the run's stateful sequences
    (reports/replay.py), or None for a record without them."""
    replay = report.get("settings", {}).get("replay")
    return f"qpconform: replay these sequences with: {replay}" if replay else None
