"""The ``qpconform`` command: one argparse subcommand per job, one small function each.

Add a subcommand by writing ``_add_NAME(subparsers)`` that sets
``func=_cmd_NAME`` and listing it in ``_SUBCOMMANDS``.
Everything after a bare ``--`` is the subcommand's COMMAND (``args.command``).
Each subcommand imports its job inside its functions: `qpconform vm --help` starts
fast and runs on a host without pyverbs or an RDMA stack.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from qpconform.bench import Tuning


def _add_vm(subparsers: argparse._SubParsersAction) -> None:
    from qpconform.vm import cli_args

    parser = subparsers.add_parser(
        "vm",
        help="run a command in a SoftRoCE QEMU VM",
        usage="qpconform vm [options] -- COMMAND [ARGS...]",
    )
    cli_args.add_arguments(parser)
    parser.set_defaults(func=_cmd_vm)


def _cmd_vm(args: argparse.Namespace) -> int:
    from qpconform.vm import cli_args, prereqs, runner

    if args.install_deps:
        return prereqs.install_deps()
    options = cli_args.options_from_args(args, args.command)
    if args.then_in_guest and not args.host_engine:
        print("qpconform vm: --then-in-guest goes with --host-engine N (without it, COMMAND "
              "itself runs in the guest)", file=sys.stderr)
        return 2
    if args.host_engine:
        from qpconform.vm import host_engine

        return host_engine.run(options, args.host_engine, f"{args.driver}0",
                               then_in_guest=args.then_in_guest or "",
                               peer=host_engine.PEER_DEVICE.get(args.driver))
    return runner.run_or_report(options)


def _add_report(subparsers: argparse._SubParsersAction) -> None:
    from reports.cli import add_report_parser

    add_report_parser(subparsers)  # sets func=run_report


def _add_bench(subparsers: argparse._SubParsersAction) -> None:
    from qpconform.vm import drivers, image

    parser = subparsers.add_parser(
        "bench",
        help="checked steps/s of the stateful machine (device and harness shares), a plain loop",
        description="Measure, in one run: the stateful machine on the device (the time a step "
        "spends inside device verbs, and the rest: the harness's cost) and a plain pyverbs "
        "modify loop. "
        "Without an RDMA device: qpconform vm -- python3 -m qpconform bench --device rxe0",
    )
    parser.add_argument("--device", default=None,
                        help="RDMA device name, e.g. rxe0 (with --vm: default rxe0, or siw0)")
    parser.add_argument("--port", type=int, default=None, help="port (default: first ACTIVE)")
    parser.add_argument("--vm", metavar="RELEASE", default=None, choices=image.RELEASES,
                        help="boot the SoftRoCE VM of this Debian release ("
                        + ", ".join(image.RELEASES) + ") with a device executor: the engine "
                        "runs here, the verbs there; also measures the engine in the guest")
    parser.add_argument("--driver", default="rxe", choices=sorted(drivers.DRIVERS),
                        help="with --vm: the guest's software RDMA driver (default rxe)")
    parser.add_argument("--seconds", type=_positive, default=30.0,
                        help="seconds of stateful machine on the device (default 30)")
    parser.add_argument("--sessions", type=_sessions, default=3,
                        help="with --vm: also run this many host engines side by side, each "
                        "with its own executor session (default 3, the most a 2-core host "
                        "gained from: 4 ran slower there; 1: only the one engine)")
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


def _sessions(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 8:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of sessions, 1 to 8")
    return int(text)


def _non_negative_int(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number >= 0")
    return int(text)


def bench_tuning() -> Tuning:
    """The suite's windows and quirk profiles (the plugin's data files), handed to the bench
    the way the plugin hands them to the engine."""
    from fixtures.selection import family_quirks_file
    from fixtures.windows import device_windows
    from qpconform import bench

    return bench.Tuning(windows=device_windows, quirks_file=family_quirks_file)


def _cmd_bench(args: argparse.Namespace) -> int:
    from pathlib import Path

    from qpconform import bench
    from qpconform.adapters import pyverbs_compat as pc
    from qpconform.engine.device import DeviceLost
    from reports.atomic import ReportWriteError

    try:
        if args.vm:
            device = args.device or f"{args.driver}0"
            return bench.vm_main(args.vm, device, args.seconds, Path(args.output),
                                 bench_tuning(), args.driver, args.sessions)
        if args.device is None:
            print("qpconform bench: give --device NAME (a device on this host) or --vm RELEASE "
                  "(SoftRoCE in the VM)", file=sys.stderr)
            return 4
        return bench.main(args.device, args.seconds, Path(args.output), bench_tuning(),
                          args.port)
    except (pc.UsageError, ImportError) as exc:
        print(f"qpconform bench: {exc}", file=sys.stderr)
        return 4
    except (ReportWriteError, DeviceLost) as exc:
        print(f"qpconform bench: {exc}", file=sys.stderr)
        return 1


def _add_driver_source(subparsers: argparse._SubParsersAction) -> None:
    from qpconform.vm import drivers, image

    parser = subparsers.add_parser(
        "driver-source",
        help="fetch the guest kernel's own source of a driver, to patch and gate",
        description="Extract DEST/<driver> from the Debian linux-source package of the exact "
        "kernel the VM image runs; patch it, then: qpconform vm --driver-src DEST/<driver> "
        "-- python3 -m pytest suites/ --device rxe0",
    )
    parser.add_argument("dest", type=Path, metavar="DEST", help="folder to put <driver>/ in")
    parser.add_argument("--driver", default="rxe", choices=sorted(drivers.DRIVERS))
    parser.add_argument("--release", default=image.DEFAULT_RELEASE, choices=image.RELEASES,
                        help="Debian release of the guest (default %(default)s)")
    parser.add_argument("--mirror", help="Debian archive URI (default: the host's apt sources)")
    parser.set_defaults(func=_cmd_driver_source)


def _cmd_driver_source(args: argparse.Namespace) -> int:
    from qpconform.vm import buildenv, drivers, image, prereqs, runner

    try:
        opts = runner.VmOptions(release=args.release, mirror=args.mirror, build_only=True)
        img = runner.ensure_image(opts, image.cache_root())
        env = buildenv.for_image(img)
        folder = buildenv.fetch_source(env, drivers.spec(args.driver), args.dest)
    except (runner.UserError, prereqs.PrereqError, drivers.DriverError, buildenv.BuildError) as exc:
        print(f"qpconform driver-source: error: {exc}", file=sys.stderr)
        return 2
    print(folder)
    return 0


def _add_mutants(subparsers: argparse._SubParsersAction) -> None:
    from qpconform.vm import drivers, image

    parser = subparsers.add_parser(
        "mutants",
        help="gate mutant drivers in the VM and report the mutation score",
        usage="qpconform mutants [options] [-- PYTEST_ARGS...]",
        description="Build every mutant of qpconform/mutants/<driver>/ (patches of the guest "
        "kernel's stock source), gate each in its own VM boot, and write the score and a table to "
        "--output (.json and .md). PYTEST_ARGS after -- replace the selection (default suites/).",
    )
    parser.add_argument("--driver", default="rxe", choices=sorted(drivers.DRIVERS))
    parser.add_argument("--release", action="append", choices=image.RELEASES,
                        help="guest release (repeatable; default bookworm)")
    parser.add_argument("--only", action="append", default=[], metavar="ID",
                        help="run only this mutant (repeatable)")
    parser.add_argument("--ci-sample", action="store_true",
                        help="only the mutants marked ci = true (the small fixed CI sample)")
    parser.add_argument("--profile", default="ci", help="Hypothesis profile (default ci)")
    parser.add_argument("--timeout", type=_positive, default=1500.0,
                        help="seconds per VM run before it counts as hung (default 1500)")
    parser.add_argument("--all-tests", action="store_true",
                        help="run the whole selection, not only up to the first failure")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip gating the unmodified rebuild (when the stock driver is "
                        "gated anyway, as in CI); every quirk a mutant matches then counts as "
                        "its own, so a survivor may read known-only")
    parser.add_argument("--in-guest", action="store_true",
                        help="run pytest inside the guest (default: on this host against "
                        "the guest's executor, as the main job runs: every suite, the lone-QP "
                        "suites first, or the PYTEST_ARGS selection)")
    parser.add_argument("--output", type=Path, default=Path("reports/out/mutants.json"))
    parser.set_defaults(func=_cmd_mutants)


def _cmd_mutants(args: argparse.Namespace) -> int:
    from qpconform.mutants import run

    plan = run.Plan(
        driver=args.driver,
        releases=tuple(args.release or ["bookworm"]),
        only=tuple(args.only),
        ci_sample=args.ci_sample,
        pytest_args=tuple(args.command or ["suites/"]),
        profile=args.profile,
        timeout=args.timeout,
        stop_at_first=not args.all_tests,
        baseline=not args.no_baseline,
        host_engine=not args.in_guest,
    )
    return run.main(plan, args.output)


def _add_soak(subparsers: argparse._SubParsersAction) -> None:
    from qpconform import soak

    parser = subparsers.add_parser(
        "soak",
        help="run the suites many times under fresh random seeds and list each verdict",
        usage="qpconform soak [options] [-- PYTEST_ARGS...]",
        description="Each run is the main job (suites/, -n 2) with its own random seed in its "
        "own VM boot; every unknown divergence on a stock driver is a finding. PYTEST_ARGS "
        "after -- are added to each run (e.g. --stateful-budget 300).",
    )
    parser.add_argument(
        "--target", action="append", type=soak.parse_target,
        metavar="RELEASE/DRIVER[:RUNS|@SEEDS]",
        help="guest release and driver, with how many fresh seeds (:RUNS) or which seeds "
        "(@S,S...); repeatable; default " + ", ".join(soak.DEFAULT_TARGETS),
    )
    parser.add_argument("--seed", action="append", type=int, default=[],
                        help="run these seeds (repeatable) instead of fresh ones, on every target")
    parser.add_argument("--profile", default="default",
                        choices=["quick", "default", "thorough", soak.DERANDOMIZED],
                        help="Hypothesis profile (default: default); ci is derandomized: every "
                        "run draws the same examples and takes no seed")
    parser.add_argument("--busy", type=_non_negative_int, default=0, metavar="N",
                        help="N busy loops on the host beside each run (a saturated host must "
                        "change no verdict: compare the runs with qpconform report --same)")
    parser.add_argument("--timeout", type=_positive, default=2400.0,
                        help="seconds per VM run before it counts as hung (default 2400)")
    parser.add_argument("--output", type=Path, default=Path("reports/out/soak"),
                        help="where each run's records and soak.json go")
    parser.add_argument("--markdown", type=Path, default=Path("docs/soak.md"),
                        help="the Markdown table (default docs/soak.md)")
    parser.set_defaults(func=_cmd_soak)


def _cmd_soak(args: argparse.Namespace) -> int:
    from qpconform import soak

    targets = args.target or [soak.parse_target(t) for t in soak.DEFAULT_TARGETS]
    command = shlex.join(["qpconform", *sys.argv[1:]])  # as typed, for the table's header
    return soak.main(targets, args.seed, args.profile, list(args.command), args.output,
                     args.markdown, args.timeout, command, args.busy)


def _add_run(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run the installed conformance suites against a device",
        usage="qpconform run --device NAME [options] [-- PYTEST_ARGS...]",
        description="The conformance suites, as installed with qpconform (no clone needed), "
        "against the RDMA device NAME; PYTEST_ARGS after -- go to pytest (plugin options: "
        "--quirks, --hypothesis-profile, --qp-type, -n, -k ...). Exit status: pytest's.",
    )
    parser.add_argument("--device", required=True, help="the RDMA device (ibv_devices)")
    parser.add_argument("--suite", action="append", default=[], metavar="NAME",
                        help="only suites/test_NAME.py (repeatable; default every suite)")
    parser.add_argument("--out", type=Path, default=Path("reports/out"),
                        help="where records and reports go (default reports/out here)")
    parser.set_defaults(func=_cmd_run)


def _cmd_run(args: argparse.Namespace) -> int:
    from qpconform import run_suites

    return run_suites.main(args.device, args.suite, args.out, list(args.command))


_SUBCOMMANDS = [_add_vm, _add_report, _add_bench, _add_driver_source, _add_mutants, _add_soak,
                _add_run]


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
