"""`qpconform report`: the qualification report from a run, the comparison of two runs, or
the fleet matrix of many.

Exit status 0 whatever the verdict (the pytest run is the gate); 2 when there is
nothing to read; with --same, 1 when the runs differ. The verdict line is printed either way.
With --matrix, a run that is not comparable is left out and named (on the terminal and the
page); the status is 2 only when no input is a comparable run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_DIR = Path("reports") / "out"


def add_report_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the `report` subcommand (sets func=run_report)."""
    parser = subparsers.add_parser(
        "report",
        help="build the qualification report (HTML + JSON) from a run, or compare two runs",
        description=__doc__.splitlines()[0],
        usage="qpconform report [--input DIR|RUN.json ...] [--output DIR]\n"
        "       qpconform report --compare A.json B.json [--output DIR]\n"
        "       qpconform report --same RUN_DIR RUN_DIR ...\n"
        "       qpconform report --matrix RUN ... [--output DIR]",
    )
    parser.add_argument(
        "--allure",
        metavar="RESULTS",
        help="also render the Allure report of these allure-pytest results into "
        "<output>/allure-report/ with Allure 3 (scripts/bootstrap.sh installs it), linked "
        "from report.html; without Allure the page says why and the status stays 0",
    )
    parser.add_argument(
        "--input",
        nargs="+",
        default=[str(DEFAULT_DIR)],
        metavar="PATH",
        help="directories holding run-*.json, or run files (default: reports/out)",
    )
    parser.add_argument(
        "--output",
        default=str(DEFAULT_DIR),
        metavar="DIR",
        help="where report.html/report.json (or compare.txt/.json) go (default: reports/out)",
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("A.json", "B.json"),
        help="show what changed from run A to run B (report.json or run-*.json files)",
    )
    parser.add_argument(
        "--same",
        nargs="+",
        metavar="RUN_DIR",
        help="check that runs (folders with report.json and divergences.json) gave the same "
        "verdict and divergences; exit status 1 if not",
    )
    parser.add_argument(
        "--matrix",
        nargs="+",
        metavar="RUN",
        help="merge runs (report.json, run-*.json, or a folder of one run's records) into one "
        "table of behaviour x run: matrix.html and matrix.json; runs another schema or suite "
        "version made are left out and named",
    )
    parser.set_defaults(func=run_report)
    return parser


def run_report(args: argparse.Namespace) -> int:
    """Build the report (or the comparison); print where it went and the verdict line."""
    from reports import compare, html

    try:
        if args.same:
            from reports.determinism import compare_runs

            same, text = compare_runs(args.same)
            sys.stdout.write(text)
            return 0 if same else 1
        if args.matrix:
            return _run_matrix(args.matrix, args.output)
        if args.compare:
            _, text = compare.write_compare(args.compare[0], args.compare[1], args.output)
            sys.stdout.write(text)
            print(
                f"written: {Path(args.output) / 'compare.txt'}, "
                f"{Path(args.output) / 'compare.json'}"
            )
            return 0
        allure = None
        if args.allure:
            from reports.allure_render import render

            allure = render(args.allure, args.output)
        report, html_path, json_path = html.write_reports(
            args.input, args.output, allure=allure.to_dict() if allure else None)
    except (OSError, ValueError) as exc:
        print(f"qpconform report: {exc}", file=sys.stderr)
        return 2
    print(f"written: {html_path}, {json_path}")
    print(html.verdict_line(report))
    if allure is not None:
        print(allure.line())
    return 0


def _run_matrix(paths: list[str], output: str) -> int:
    """Write the fleet matrix; print its summary (with the excluded runs) and where it went."""
    from reports.fleet import summary_text
    from reports.fleet_page import write_matrix

    matrix, html_path, json_path = write_matrix(paths, output)
    sys.stdout.write(summary_text(matrix))
    print(f"written: {html_path}, {json_path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run `report` on its own (python -m reports.cli ...): `qpconform report` without
    loading the rest of the command line."""
    parser = argparse.ArgumentParser(prog="qpconform")
    add_report_parser(parser.add_subparsers(dest="subcommand", required=True))
    args = parser.parse_args(["report", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
