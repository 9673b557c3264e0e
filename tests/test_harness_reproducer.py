"""Reproducer scripts: generated for a divergence, standalone, and right when they run.

The scripts are run here against a stand-in `pyverbs` package (written to a
temporary directory) whose QPs are the fake device's: a script must exit 1 on
the faulty fake and 0 on the clean one. The lead runs them for real in the VM.
"""

from __future__ import annotations

import os
import py_compile
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from models.enums import Attr, QPState, QPType
from qpconform.engine import unmasked
from qpconform.engine.judge import DivergenceError
from qpconform.engine.lone import Checker
from qpconform.engine.records import Divergence, DivergenceList
from reports.reproducer import render, write_reproducer
from tests.fake_device import FakeDevice

S = QPState
ROOT = Path(__file__).resolve().parents[1]

#: A stand-in pyverbs over tests/fake_device.py: only what generated scripts call.
FAKE_PYVERBS = {
    "__init__.py": "",
    "pyverbs_error.py": """
        class PyverbsError(Exception):
            pass

        class PyverbsRDMAError(PyverbsError):
            def __init__(self, msg, error_code=-1):
                super().__init__(msg)
                self.error_code = error_code
    """,
    "device.py": """
        import os
        from types import SimpleNamespace
        from tests.fake_device import FakeDevice

        DEVICE = FakeDevice([f for f in os.environ.get("FAKE_FAULTS", "").split(",") if f])

        class Context:
            def __init__(self, name):
                self.name = name
            def query_gid(self, port, index):
                return SimpleNamespace(gid="fe80::1")
            def query_port(self, port):
                return SimpleNamespace(lid=0)
    """,
    "pd.py": "class PD:\n    def __init__(self, ctx):\n        self.ctx = ctx\n",
    "mr.py": """
        class MR:
            def __init__(self, pd, length, access):
                self.buf, self.lkey = 0x1000, 7
    """,
    "addr.py": """
        from types import SimpleNamespace

        def GlobalRoute(dgid=None, sgid_index=0):
            return SimpleNamespace(dgid=dgid, sgid_index=sgid_index)

        def AHAttr(port_num=1, is_global=0, gr=None, dlid=0):
            return SimpleNamespace(port_num=port_num, gr=gr)

        def AH(pd, attr=None):
            return attr
    """,
    "wr.py": """
        class SGE:
            def __init__(self, addr, length, lkey):
                pass

        class SendWR:
            def __init__(self, wr_id=0, opcode=0, num_sge=0, sg=None, send_flags=0):
                self.wr_id = wr_id
            def set_wr_ud(self, ah, rqpn, rqkey):
                pass

        class RecvWR:
            def __init__(self, wr_id=0, num_sge=0, sg=None):
                self.wr_id = wr_id
    """,
    "cq.py": """
        from types import SimpleNamespace

        class CQ:
            def __init__(self, ctx, cqe, cq_context=None, channel=None, comp_vector=0):
                self.queue = []
            def poll(self, num_entries=1):
                for qp in CQ.qps:
                    qp.distribute()
                done, self.queue = self.queue[:num_entries], self.queue[num_entries:]
                return len(done), done

        CQ.qps = []
    """,
    "qp.py": """
        from types import SimpleNamespace
        from pyverbs.cq import CQ
        from pyverbs.device import DEVICE
        from pyverbs.pyverbs_error import PyverbsRDMAError
        from models.enums import QPType

        class QPCap:
            def __init__(self, **kw):
                pass

        class QPInitAttr:
            def __init__(self, qp_type, scq, rcq, cap=None, sq_sig_all=1):
                self.qp_type, self.scq, self.rcq = qp_type, scq, rcq

        class QPAttr:
            pass

        class QP:
            def __init__(self, pd, init):
                self.fake = DEVICE.create_qp(QPType(init.qp_type))
                self.qp_num, self.init = self.fake.qp_num, init
                CQ.qps.append(self)
            def modify(self, attr, mask):
                values = {k: v for k, v in vars(attr).items() if not k.endswith("ah_attr")}
                if hasattr(attr, "ah_attr"):
                    values["ah_port_num"] = attr.ah_attr.port_num
                    values["ah_sgid_index"] = attr.ah_attr.gr.sgid_index
                self._check(self.fake.modify(values, mask))
            def query(self, mask):
                found = self.fake.query()
                return SimpleNamespace(qp_state=int(found.state), **found.attrs), self.init
            def post_send(self, wr, bad_wr):
                self._check(self.fake.post_send(wr.wr_id))
            def post_recv(self, wr, bad_wr):
                self._check(self.fake.post_recv(wr.wr_id))
            def distribute(self):
                for c in self.fake.poll():
                    cq = self.init.scq if c.queue == "send" else self.init.rcq
                    cq.queue.append(SimpleNamespace(wr_id=c.wr_id, status=int(c.status)))
            def close(self):
                self.fake.destroy()
            @staticmethod
            def _check(result):
                if not result.accepted:
                    raise PyverbsRDMAError("refused", result.errno)
    """,
}


