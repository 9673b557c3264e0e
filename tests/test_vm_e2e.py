"""End to end: really boots the SoftRoCE VM (slow; set QPCONFORM_VM_TESTS=1).

Two runs, each a separate boot: the device and environment checks share one boot,
which ends with a status of its own that must come back; the planted kernel WARNING
needs its own (it turns the status into the runner's failure).
The first run may build the image (about a minute here) if it is not cached.
"""

import os
import subprocess
import sys
from pathlib import Path

from tests.vm_helpers import REPO, VM_ONLY

pytestmark = VM_ONLY


def qpconform_vm(project: Path, *args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    """`python -m qpconform vm --project PROJECT ARGS` from PROJECT/sub, output captured."""
    workdir = project / "sub"
    workdir.mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [
        sys.executable,
        "-m",
        "qpconform",
        "vm",
        "--project",
        str(project),
        "--log-dir",
        str(project / "logs"),
        "--timeout",
        str(timeout - 60),
        *args,
    ]
    result = subprocess.run(
        cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout
    )
    print(result.stdout)
    print(result.stderr, file=sys.stderr)
    return result


def test_device_environment_share_and_exit_status(tmp_path):
    check = (
        "ibv_devinfo -d rxe0 && ibv_devinfo -d rxe1 >/dev/null && pwd && "
        'test "$QPCONFORM_IN_VM" = 1 && test "$EXTRA" = \'a b\' && '
        "python3 -c 'import pyverbs.device, xdist, allure_pytest, hypothesis' && "
        "echo from-guest > made-in-guest.txt && echo CHECKS-OK && exit 3"
    )
    result = qpconform_vm(tmp_path, "--env", "EXTRA=a b", "--", "sh", "-c", check)
    assert result.returncode == 3, result.stderr  # COMMAND's own status comes back
    assert "COMMAND exited with status 3" in result.stderr
    assert "hca_id:\trxe0" in result.stdout
    assert "PORT_ACTIVE" in result.stdout
    assert f"{tmp_path / 'sub'}\n" in result.stdout  # same path in the guest
    assert "CHECKS-OK" in result.stdout
    made = tmp_path / "sub" / "made-in-guest.txt"
    assert made.read_text() == "from-guest\n"
    assert made.stat().st_uid == os.getuid()  # the host user owns what the guest wrote
    assert (tmp_path / "logs" / "guest-kernel-log.txt").is_file()


def test_planted_kernel_warning_fails_the_run(tmp_path):
    plant = 'echo "WARNING: CPU: 0 PID: 1 at qpconform-planted-warning" > /dev/kmsg'
    result = qpconform_vm(tmp_path, "--", "sh", "-c", plant)
    assert result.returncode == 1, result.stderr
    assert "problem report" in result.stderr
    assert "qpconform-planted-warning" in result.stderr
    saved = (tmp_path / "logs" / "guest-kernel-log.txt").read_text()
    assert "qpconform-planted-warning" in saved
