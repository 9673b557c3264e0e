"""`python -m models dump-table`: exit status, output and errors, as a user runs it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from models.variant import VARIANTS

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "models", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("variant", ["linux", "ibta"])
def test_dump_table_variant(variant):
    proc = run("dump-table", "--variant", variant)
    assert proc.returncode == 0, proc.stderr
    table = json.loads(proc.stdout)
    assert set(table) == {"RC", "UC", "UD", "RAW_PACKET", "XRC_SEND", "XRC_RECV"}
    assert ("ERR" in table["RC"]["RESET"]) is (variant == "ibta")


def test_default_variant_is_linux():
    assert json.loads(run("dump-table").stdout) == json.loads(
        run("dump-table", "--variant", "linux").stdout
    )


def test_unknown_variant_exits_2_listing_the_choices():
    proc = run("dump-table", "--variant", "freebsd")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "freebsd" in proc.stderr
    for name in VARIANTS:
        assert name in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_command_exits_2():
    proc = run()
    assert proc.returncode == 2
    assert "dump-table" in proc.stderr
