"""End to end: a patched rxe gated in the VM with --driver-src (slow; QPCONFORM_VM_TESTS=1).

Fetches the guest kernel's stock rxe source (cached after the first run), makes
a trivial patch (a new module description: no behaviour change, a new build),
gates it with a short suite selection and checks that the report names the
patched driver and that the kernel ran exactly that build.
"""

from __future__ import annotations

import json
import shutil

from qpconform.vm import driver_setup, drivers, image, runner
from tests.vm_helpers import VM_ONLY, out_dir, run_in_vm

pytestmark = VM_ONLY


def test_patched_rxe_is_built_loaded_gated_and_named_in_the_report(tmp_path):
    root = image.cache_root()
    img = runner.ensure_image(runner.VmOptions(build_only=True), root)
    stock = driver_setup.stock_source(drivers.spec("rxe"), img, root)
    patched = tmp_path / "rxe"
    shutil.copytree(stock, patched)
    source = patched / "rxe.c"
    text = source.read_text()
    assert 'MODULE_DESCRIPTION("' in text
    source.write_text(
        text.replace('MODULE_DESCRIPTION("', 'MODULE_DESCRIPTION("qpconform-self-test ', 1)
    )
    out = out_dir("selftest-driver-src")
    result = run_in_vm(
        out,
        "python3 -m pytest suites/test_post_rules.py --device rxe0 --qp-type RC -q "
        "-p no:cacheprovider",
        "--driver-src",
        str(patched),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "out of tree from" in result.stderr
    identity = json.loads((out / "report.json").read_text())["identity"]
    assert identity["driver_origin"] == "out-of-tree"
    assert identity["driver_source"] == str(patched)
    assert identity["driver_source_sha256"] == drivers.tree_hash(patched)
    assert identity["driver_loaded_build_id"] == identity["driver_build_id"] != ""
    assert "O" in identity["driver_taint"]
