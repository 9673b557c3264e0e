"""``qpconform vm`` arguments, control files and exit status, without QEMU."""

import subprocess
import sys
from pathlib import Path

import pytest

from qpconform import cli
from qpconform.vm import prereqs, qemu, runner


def test_missing_command_is_a_clear_error(capsys):
    assert cli.main(["vm"]) == runner.EXIT_INFRA
    err = capsys.readouterr().err
    assert "no COMMAND given" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["vm", "--env", "NOEQUALS", "--", "true"], "--env wants NAME=VALUE"),
        (["vm", "--kernel", "/nonexistent/bzImage", "--", "true"], "no such file"),
        (["vm", "--modules", "/", "--", "true"], "go with --kernel"),
        (["vm", "--timeout", "0", "--", "true"], "--timeout must be positive"),
    ],
)
def test_option_errors(capsys, argv, message):
    assert cli.main(argv) == runner.EXIT_INFRA
    assert message in capsys.readouterr().err


def test_a_log_dir_that_cannot_take_files_is_a_clear_error(tmp_path, capsys, monkeypatch):
    """Found before the image build and the boot, not minutes later (a file in the way
    fails for root too)."""
    monkeypatch.setattr(runner, "ensure_image", lambda *args: pytest.fail("image before log dir"))
    (tmp_path / "taken").write_text("")
    log_dir = tmp_path / "taken" / "out"
    assert cli.main(["vm", "--log-dir", str(log_dir), "--", "true"]) == runner.EXIT_INFRA
    err = capsys.readouterr().err
    assert (
        f"error: the report folder {log_dir} cannot take the run's records: it is not a folder "
        "(a file is in the way); make it a writable folder or pass --log-dir DIR"
    ) in err
    assert "Traceback" not in err and "building" not in err


def test_bad_choice_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["vm", "--accel", "hvf", "--", "true"])
    assert exc.value.code == 2
    assert "--accel" in capsys.readouterr().err


def test_command_after_double_dash_keeps_its_options():
    parser = cli.build_parser()
    args = parser.parse_args(["vm", "--release", "trixie", "--env", "A=1"])
    assert args.release == "trixie" and args.env == ["A=1"]
    from qpconform.vm import cli_args

    opts = cli_args.options_from_args(args, ["pytest", "--device", "rxe0", "--", "x"])
    assert opts.command == ["pytest", "--device", "rxe0", "--", "x"]
    assert opts.pip_packages[:1] == ["allure-pytest"]


