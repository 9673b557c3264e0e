"""The field ledger (models/fields.py) against the document, the catalog, verbs.h's field
names and what the adapters read from pyverbs; each check with a planted fault proving it
fires (issue 45 item 1)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from models import fields
from models.catalog import all_rules

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "fields.md"
#: The adapter modules that read pyverbs' structures.
ADAPTERS = ("pyverbs_qp.py", "pyverbs_pair.py", "cm_pair.py", "pyverbs_device.py",
            "pyverbs_srq.py")

#: Every top-level field of the structures the ledger covers, as libibverbs' verbs.h names
#: them (rdma-core v50+; imm_data and invalidated_rkey are one union). A field added to
#: or dropped from a structure's entries makes this fail: the ledger covers each exactly.
VERBS_H: dict[str, set[str]] = {
    "ibv_qp_attr": {
        "qp_state", "cur_qp_state", "path_mtu", "path_mig_state", "qkey", "rq_psn", "sq_psn",
        "dest_qp_num", "qp_access_flags", "cap", "ah_attr", "alt_ah_attr", "pkey_index",
        "alt_pkey_index", "en_sqd_async_notify", "sq_draining", "max_rd_atomic",
        "max_dest_rd_atomic", "min_rnr_timer", "port_num", "timeout", "retry_cnt",
        "rnr_retry", "alt_port_num", "alt_timeout", "rate_limit",
    },
    "ibv_qp_cap": {
        "max_send_wr", "max_recv_wr", "max_send_sge", "max_recv_sge", "max_inline_data"},
    "ibv_qp_init_attr": {
        "qp_context", "send_cq", "recv_cq", "srq", "cap", "qp_type", "sq_sig_all"},
    "ibv_srq_attr": {"max_wr", "max_sge", "srq_limit"},
    "ibv_cq": {"cqe"},  # the rest of struct ibv_cq is libibverbs' bookkeeping
    "ibv_wc": {
        "wr_id", "status", "opcode", "vendor_err", "byte_len", "imm_data", "invalidated_rkey",
        "qp_num", "src_qp", "wc_flags", "pkey_index", "slid", "sl", "dlid_path_bits",
    },
    "ibv_async_event": {"element", "event_type"},
}

#: The names the adapters give pyverbs objects they read fields from, and the structure
#: each is (a nested "ah" is the query's ah_attr).
RECEIVERS: dict[str, tuple[str, str]] = {
    "wc": ("ibv_wc", ""),
    "attr": ("ibv_qp_attr", ""),
    "ah": ("ibv_qp_attr", "ah_attr."),
    "init": ("ibv_qp_init_attr", ""),
    "srq_attr": ("ibv_srq_attr", ""),
    "srq_init": ("ibv_srq_attr", ""),  # ibv_srq_init_attr.attr, as create_srq wrote it back
}


def _chain(node: ast.expr) -> list[str] | None:
    """`a.b.c` as ["a", "b", "c"]; None for anything else."""
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.insert(0, node.attr)
        node = node.value
    return [node.id, *names] if isinstance(node, ast.Name) else None


def fields_read(source: str) -> set[tuple[str, str]]:
    """(struct, field) for every pyverbs field an adapter module reads: an `int(...)` or
    `bool(...)` of an attribute of one of RECEIVERS, and the QPAttr fields the query
    copies by name (`_PLAIN_FIELDS`)."""
    found: set[tuple[str, str]] = set()
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("int", "bool") and len(node.args) == 1):
            chain = _chain(node.args[0])
            if chain and len(chain) > 1 and chain[0] in RECEIVERS:
                struct, prefix = RECEIVERS[chain[0]]
                found.add((struct, prefix + ".".join(chain[1:])))
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "_PLAIN_FIELDS" and isinstance(node.value, ast.Tuple)):
            found |= {("ibv_qp_attr", e.value) for e in node.value.elts
                      if isinstance(e, ast.Constant)}
    return found


def unlisted(read: set[tuple[str, str]]) -> list[str]:
    """The fields read that the ledger has no entry for."""
    return sorted(f"{s}.{n}" for s, n in read if fields.entry(s, n) is None)


def _adapter_reads() -> set[tuple[str, str]]:
    read: set[tuple[str, str]] = set()
    for name in ADAPTERS:
        read |= fields_read((ROOT / "qpconform" / "adapters" / name).read_text())
    return read


# ------------------------------------------------------------------------- the document
def test_docs_fields_md_is_the_ledger_rendered():
    assert DOC.read_text() == fields.render(), (
        "docs/fields.md is stale: python -m models fields-doc --out docs/fields.md")


def test_fields_doc_command_prints_the_ledger():
    proc = subprocess.run([sys.executable, "-m", "models", "fields-doc"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == fields.render()


def test_stale_doc_is_told_apart(tmp_path):
    """Planted: a document missing one row is not the rendered ledger."""
    text = fields.render()
    row = next(line for line in text.splitlines() if line.startswith("| `src_qp`"))
    assert text.replace(row + "\n", "") != fields.render()


# ---------------------------------------------------------------------- rules, reasons
def test_every_entry_has_a_known_rule_or_a_reason():
    assert fields.problems(set(all_rules())) == []


def test_every_unchecked_field_says_why():
    for f in fields.LEDGER:
        if not f.rules:
            assert len(f.reason) > 20, f"{f.struct}.{f.name}: a reason, in words"


@pytest.mark.parametrize("planted, said", [
    (fields.Field("ibv_wc", "src_qp", "ibv_poll_cq"), "neither a rule nor a reason"),
    (fields.Field("ibv_wc", "src_qp", "ibv_poll_cq", ("pair.ud.wc.no_such_rule",)),
     "not in the catalog"),
    (fields.Field("ibv_wc", "src_qp", "ibv_poll_cq", reason="   "),
     "neither a rule nor a reason"),
])
def test_planted_bad_entry_is_found(monkeypatch, planted, said):
    bad = tuple(planted if (f.struct, f.name) == ("ibv_wc", "src_qp") else f
                for f in fields.LEDGER)
    monkeypatch.setattr(fields, "LEDGER", bad)
    found = fields.problems(set(all_rules()))
    assert any("ibv_wc.src_qp" in p and said in p for p in found), found


def test_planted_duplicate_is_found(monkeypatch):
    monkeypatch.setattr(fields, "LEDGER", (*fields.LEDGER, fields.LEDGER[0]))
    assert any("listed twice" in p for p in fields.problems(set(all_rules())))


def test_the_wc_fields_this_issue_checks_name_their_rules():
    """Near miss of the "not checked" entries: the fields issue 45 item 1 reads now."""
    wanted = {
        "byte_len": {"pair.wc.byte_len", "pair.ud.wc.byte_len", "pair.wc.byte_len.write_imm"},
        "src_qp": {"pair.ud.wc.src_qp"},
        "wc_flags": {"pair.imm.delivered"},
        "imm_data": {"pair.imm.delivered"},
        "qp_num": {"cq.completion.qp_num"},
    }
    for name, rules in wanted.items():
        entry = fields.entry("ibv_wc", name)
        assert entry is not None and rules <= set(entry.rules), name


# ------------------------------------------------------------------- complete coverage
def test_ledger_lists_exactly_verbs_h_fields():
    for struct, names in VERBS_H.items():
        listed = {f.name for f in fields.LEDGER if f.struct == struct and "." not in f.name}
        assert listed == names, f"{struct}: missing {names - listed}, extra {listed - names}"


def test_a_dropped_entry_is_missed(monkeypatch):
    """Planted: the ledger without ibv_wc.sl no longer lists verbs.h's ibv_wc."""
    monkeypatch.setattr(fields, "LEDGER", tuple(
        f for f in fields.LEDGER if (f.struct, f.name) != ("ibv_wc", "sl")))
    listed = {f.name for f in fields.LEDGER if f.struct == "ibv_wc"}
    assert VERBS_H["ibv_wc"] - listed == {"sl"}


