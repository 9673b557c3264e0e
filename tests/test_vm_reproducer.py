"""End to end: a divergence found on rxe0 yields a reproducer script that reproduces it.

Boots the SoftRoCE VM once (set QPCONFORM_VM_TESTS=1). In a copy of the project,
the attribute suite runs without the quirk profile on the P_Key index boundary
(rxe does not check it: a real divergence), then the generated standalone
script runs alone with python3 and must exit 1, printing the divergence.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.vm_helpers import REPO, VM_ONLY

pytestmark = VM_ONLY

GUEST_SCRIPT = """
python3 -m pytest suites/test_attributes.py --device rxe0 --qp-type UD --quirks none \\
    -k 'UD-RESET-INIT-pkey_index-pkey_tbl_len]' -q -p no:cacheprovider
echo "SUITE_STATUS=$?"
script=$(ls reports/out/reproducers/*.py | head -n 1)
echo "SCRIPT=$script"
python3 "$script"
echo "REPRODUCER_STATUS=$?"
"""


def _copy_project(dest: Path) -> Path:
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in tracked:
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    return dest


def test_reproducer_reproduces_a_real_divergence(tmp_path):
    project = _copy_project(tmp_path / "project")
    result = subprocess.run(
        [sys.executable, "-m", "qpconform", "vm", "--project", str(project),
         "--log-dir", str(tmp_path / "logs"), "--timeout", "1100", "--",
         "sh", "-c", f"cd {project} && {GUEST_SCRIPT}"],
        cwd=project, env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True, text=True, timeout=1200,
    )
    out = result.stdout
    print(out)
    print(result.stderr, file=sys.stderr)
    assert "SUITE_STATUS=1" in out, "the suite should fail on the unquirked divergence"
    assert "attr.pkey_index.range" in out
    assert "SCRIPT=" in out and ".py" in out.split("SCRIPT=", 1)[1].splitlines()[0]
    assert "REPRODUCER_STATUS=1" in out, "the standalone script should reproduce it (exit 1)"
    assert result.returncode == 0
