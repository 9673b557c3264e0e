"""The ``qpconform`` command: one argparse subcommand per job, one small function each.

Add a subcommand by writing ``_add_NAME(subparsers)`` that sets
``func=_cmd_NAME`` and listing it in ``_SUBCOMMANDS``.
Everything after a bare ``--`` is the subcommand's COMMAND (``args.command``).
"""

from __future__ import annotations

import argparse
import sys


def _add_vm(subparsers: argparse._SubParsersAction) -> None:
    from vm import cli_args

    parser = subparsers.add_parser(
        "vm",
        help="run a command in a SoftRoCE QEMU VM",
        usage="qpconform vm [options] -- COMMAND [ARGS...]",
    )
    cli_args.add_arguments(parser)
    parser.set_defaults(func=_cmd_vm)


def _cmd_vm(args: argparse.Namespace) -> int:
    from vm import cli_args, prereqs, runner

    if args.install_deps:
        return prereqs.install_deps()
    return runner.run_or_report(cli_args.options_from_args(args, args.command))


def _add_report(subparsers: argparse._SubParsersAction) -> None:
    from reports.cli import add_report_parser

    add_report_parser(subparsers)  # sets func=run_report


def _add_bench(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="checked steps/s of the stateful machine vs the fake device and a plain loop",
        description="Measure, in one run: the stateful machine on the device, the same machine "
        "on the self-tests' fake device (the harness's cost) and a plain pyverbs modify loop. "
        "Without an RDMA device: qpconform vm -- python3 -m qpconform bench --device rxe0",
    )
    parser.add_argument("--device", required=True, help="RDMA device name, e.g. rxe0")
    parser.add_argument("--port", type=int, default=None, help="port (default: first ACTIVE)")
    parser.add_argument("--seconds", type=_positive, default=30.0,
                        help="seconds of stateful machine on the device (default 30)")
    parser.add_argument("--output", default="reports/out/bench.json",
                        help="where the JSON result goes (default reports/out/bench.json)")
    parser.set_defaults(func=_cmd_bench)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive number of seconds")
    return value


def _cmd_bench(args: argparse.Namespace) -> int:
    from pathlib import Path

    from fixtures import bench
    from fixtures import pyverbs_compat as pc

    try:
        return bench.main(args.device, args.seconds, Path(args.output), args.port)
    except (pc.UsageError, ImportError) as exc:
        print(f"qpconform bench: {exc}", file=sys.stderr)
        return 4


_SUBCOMMANDS = [_add_vm, _add_report, _add_bench]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="qpconform", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)
    for add in _SUBCOMMANDS:
        add(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the process exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, command = argv[:split], argv[split + 1 :]
    args = build_parser().parse_args(argv)
    args.command = command
    return args.func(args)