# ------------------------------------------------------------- what the adapters read
def test_every_field_the_adapters_read_has_an_entry():
    read = _adapter_reads()
    assert ("ibv_wc", "wc_flags") in read and ("ibv_qp_attr", "sq_draining") in read
    assert ("ibv_qp_attr", "cap.max_inline_data") in read
    assert unlisted(read) == []


def test_the_wc_fields_issue_45_reads_are_read():
    """The pyverbs adapter reads byte_len, wc_flags and src_qp (and qp_num) off each WC."""
    read = _adapter_reads()
    assert {("ibv_wc", n) for n in ("byte_len", "src_qp", "wc_flags", "qp_num")} <= read


def test_the_srq_fields_issue_45_reads_are_read():
    """The SRQ adapter reads create_srq's write-back and query_srq's three fields."""
    read = _adapter_reads()
    assert {("ibv_srq_attr", n) for n in ("max_wr", "max_sge", "srq_limit")} <= read


def test_planted_unlisted_read_is_found():
    """Planted: an adapter that reads wc.slid_bogus and ah.flow_label is caught."""
    source = ("def poll(wc, ah):\n"
              "    return int(wc.slid_bogus), int(ah.flow_label), int(other.thing)\n")
    read = fields_read(source)
    assert unlisted(read) == ["ibv_qp_attr.ah_attr.flow_label", "ibv_wc.slid_bogus"]


def test_pyverbs_aliases_resolve():
    """QPInitAttr's max_* shortcuts are init_attr.cap's fields (tests/test_vm_fields.py)."""
    struct, aliases = fields.PYVERBS_CLASSES["QPInitAttr"]
    for alias, name in aliases.items():
        assert fields.entry(struct, name) is not None, alias


def test_pyverbs_missing_finds_a_planted_field():
    """Planted: a WC field the ledger lacks (what tests/test_vm_fields.py asks in the guest);
    near miss: QPInitAttr's max_send_wr shortcut resolves to ibv_qp_cap's entry."""
    found = {"WC": ["wr_id", "new_field"], "QPInitAttr": ["max_send_wr", "cap"],
             "SrqAttr": ["max_wr", "srq_limit"]}
    assert fields.pyverbs_missing(found) == ["WC.new_field"]


def test_pyverbs_classes_as_rdma_core_has_them_are_listed():
    """The public properties of rdma-core's pyverbs classes (pyverbs/cq.pyx, qp.pyx, srq.pyx)
    as of rdma-core v50+: none missing from the ledger."""
    found = {
        "WC": sorted(VERBS_H["ibv_wc"] - {"invalidated_rkey"}),
        "QPAttr": sorted(VERBS_H["ibv_qp_attr"]),
        "QPInitAttr": ["cap", "max_inline_data", "max_recv_sge", "max_recv_wr",
                       "max_send_sge", "max_send_wr", "qp_type", "recv_cq", "send_cq",
                       "sq_sig_all", "srq"],
        "QPCap": sorted(VERBS_H["ibv_qp_cap"]),
        "SrqAttr": sorted(VERBS_H["ibv_srq_attr"]),
    }
    assert fields.pyverbs_missing(found) == []
