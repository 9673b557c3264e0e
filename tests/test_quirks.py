"""Quirk profiles: conditions, version ranges and the errors a malformed entry gets."""

from __future__ import annotations

import pytest

from qpconform.engine.quirks import Quirks, version_of
from qpconform.engine.records import Divergence

ENTRY = """
[[quirk]]
id = "x.q"
rule = "r.*"
kernel = ">=6.4"
kinds = ["state", "event"]
observed = [{ state = "ERR" }, { event = "SQ_DRAINED", sq_draining = 0 }]
context = { after = "SQD->RESET" }
reason = "r"
evidence = ["e"]
"""


def _record(**over: object) -> Divergence:
    fields: dict = dict(
        qp_type="UD", state="RTS", verb="query", attrs={}, mask=[], expected="e", observed="o",
        rule_id="r.x", rule_summary="s", source="src", device={}, steps=[], kind="state",
        tags=["state", "state=ERR"], context={"state": "RTS", "after": ["SQD->RESET"]},
    )
    fields.update(over)
    return Divergence(**fields)


def test_version_of_takes_the_leading_number() -> None:
    assert str(version_of("6.12.117+deb13-amd64")) == "6.12.117"
    assert str(version_of("6.1.0-50-amd64")) == "6.1.0"
    assert str(version_of("44.0-2")) == "44.0"
    assert version_of("none") is None


def test_kernel_range_decides_what_is_loaded() -> None:
    quirks = Quirks.from_toml(ENTRY)
    assert len(quirks.for_run({"kernel": "6.12.117+deb13-amd64"})) == 1
    old = quirks.for_run({"kernel": "6.1.0-50-amd64"})
    assert len(old) == 0 and "outside >=6.4" in old.not_applicable["x.q"]
    unknown = quirks.for_run({})
    assert len(unknown) == 0 and "unknown" in unknown.not_applicable["x.q"]


def test_every_condition_must_hold() -> None:
    [quirk] = Quirks.from_toml(ENTRY)
    assert quirk.matches(_record())
    assert quirk.matches(_record(kind="event", tags=["event=SQ_DRAINED", "sq_draining=0"]))
    assert not quirk.matches(_record(kind="event", tags=["event=SQ_DRAINED", "sq_draining=1"]))
    assert not quirk.matches(_record(tags=["state=RTS"]))  # another observed value
    assert not quirk.matches(_record(kind="status"))  # another kind
    assert not quirk.matches(_record(context={"after": ["ERR->RESET"]}))  # another history
    assert not quirk.matches(_record(rule_id="s.x"))


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ('observed = { errno = "EFOO" }', "errno = 'EFOO' is not one of"),
        ('observed = { colour = "red" }', "observed.colour is not a known observation"),
        ('kernel = "six"', "is not a version range"),
        ('context = { after = "SQD-RESET" }', "must read CUR->NXT"),
        ('context = { mood = "x" }', "context.mood is not known"),
        ('kinds = ["weird"]', "kinds = 'weird' is not one of"),
        ('attrs = { path_mtu = "zero" }', "attrs.path_mtu must be an integer"),
        ('observed = "accepted"', "observed must be a table"),
        ('readback_only = "yes"', "readback_only must be true or false"),
        ('readback_only = true\nkinds = ["outcome"]', 'readback_only needs kinds = ["state"]'),
    ],
)
def test_malformed_entries_are_named(change: str, error: str) -> None:
    text = f'[[quirk]]\nid = "x.q"\nrule = "r"\nreason = "r"\nevidence = ["e"]\n{change}\n'
    with pytest.raises(ValueError, match=r"quirk #1 \(x\.q\)") as caught:
        Quirks.from_toml(text, source="p.toml")
    assert error in str(caught.value)


def test_not_toml_is_named() -> None:
    with pytest.raises(ValueError, match=r"p\.toml: not valid TOML"):
        Quirks.from_toml("[[quirk]\n", source="p.toml")


def test_an_intermittent_quirk_that_matched_nothing_is_unseen_not_stale() -> None:
    quirks = Quirks.from_toml(
        '[[quirk]]\nid = "a"\nrule = "r"\nreason = "r"\nevidence = ["e"]\n'
        'intermittent = "timing"\n'
        '[[quirk]]\nid = "b"\nrule = "s"\nreason = "r"\nevidence = ["e"]\n'
    )
    assert [q.id for q in quirks.stale()] == ["b"]
    assert [(q.id, q.intermittent) for q in quirks.unseen()] == [("a", "timing")]
