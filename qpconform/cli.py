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


_SUBCOMMANDS = [_add_vm, _add_report]


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
