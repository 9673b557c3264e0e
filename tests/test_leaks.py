"""The leak check: the kernel's object counts before and after a device run."""

from __future__ import annotations

import json

from qpconform.adapters import leaks
from reports.html import verdict_line
from reports.qualification import build_report

SHOW = json.dumps(
    [
        {
            "ifindex": 0,
            "ifname": "rxe0",
            "pd": 1,
            "cq": 2,
            "qp": 1,
            "cm_id": 0,
            "mr": 0,
            "ctx": 0,
            "srq": 0,
        },
        {
            "ifindex": 1,
            "ifname": "rxe1",
            "pd": 0,
            "cq": 0,
            "qp": 1,
            "cm_id": 0,
            "mr": 0,
            "ctx": 0,
            "srq": 0,
        },
    ]
)


def test_counts_are_read_per_device():
    assert leaks.parse(SHOW, "rxe0") == {
        "ctx": 0,
        "pd": 1,
        "cq": 2,
        "qp": 1,
        "mr": 0,
        "srq": 0,
        "cm_id": 0,
    }
    assert leaks.parse(SHOW, "mlx5_0") is None
    assert leaks.parse("not json", "rxe0") is None


def test_only_growth_is_a_leak():
    before = {"qp": 1, "cq": 2, "pd": 1}
    assert leaks.growth(before, {"qp": 1, "cq": 1, "pd": 1}) == {}
    grown = leaks.growth(before, {"qp": 3, "cq": 2, "pd": 2})
    assert leaks.describe(grown) == "pd 1 -> 2, qp 1 -> 3"


def test_an_object_freed_a_moment_later_is_no_leak(monkeypatch):
    counts = iter([{"qp": 2}, {"qp": 2}, {"qp": 1}])
    monkeypatch.setattr(leaks, "snapshot", lambda device: next(counts))
    monkeypatch.setattr(leaks.time, "sleep", lambda s: None)
    assert leaks.check("rxe0", {"qp": 1}, settle=60) is None


def test_growth_that_stays_is_a_leak(monkeypatch):
    monkeypatch.setattr(leaks, "snapshot", lambda device: {"qp": 2, "cq": 4})
    monkeypatch.setattr(leaks.time, "sleep", lambda s: None)
    assert leaks.check("rxe0", {"qp": 1, "cq": 2}, settle=0) == "cq 2 -> 4, qp 1 -> 2"


def test_unknown_counts_are_not_called_a_leak(monkeypatch):
    monkeypatch.setattr(leaks, "snapshot", lambda device: None)
    assert leaks.check("rxe0", {"qp": 1}) is None
    assert leaks.check("rxe0", None) is None


def test_the_report_shows_a_leak():
    run = {
        "settings": {"leaked": "qp 1 -> 2", "leak_check": "qp 1 -> 2"},
        "steps": [
            {
                "qp_type": "RC",
                "verb": "modify",
                "state_before": "RESET",
                "target": "INIT",
                "result": "match",
                "count": 3,
                "rules": {},
            }
        ],
        "divergences": [],
        "identity": {"device": "rxe0"},
    }
    assert "LEAKED verbs objects: qp 1 -> 2" in verdict_line(build_report(run))


def test_librdmacm_context_is_allowed_once_and_only_on_a_device_it_used(monkeypatch) -> None:
    from qpconform.adapters import cm_connect

    monkeypatch.setattr(cm_connect, "_CM_DEVICES", {"siw0"})
    before = {"ctx": 0, "qp": 0}
    allowed = cm_connect.librdmacm_contexts("siw0")
    assert leaks.growth(before, {"ctx": 1, "qp": 0}, allowed) == {}
    assert leaks.growth(before, {"ctx": 2, "qp": 0}, allowed) == {"ctx": (0, 2)}
    assert leaks.growth(before, {"ctx": 1, "qp": 1}, allowed) == {"qp": (0, 1)}
    assert cm_connect.librdmacm_contexts("rxe0") == {}
    assert leaks.growth(before, {"ctx": 1, "qp": 0}, cm_connect.librdmacm_contexts("rxe0")) == {
        "ctx": (0, 1)
    }


def test_the_verdict_waits_for_xdist_to_shut_its_workers_down() -> None:
    """The controller's leak check must run after xdist's sessionfinish has stopped the
    workers: librdmacm keeps each worker's verbs context until its process exits, so a
    check before that reads 'ctx 0 -> 2' on siw (seen with -n 2). xdist's DSession
    registers its sessionfinish without an order; ours is trylast, so it comes after."""
    from xdist.dsession import DSession

    from fixtures.verdict import RunVerdict

    ours = RunVerdict.pytest_sessionfinish.pytest_impl  # type: ignore[attr-defined]
    assert ours.get("trylast") is True
    xdist = getattr(DSession.pytest_sessionfinish, "pytest_impl", {})
    assert not xdist.get("trylast"), "xdist's own is trylast now: order both explicitly"