def _fake_pyverbs(tmp_path: Path) -> Path:
    pkg = tmp_path / "stub" / "pyverbs"
    pkg.mkdir(parents=True)
    for name, source in FAKE_PYVERBS.items():
        (pkg / name).write_text(textwrap.dedent(source))
    return pkg.parent


def _diverge(fault: str, qp_type: QPType, run) -> Divergence:
    checker = Checker(FakeDevice([fault]), settle_window=0.0, must_wait=0.0,
                      sink=DivergenceList())
    qp = checker.open_qp(qp_type)
    with pytest.raises(DivergenceError) as caught:
        run(qp)
    checker.close()
    return caught.value.record


def _lost_flush(qp) -> None:
    qp.post_send()  # refused in RESET: recorded as never to run
    qp.bring_to(S.INIT)
    qp.post_recv()
    qp.post_recv()
    qp.bring_to(S.ERR)
    qp.settle()


def _timeout_outside_the_mask(qp) -> None:
    qp.bring_to(S.RTS)
    attrs, mask = qp.values.transition_attrs(S.RTS)  # RTS->RTS: STATE only
    qp.modify(qp.values.with_unmasked(attrs, mask, "other"), mask)


def _attribute_only_from_init(qp) -> None:
    qp.bring_to(S.INIT)
    qp.modify(qp.values.attrs_for(Attr.QKEY), Attr.QKEY, unmasked.uniform(unmasked.OTHER))


def _illegal(qp) -> None:
    qp.bring_to(S.INIT)
    attrs, mask = qp.values.transition_attrs(S.RTR)
    attrs["qp_state"] = int(S.RTS)
    qp.modify(attrs, mask)


CASES = {
    "lost_flush": (QPType.RC, _lost_flush),
    "accept_illegal_transition": (QPType.UD, _illegal),
    "run_failed_post": (QPType.UC, _lost_flush),
    "store_in_wrong_field": (QPType.RC, lambda qp: qp.bring_to(S.RTR)),
    "read_unmasked_field": (QPType.RC, _timeout_outside_the_mask),
    # the qp_state the fill put outside the mask: the script sets it as the run did
    "state_from_unmasked_qp_state": (QPType.UD, _attribute_only_from_init),
}


def test_script_compiles_and_holds_the_steps(tmp_path: Path) -> None:
    record = _diverge("lost_flush", QPType.RC, _lost_flush)
    path = write_reproducer(record, tmp_path)
    assert path == tmp_path / f"{record.id}.py" and os.access(path, os.X_OK)
    py_compile.compile(str(path), doraise=True)
    text = path.read_text()
    assert text.startswith("#!/usr/bin/env python3")
    for step in record.steps:
        if step["verb"] == "modify":
            assert f"'mask_value': {step['mask_value']}" in text
        if "wr_id" in step:
            assert f"'wr_id': {step['wr_id']}" in text
    assert "ibta.err.flush" in text and 'default="fake0"' in text
    imports = re.findall(r"^(?:from|import) (\S+)", text, re.M)
    assert {i.split(".")[0] for i in imports} <= {"argparse", "os", "select", "sys", "time",
                                                  "pyverbs"}


def test_text_from_the_run_cannot_break_the_script() -> None:
    record = _diverge("lost_flush", QPType.RC, _lost_flush).with_(
        observed='quote " backslash \\ dollar $x """ newline\nend'
    )
    compile(render(record), "reproducer", "exec")


@pytest.mark.parametrize("fault", sorted(CASES))
def test_script_reproduces_on_the_faulty_device_only(fault: str, tmp_path: Path) -> None:
    qp_type, run = CASES[fault]
    path = write_reproducer(_diverge(fault, qp_type, run), tmp_path)
    env = {**os.environ, "PYTHONPATH": f"{_fake_pyverbs(tmp_path)}{os.pathsep}{ROOT}"}
    bad = subprocess.run([sys.executable, str(path)], env={**env, "FAKE_FAULTS": fault},
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "REPRODUCED" in bad.stdout
    good = subprocess.run([sys.executable, str(path), "--device", "fake0"],
                          env={**env, "FAKE_FAULTS": ""}, capture_output=True, text=True,
                          timeout=60)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "not reproduced" in good.stdout
