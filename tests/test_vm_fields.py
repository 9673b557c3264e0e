"""In the guest: every public field of pyverbs' WC, QPAttr, QPInitAttr, QPCap and SrqAttr
has an entry in the field ledger (models/fields.py), so a pyverbs that grows a field makes
this fail until the ledger says what checks it (slow; QPCONFORM_VM_TESTS=1).

pyverbs exists only in the guest: the guest prints the fields its classes have, the host
compares them with the ledger (tests/test_fields_ledger.py checks the same against
verbs.h's names and what the adapters read, without a VM).
"""

from __future__ import annotations

import json
import re

from models import fields
from tests.vm_helpers import VM_ONLY, out_dir, run_in_vm

pytestmark = VM_ONLY

#: Printed by the guest: {class: [public field, ...]}. A cdef class's properties are
#: getset descriptors (not routines); methods (set_log_level, ...) are left out.
GUEST_SCRIPT = """
import inspect, json
import pyverbs.cq, pyverbs.qp, pyverbs.srq

CLASSES = {"WC": pyverbs.cq, "QPAttr": pyverbs.qp, "QPInitAttr": pyverbs.qp,
           "QPCap": pyverbs.qp, "SrqAttr": pyverbs.srq}
found = {}
for name, module in CLASSES.items():
    cls = getattr(module, name)
    found[name] = sorted(n for n in dir(cls)
                         if not n.startswith("_") and not inspect.isroutine(getattr(cls, n)))
print("PYVERBS-FIELDS " + json.dumps(found))
"""


def test_every_pyverbs_field_is_in_the_ledger():
    out = out_dir("selftest-fields")
    script = out / "pyverbs_fields.py"
    script.write_text(GUEST_SCRIPT)
    result = run_in_vm(out, f"python3 {script}", timeout=300)
    assert result.returncode == 0, "the guest could not list pyverbs' fields"
    match = re.search(r"^PYVERBS-FIELDS (.*)$", result.stdout, re.MULTILINE)
    assert match, "the guest printed no PYVERBS-FIELDS line"
    found = json.loads(match.group(1))
    assert set(found) == set(fields.PYVERBS_CLASSES)
    assert found["WC"], "pyverbs' WC showed no fields: the listing is broken"
    assert "byte_len" in found["WC"] and "srq_limit" in found["SrqAttr"]
    assert fields.pyverbs_missing(found) == []
