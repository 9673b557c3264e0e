"""models/table.py against an independent transcription of the Linux kernel table.

The model is read through its public interface, `python -m models dump-table`, as a
subprocess; the reference is tests/kernel_table.py, written separately from the notes.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from models.enums import Attr
from models.table import IBTA_EXTRA
from models.variant import VARIANTS
from tests import kernel_table

ROOT = Path(__file__).resolve().parent.parent
ATTR_NAMES = {bit.name for bit in Attr}


def dump(variant: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "models", "dump-table", "--variant", variant],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def dumps() -> dict[str, dict]:
    return {name: dump(name) for name in VARIANTS}


def test_reference_encoding_is_well_formed():
    """Guard the guard: the parser sees every type, valid names only, and the known pairs."""
    ref = kernel_table.LINUX
    assert set(ref) == set(kernel_table.QP_TYPES)
    for per_type in ref.values():
        pairs = {(c, n) for c, nxts in per_type.items() for n in nxts}
        assert len(pairs) == 22  # 22 valid (cur, next) pairs in the kernel table
        assert ("RESET", "ERR") not in pairs
        for nxts in per_type.values():
            for e in nxts.values():
                assert set(e["required"]) <= ATTR_NAMES and set(e["optional"]) <= ATTR_NAMES
                assert not set(e["required"]) & set(e["optional"])


def test_reference_parser_rejects_bad_lines():
    for bad in ("RESET->FOO", "RESET->INIT req UD PKEY", "RESET->INIT xyz UD: PKEY"):
        with pytest.raises(ValueError):
            kernel_table.parse(bad)


@pytest.mark.parametrize("variant", VARIANTS)
def test_dump_shape(dumps, variant):
    """{qp_type: {cur: {next: {"required": [...], "optional": [...]}}}}, sorted name lists."""
    table = dumps[variant]
    assert set(table) == set(kernel_table.QP_TYPES)
    for per_type in table.values():
        assert set(per_type) <= set(kernel_table.STATES)
        for nxts in per_type.values():
            assert nxts and set(nxts) <= set(kernel_table.STATES)
            for e in nxts.values():
                assert set(e) == {"required", "optional"}
                for names in e.values():
                    assert isinstance(names, list)
                    assert names == sorted(names) and len(set(names)) == len(names)
                    assert set(names) <= ATTR_NAMES


@pytest.mark.parametrize("qp_type", kernel_table.QP_TYPES)
def test_linux_dump_equals_kernel_table(dumps, qp_type):
    model, ref = dumps["linux"][qp_type], kernel_table.LINUX[qp_type]
    model_pairs = {(c, n) for c, nxts in model.items() for n in nxts}
    ref_pairs = {(c, n) for c, nxts in ref.items() for n in nxts}
    assert model_pairs - ref_pairs == set(), "pairs the kernel table does not have"
    assert ref_pairs - model_pairs == set(), "kernel pairs missing from the model"
    for cur, nxt in sorted(ref_pairs):
        assert model[cur][nxt] == ref[cur][nxt], f"{qp_type} {cur}->{nxt}"
    assert model == ref


def test_ibta_is_linux_plus_listed_differences(dumps):
    linux, ibta = dumps["linux"], dumps["ibta"]
    extra = {(cur.name, nxt.name) for cur, nxt in IBTA_EXTRA}
    assert extra == {("RESET", "ERR")}  # update this test when the model grows a difference
    for qp_type in kernel_table.QP_TYPES:
        ibta_pairs = {(c, n) for c, nxts in ibta[qp_type].items() for n in nxts}
        linux_pairs = {(c, n) for c, nxts in linux[qp_type].items() for n in nxts}
        assert ibta_pairs == linux_pairs | extra
        assert not linux_pairs & extra
        for cur, nxt in linux_pairs:
            assert ibta[qp_type][cur][nxt] == linux[qp_type][cur][nxt]
        assert ibta[qp_type]["RESET"]["ERR"] == {"required": [], "optional": []}


def test_every_ibta_difference_cites_the_ibta():
    for (cur, nxt), source in IBTA_EXTRA.items():
        assert "IBTA" in source.document, (cur, nxt)
        assert source.location.strip(), (cur, nxt)
