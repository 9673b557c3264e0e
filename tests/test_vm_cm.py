"""End to end: two of our own RC QPs connected over iWARP through rdma_cm, on siw in the VM
(slow; QPCONFORM_VM_TESTS=1).

qpconform/adapters/cm_connect.py connects a QP on siw0 (192.0.2.1) to one on siw1 (192.0.2.2):
both reach RTS and a SEND with a posted receive completes and delivers its bytes.
Closing the pair releases every cm_id, QP, CQ, MR and PD, and so does a connection
that fails half way (the passive address belongs to the other device). link_qps
does the same for two QPs of the device adapter (qpconform/adapters/pyverbs_device.py), the
ones the traffic harness drives.

RTS is what ibv_query_qp says on Linux 6.12. Linux 6.1's siw_query_qp leaves
qp_state unset, so the query says RESET whatever the state; there, RTS shows in
what siw does: it refuses a post_send outside RTS (EIO, checked on a QP no
connection moved) and accepted and completed the connected QP's SEND.
"""

from __future__ import annotations

import errno
import json
import os

import pytest

from qpconform.adapters import leaks
from tests.vm_helpers import VM_ONLY, out_dir, run_in_vm

pytestmark = VM_ONLY

GUEST = """
import json
import platform
import sys
import time

from qpconform.adapters import leaks
from qpconform.adapters.cm_connect import CMError
from qpconform.adapters.cm_pair import CMEnd, connect_pair, own_qp

DEVICES = ("siw0", "siw1")


def counts():
    return {d: leaks.snapshot(d) for d in DEVICES}


result = {"kernel": platform.release(), "before": counts()}
lone = CMEnd("siw0", "", "lone")  # a QP no connection moved
try:
    own_qp(lone)
    result["lone_post_send"] = lone.post_send(1)
finally:
    lone.close()
with connect_pair("siw0", "192.0.2.1", "siw1", "192.0.2.2", timeout=20) as pair:
    result["log"] = pair.log
    result["states"] = {e.role: e.query()["qp_state"] for e in pair.ends()}
    result["post_recv"] = pair.b.post_recv(7)
    result["post_send"] = pair.a.post_send(8, b"over-iwarp")
    result["send_wc"] = pair.a.poll(10, want=1)
    result["recv_wc"] = pair.b.poll(10, want=1)
    result["payload"] = pair.b.received(10).decode()
result["closed"] = counts()

# the device adapter's own QPs (what PyverbsPair uses), connected by link_qps
from qpconform.adapters.cm_connect import link_qps
from qpconform.adapters.pyverbs_device import open_device
from models.enums import Attr, QPState, QPType

devices = [open_device(d) for d in DEVICES]
try:
    qps = [d.create_qp(QPType.RC) for d in devices]
    for d, qp in zip(devices, qps):
        values = {**d.valid_attrs(qp), "qp_state": int(QPState.INIT)}
        mask = Attr.STATE | Attr.PKEY_INDEX | Attr.PORT | Attr.ACCESS_FLAGS
        assert qp.modify(values, mask).accepted
    with link_qps("siw0", "192.0.2.1", qps[0].qp_num, "siw1", "192.0.2.2", qps[1].qp_num,
                  timeout=20) as link:
        result["adapter_log"] = link.log
        result["adapter_states"] = [int(qp.query().state) for qp in qps]
        result["adapter_post"] = [qps[1].post_recv(70).accepted, qps[0].post_send(80).accepted]
        time.sleep(1)
        result["adapter_wc"] = [[c.wr_id, c.queue, int(c.status)] for qp in qps for c in qp.poll()]
finally:
    for d in devices:
        d.close()
result["adapter_closed"] = counts()
try:
    connect_pair("siw0", "192.0.2.1", "siw1", "192.0.2.1", timeout=20).close()
    result["wrong_device"] = "connected"
except CMError as exc:
    result["wrong_device"] = str(exc)
result["failed"] = counts()
json.dump(result, open(sys.argv[1], "w"), indent=1)
"""

#: What closing must bring back (ctx is librdmacm's: it keeps a device open per process).
KINDS = ("pd", "cq", "qp", "mr", "cm_id")
RTS, RESET = 3, 0


#: Linux 6.1's siw connections are CI's too: its siw phase runs the main job on bookworm,
#: every pair connected by the same adapters/cm_pair.py with the leak check at its end; so
#: CI boots this test on trixie alone (QPCONFORM_VM_TESTS=all runs both).
BOTH_RELEASES = os.environ.get("QPCONFORM_VM_TESTS") == "all"


@pytest.mark.parametrize("release", [
    pytest.param("bookworm", marks=pytest.mark.skipif(
        not BOTH_RELEASES, reason="Linux 6.1's siw connections: CI's siw phase runs the main "
        "job through them on bookworm (QPCONFORM_VM_TESTS=all boots this one too)")),
    "trixie",
])
def test_own_qps_connect_over_iwarp_reach_rts_and_a_send_completes(release):
    out = out_dir(f"selftest-cm-{release}")
    guest = out / "cm_guest.py"
    guest.write_text(GUEST)
    script = (
        f"python3 {guest} {out}/result.json; echo RC-guest $?; "
        f"rdma -j resource show > {out}/after-exit.json"
    )
    text = run_in_vm(out, script, "--release", release, driver="siw", timeout=600).stdout
    assert "RC-guest 0" in text, "the guest script failed (its traceback is above)"
    r = json.loads((out / "result.json").read_text())

    assert r["log"] == ["created", "init", "connect", "request", "accept", "established"]
    assert r["lone_post_send"] == errno.EIO, "siw must refuse a post_send outside RTS"
    if r["kernel"].startswith("6.1."):
        assert r["states"] == {"active": RESET, "passive": RESET}, "6.1 reports no state"
    else:
        assert r["states"] == {"active": RTS, "passive": RTS}
    assert r["post_recv"] == 0 and r["post_send"] == 0
    assert r["send_wc"] == [["send", 8, 0]], "the SEND did not complete with success"
    assert r["recv_wc"] == [["recv", 7, 0]], "the receive did not complete with success"
    assert r["payload"] == "over-iwarp"

    assert "belongs to siw0, not siw1" in r["wrong_device"]
    assert r["adapter_log"] == ["connect", "request", "accept", "established"]
    assert r["adapter_states"] == [r["states"]["active"], r["states"]["passive"]]
    assert r["adapter_post"] == [True, True]
    assert sorted(r["adapter_wc"]) == [[70, "recv", 0], [80, "send", 0]]
    for dev in ("siw0", "siw1"):
        before = r["before"][dev]
        for stage in ("closed", "failed", "adapter_closed"):
            assert {k: r[stage][dev][k] for k in KINDS} == {k: before[k] for k in KINDS}, (
                f"{stage}: {dev} kept verbs or CM objects"
            )
        after_exit = leaks.parse((out / "after-exit.json").read_text(), dev)
        assert after_exit == before, f"{dev}: objects left after the process ended"
