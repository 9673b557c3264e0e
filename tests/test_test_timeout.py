"""Every suite test has a bounded time, and a test that times out names the verb it hung in."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from fixtures import stops
from fixtures.budget import Budget
from fixtures.run_state import STATE_KEY, RunState
from qpconform.adapters import inflight

pytest_plugins = ["pytester"]


def test_the_innermost_unfinished_verb_is_remembered():
    with (
        pytest.raises(KeyboardInterrupt),
        inflight.calling("outer"),
        inflight.calling("ibv_modify_qp on qp1"),
    ):
        assert inflight.current() == "ibv_modify_qp on qp1"
        raise KeyboardInterrupt
    assert inflight.current() is None
    assert inflight.take_interrupted() == "ibv_modify_qp on qp1"
    assert inflight.take_interrupted() is None


def test_a_verb_that_returns_leaves_nothing_behind():
    class QP:
        label = "qp7"

        @inflight.verb("ibv_query_qp")
        def query(self):
            return inflight.current()

    assert QP().query() == "ibv_query_qp on qp7"
    assert inflight.take_interrupted() is None


def test_a_decorated_verb_interrupted_inside_another_is_the_one_named():
    class QP:
        label = "qp3"

        @inflight.verb("ibv_poll_cq")
        def poll(self):
            raise KeyboardInterrupt

        @inflight.verb("ibv_destroy_qp")
        def destroy(self):
            assert inflight.current() == "ibv_destroy_qp on qp3"
            self.poll()

    with pytest.raises(KeyboardInterrupt), inflight.calling("outer"):
        QP().destroy()
    assert inflight.current() is None
    assert inflight.take_interrupted() == "ibv_poll_cq on qp3"  # the innermost, not an outer


def test_only_the_outermost_verb_counts_toward_the_time_in_verbs():
    class QP:
        label = "qp4"

        @inflight.verb("ibv_query_qp")
        def query(self):
            time.sleep(0.05)

        @inflight.verb("ibv_modify_qp")
        def modify(self):
            self.query()

    before = inflight.seconds_in_verbs()
    QP().modify()
    assert 0.05 <= inflight.seconds_in_verbs() - before < 0.1  # not 0.1+: counted once


def fake_config(tmp_path: Path, timeout=None, ini="", budget=None, plugin=True):
    return NS(
        pluginmanager=NS(hasplugin=lambda name: plugin),
        getvalue=lambda name: timeout,
        getini=lambda name: ini,
        stash={STATE_KEY: RunState(budget=Budget(budget))},
        rootpath=tmp_path,
    )


class Item:
    def __init__(self, path: Path, marked: bool = False):
        self.path = path
        self.markers = [pytest.mark.timeout(5).mark] if marked else []

    def get_closest_marker(self, name):
        return next((m for m in self.markers if m.name == name), None)

    def add_marker(self, marker):
        self.markers.append(marker.mark)


def test_suite_tests_get_a_bound_that_covers_the_stateful_budget(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTEST_TIMEOUT", raising=False)
    suite, own, host = (
        Item(tmp_path / "suites/test_a.py"),
        Item(tmp_path / "suites/test_b.py", marked=True),
        Item(tmp_path / "tests/test_c.py"),
    )
    stops.bound_suite_tests(fake_config(tmp_path, budget=120.0), [suite, own, host])
    assert suite.get_closest_marker("timeout").args == (stops.TEST_TIMEOUT + 120.0,)
    assert own.get_closest_marker("timeout").args == (5,)  # a test's own limit stays
    assert host.get_closest_marker("timeout") is None


@pytest.mark.parametrize("how", ["option", "ini", "env", "no plugin"])
def test_the_users_own_limit_wins(tmp_path, monkeypatch, how):
    monkeypatch.delenv("PYTEST_TIMEOUT", raising=False)
    if how == "env":
        monkeypatch.setenv("PYTEST_TIMEOUT", "30")
    config = fake_config(
        tmp_path,
        timeout=30 if how == "option" else None,
        ini="30" if how == "ini" else "",
        plugin=how != "no plugin",
    )
    item = Item(tmp_path / "suites/test_a.py")
    stops.bound_suite_tests(config, [item])
    assert item.get_closest_marker("timeout") is None


def test_a_hung_verb_is_named_in_the_failure(pytester):
    root = Path(__file__).resolve().parent.parent
    pytester.makeconftest(f"""
        import sys
        sys.path.insert(0, {str(root)!r})
        pytest_plugins = ["fixtures.plugin"]
    """)
    pytester.makepyfile(
        test_hang=textwrap.dedent("""
        import time
        from qpconform.adapters import inflight

        def test_hangs_in_modify():
            with inflight.calling("ibv_modify_qp on RC#1"):
                time.sleep(30)
    """)
    )
    result = pytester.runpytest_subprocess("--timeout=2", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*timed out inside ibv_modify_qp on RC#1*"])