def test_python_dash_m_entry(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "qpconform", "vm", "--help"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    assert result.returncode == 0 and "-- COMMAND" in result.stdout


def test_command_script_quotes_and_returns_status(tmp_path):
    opts = runner.VmOptions(
        command=["sh", "-c", 'echo "$GREETING $0"; exit 3', "it's"], env=["GREETING=hello world"]
    )
    runner.write_control(tmp_path, opts, Path("/proj"), Path("/proj/sub"), True)
    result = subprocess.run(["sh", str(tmp_path / "command.sh")], capture_output=True, text=True)
    assert result.returncode == 3
    assert result.stdout == "hello world it's\n"
    config = (tmp_path / "config.sh").read_text()
    assert "PROJECT_DIR=/proj\n" in config and "WORK_DIR=/proj/sub\n" in config


def test_env_pythonpath_is_prepended(tmp_path):
    opts = runner.VmOptions(command=["sh", "-c", 'echo "$PYTHONPATH"'], env=["PYTHONPATH=/x y"])
    runner.write_control(tmp_path, opts, Path("/p"), Path("/p"), True)
    script = str(tmp_path / "command.sh")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": "/p:/deps"}
    result = subprocess.run(["sh", script], capture_output=True, text=True, env=env)
    assert result.stdout == "/x y:/p:/deps\n"
    env.pop("PYTHONPATH")
    result = subprocess.run(["sh", script], capture_output=True, text=True, env=env)
    assert result.stdout == "/x y\n"


def test_modules_tree(tmp_path):
    ver = tmp_path / "lib" / "modules" / "6.9.0"
    (ver / "kernel").mkdir(parents=True)
    (ver / "modules.dep").write_text("")
    assert runner.modules_tree(tmp_path) == tmp_path / "lib" / "modules"
    assert runner.modules_tree(ver) == tmp_path / "lib" / "modules"
    with pytest.raises(runner.UserError):
        runner.modules_tree(tmp_path / "lib" / "modules" / "6.9.0" / "kernel")


def finish(tmp_path, status, kernel_log):
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    (ctl / "status").write_text(f"{status}\n")
    (ctl / "kernel.log").write_text(kernel_log)
    outcome = qemu.Outcome("exited", status=status, boot_seconds=1.0)
    return runner._finish(outcome, "tcg", ctl, tmp_path, runner.VmOptions(), 0.0)


def test_status_comes_back(tmp_path):
    assert finish(tmp_path, 3, "[ 1.0] rdma_rxe: loaded\n") == 3
    assert (tmp_path / "guest-kernel-log.txt").read_text() == "[ 1.0] rdma_rxe: loaded\n"


def test_kernel_warning_fails_a_successful_command(tmp_path, capsys):
    assert finish(tmp_path, 0, "[ 8.3] WARNING: CPU: 0 PID: 1 at planted\n") == 1
    err = capsys.readouterr().err
    assert "problem report" in err and "planted" in err


def test_guest_setup_error_is_a_runner_failure(tmp_path, capsys):
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    (ctl / "status").write_text("125\n")
    (ctl / "setup-error").write_text("modprobe rdma_rxe failed\n")
    outcome = qemu.Outcome("exited", status=125, boot_seconds=1.0)
    opts = runner.VmOptions()
    assert runner._finish(outcome, "tcg", ctl, tmp_path, opts, 0.0) == runner.EXIT_INFRA
    assert "guest setup failed before COMMAND ran: modprobe rdma_rxe failed" in (
        capsys.readouterr().err
    )


def test_timeout_outcome(tmp_path, capsys):
    outcome = qemu.Outcome("timeout", boot_seconds=2.0)
    opts = runner.VmOptions(timeout=5)
    assert runner._finish(outcome, "tcg", tmp_path, tmp_path, opts, 0.0) == runner.EXIT_TIMEOUT
    assert "killed it" in capsys.readouterr().err


def test_missing_tool_names_the_package(monkeypatch):
    monkeypatch.setattr(prereqs, "_which", lambda program: None)
    with pytest.raises(prereqs.PrereqError) as exc:
        prereqs.check_tools(prereqs.BOOT_TOOLS)
    assert "qemu-system-x86" in str(exc.value) and "qemu-utils" in str(exc.value)
    assert "--install-deps" in str(exc.value)


def test_unreachable_mirror_is_a_clear_error():
    with pytest.raises(prereqs.PrereqError, match="no route to the package mirror"):
        prereqs.check_mirror_reachable("http://127.0.0.1:9/debian", timeout=5)


def test_disk_space_check(tmp_path):
    with pytest.raises(prereqs.PrereqError, match="not enough disk space"):
        prereqs.check_disk_space(tmp_path, needed=1 << 62)


def test_install_deps_needs_root(monkeypatch, capsys):
    monkeypatch.setattr(prereqs.os, "geteuid", lambda: 1000)
    assert cli.main(["vm", "--install-deps"]) == 1
    assert "apt-get install" in capsys.readouterr().err


def test_a_silent_boot_timeout_says_the_guest_printed_nothing(tmp_path, capsys):
    outcome = qemu.Outcome("boot-timeout", message="no boot marker within 180 s")
    opts = runner.VmOptions()
    assert runner._finish(outcome, "tcg", tmp_path, tmp_path, opts, 0.0) == runner.EXIT_INFRA
    err = capsys.readouterr().err
    assert "printed nothing on its console" in err and "no boot marker within 180 s" in err


def test_a_guest_kernel_crash_fails_the_run_as_the_device_under_test(tmp_path, capsys):
    outcome = qemu.Outcome("crashed", boot_seconds=1.0,
                           message="the guest kernel crashed ([ 94.5] Oops: 0000 [#1]); "
                           "stopped the guest 30 s later")
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    status = runner._finish(outcome, "tcg", ctl, tmp_path, runner.VmOptions(), 0.0)
    assert status == runner.EXIT_KERNEL_LOG  # the driver's failure, not the runner's (125)
    err = capsys.readouterr().err
    assert "Oops: 0000" in err and "guest-console.txt" in err


def test_the_log_dir_is_relative_to_the_project(tmp_path):
    """The host engine's mark for the guest goes where the runner puts the logs: both ask
    runner.log_dir_of (the guest sees the project, so a relative --log-dir lives there)."""
    assert runner.log_dir_of(runner.VmOptions(project=tmp_path)) == (
        tmp_path.resolve() / "reports" / "out")
    absolute = tmp_path / "logs"
    assert runner.log_dir_of(runner.VmOptions(project=tmp_path, log_dir=absolute)) == absolute
