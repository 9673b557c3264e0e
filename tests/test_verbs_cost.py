"""python -m qpconform.vm.verbs_cost: the C-against-pyverbs measurement's table and its C source
(the run itself boots the VM: docs/measured.md has its numbers and command)."""

from __future__ import annotations

import re

import pytest

from qpconform.vm import buildenv, verbs_cost

RESULT = {"c": {"modify": 10.0, "query": 9.5, "poll": 1.75, "create_destroy": 680.0},
          "pyverbs": {"modify": 14.5, "query": 75.5, "poll": 10.25, "create_destroy": 1590.0}}


def test_the_table_gives_both_sides_and_what_pyverbs_adds() -> None:
    rows = verbs_cost.table(RESULT).splitlines()
    assert rows[0].split() == ["verb", "C", "(us)", "pyverbs", "(us)", "pyverbs", "adds"]
    assert [row.split() for row in rows[1:]] == [
        ["modify", "10.0", "14.5", "4.5"], ["query", "9.5", "75.5", "66.0"],
        ["poll", "1.8", "10.2", "8.5"], ["create_destroy", "680.0", "1590.0", "910.0"]]


def test_the_c_loops_are_the_ones_the_python_side_times() -> None:
    """Both sides time the same verbs under the same names (the JSON keys of the C output)."""
    source = (verbs_cost.HERE / "verbs_cost.c").read_text()
    printed = re.search(r'printf\("\{(.*?)\}', source, re.S)
    assert printed is not None
    assert tuple(re.findall(r'\\"(\w+)\\"', printed.group(1))) == verbs_cost.VERBS
    assert f"#define DEPTH {verbs_cost.DEPTH}" in source
    assert "libibverbs-dev" in buildenv.BUILD_PACKAGES  # the layer compiles it


def test_a_bad_release_is_refused_with_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        verbs_cost.main(["--release", "sid"])
    assert "invalid choice: 'sid'" in capsys.readouterr().err
