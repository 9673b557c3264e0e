"""--variant auto: iwarp for a device whose node type is RNIC, linux otherwise; a variant
given on the command line wins; the header and the run record say which and why.

Runs pytest in a subprocess on a tiny project with the fake pyverbs of
tests/test_plugin_errors.py, whose device list here carries a node type.
"""

from __future__ import annotations

import os
import textwrap

import pytest

from fixtures.variant import choose_variant
from tests import test_plugin_errors as tpe

pytest_plugins = ["pytester"]

SUITE_TEST = """
import os

def test_variant(variant, pytestconfig):
    # the fixture is the option's value parsed once (models/variant.py)
    assert variant.name == os.environ["WANT_VARIANT"]
    assert pytestconfig.getoption("variant") == variant.name

def test_pairs(variant, request):
    if not variant.connection_managed:
        return
    request.getfixturevalue("make_pair")  # skips: pairs need the rdma_cm adapter
    raise AssertionError("make_pair did not skip under iwarp")
"""
LISTED = 'return [NS(name=b"rxe0"), NS(name=b"rxe1")]'
WITH_NODE_TYPE = (
    'return [NS(name=b"rxe0", node_type=int(os.environ["FAKE_NODE_TYPE"])), '
    'NS(name=b"rxe1", node_type=1)]'
)


def _run(pytester: pytest.Pytester, node_type: int, want: str, *args: str) -> pytest.RunResult:
    (pytester.path / "suites").mkdir()
    (pytester.path / "suites" / "test_variant.py").write_text(SUITE_TEST)
    pytester.makeconftest('pytest_plugins = ["fixtures.plugin"]\n')
    pkg = pytester.path / "libs" / "pyverbs"
    pkg.mkdir(parents=True)
    for name, text in tpe.FAKE.items():
        text = textwrap.dedent(text)
        if name == "device.py":
            assert LISTED in text
            text = text.replace(LISTED, WITH_NODE_TYPE)
        (pkg / name).write_text(text)
    env = {
        "PYTHONPATH": os.pathsep.join([str(pkg.parent), str(tpe.ROOT)]),
        "FAKE_NODE_TYPE": str(node_type),
        "WANT_VARIANT": want,
        "QPCONFORM_OUT_DIR": str(pytester.path / "out"),  # not this checkout's reports/out
    }
    for key, value in env.items():
        pytester._monkeypatch.setenv(key, value)
    return pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "suites", "--device", "rxe0", "--quirks", "none", *args
    )


@pytest.mark.parametrize(
    ("node_type", "args", "want", "why"),
    [
        (4, (), "iwarp", "auto: node type RNIC"),
        (1, (), "linux", "auto: node type CA"),
        (4, ("--variant", "ibta"), "ibta", "given on the command line"),
        (1, ("--variant", "iwarp"), "iwarp", "given on the command line"),
    ],
)
def test_the_variant_is_chosen_and_said(pytester, node_type, args, want, why) -> None:
    result = _run(pytester, node_type, want, *args)
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.OK, output
    assert f"variant {want} ({why})" in output
    result.assert_outcomes(passed=1 if want == "iwarp" else 2, skipped=int(want == "iwarp"))


def test_choose_variant() -> None:
    assert choose_variant("auto", "RNIC") == ("iwarp", "auto: node type RNIC")
    assert choose_variant("auto", "CA") == ("linux", "auto: node type CA")
    assert choose_variant("auto", None) == ("linux", "auto: node type unknown")
    assert choose_variant("linux", "RNIC") == ("linux", "given on the command line")
