"""The engine's records: one divergence between a device and the model, and where it goes.

A record holds everything a driver developer needs without the suite: the QP
type, state and verb, the attributes and mask, what the model expected and what
the device did, the rule (with its source) and every step that led there. It is
frozen: what the judge adds (the test, the quirk, the reproducer) makes a new
record, so the record a report reads is the one that was stored. The engine hands
each record to a `DivergenceSink` its caller chose: `DivergenceList` keeps them in
memory; a run's store (reports/divergence.py: `DivergenceStore`) is the only
writer of the run's divergences.json, so the engine itself never writes a report.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Divergence:
    """What the model expected, what the device did, and how we got there.

    `kind` says what was compared ("outcome", "state", "completion", "order",
    "status", "missing_completion", "event", "missing_event"); `rule_kind` and
    `rule_layer` say how strong the rule is and who enforces it on Linux
    (models/sources.py); `tags` are the
    observed values quirk files match ("outcome=accepted", "errno=EINVAL",
    "state=ERR", "event=SQ_DRAINED", ...); `context` is what the engine knew at the
    step (the model's state, the transitions the QP went through, ...).
    """

    qp_type: str
    state: str
    verb: str
    attrs: dict[str, int]
    mask: list[str]
    expected: str
    observed: str
    rule_id: str
    rule_summary: str
    source: str
    device: dict[str, str]
    steps: list[dict[str, Any]]
    known_quirk: str | None = None
    reproducer: str | None = None
    test: str | None = None
    kind: str = "outcome"
    tags: list[str] = field(default_factory=list)
    qp_num: int | None = None
    id: str = ""
    context: dict[str, Any] = field(default_factory=dict)
    rule_kind: str = ""  # the rule's kind: "must", "may" or "optional" ("" if unknown)
    rule_layer: str = ""  # who enforces it on Linux: spec, core, uverbs, provider, driver

    def __post_init__(self) -> None:
        if not self.id:
            object.__setattr__(self, "id", self.fingerprint())  # frozen: set once, here

    def with_(self, **changes: Any) -> Divergence:
        """A copy with `changes` (the id stays: it names the divergence, not the copy)."""
        return dataclasses.replace(self, **changes)

    def fingerprint(self) -> str:
        """A short stable id: same rule, QP type, verb and steps give the same id."""
        basis = json.dumps(
            [self.rule_id, self.qp_type, self.verb, self.kind, self.tags, _plain(self.steps)],
            sort_keys=True,
            default=str,
        )
        return hashlib.sha1(basis.encode()).hexdigest()[:12]

    @property
    def verb_steps(self) -> int:
        """How many verbs led here (settle steps are polling, not verbs)."""
        return sum(1 for s in self.steps if s.get("verb") != "settle")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data."""
        return _plain(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Divergence:
        """The inverse of to_dict (unknown keys are ignored, for older/newer files)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def to_json(self) -> str:
        """One line of JSON: the form the store writes (reports/divergence.py)."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> Divergence:
        """The inverse of to_json."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"not a divergence record: {text[:80]!r}")
        return cls.from_dict(data)

    def format(self) -> str:
        """A readable multi-line report (the DivergenceError message)."""
        status = f"known quirk {self.known_quirk}" if self.known_quirk else "unknown"
        attrs = ", ".join(f"{k}={v}" for k, v in self.attrs.items()) or "-"
        lines = [
            f"QP divergence ({status}): {self.qp_type} in {self.state}, {self.verb}",
            f"  attrs    : {attrs}",
            f"  mask     : {'|'.join(self.mask) or '-'}",
            f"  expected : {self.expected}",
            f"  observed : {self.observed}",
            f"  rule     : {self.rule_id}: {self.rule_summary}"
            + (f" [{self.rule_kind}, {self.rule_layer}]" if self.rule_kind else ""),
            f"  source   : {self.source}",
            f"  device   : {_device_line(self.device)}",
        ]
        if self.test:
            lines.append(f"  test     : {self.test}")
        if self.context.get("after_end"):  # found in a parked pair (qpconform/engine/park.py)
            lines.append(f"  note     : {self.context['after_end']}")
        if self.context.get("not_shrunk"):  # its example could not be replayed
            lines.append(f"  note     : {self.context['not_shrunk']}")
        lines.append(f"  steps ({self.verb_steps} verbs):")
        lines.extend(f"    {i:2d}. {describe_step(s)}" for i, s in enumerate(self.steps, 1))
        if self.reproducer:
            lines.append(f"  reproducer: python3 {self.reproducer}")
        return "\n".join(lines)


def describe_step(step: Mapping[str, Any]) -> str:
    """One line per step: verb, mask and attrs, expected vs observed."""
    verb = step.get("verb", "?")
    head = verb
    if verb == "modify":
        attrs = ", ".join(f"{k}={v}" for k, v in step.get("attrs", {}).items())
        head = f"modify {'|'.join(step.get('mask', []))} {{{attrs}}}"
    elif step.get("wr_id") is not None:
        head = f"{verb} wr_id={step['wr_id']}"
        if verb == "post_send" and "op" in step:  # a pair's send: what it carries
            extra = [step["op"]] + ([step["fault"]] if step.get("fault", "none") != "none" else [])
            extra += [] if step.get("signaled", True) else ["unsignaled"]
            extra += ["inline"] if step.get("inline") else []
            head += f" ({', '.join(extra)})"
    return f"{head} -> expected {step.get('expected', '?')}; observed {step.get('observed', '?')}"


def _device_line(device: Mapping[str, str]) -> str:
    keys = ("device", "name", "driver", "kernel", "rdma_core", "port", "gid_index")
    shown = [f"{k}={device[k]}" for k in keys if device.get(k)]
    return " ".join(shown) or "-"


def _plain(value: Any) -> Any:
    """JSON-able copy (enums and paths become ints/strings)."""
    return json.loads(json.dumps(value, default=str))


class DivergenceSink(Protocol):
    """Where a checker sends each divergence it found (known or not)."""

    def add(self, d: Divergence) -> None: ...


class DivergenceList:
    """A sink keeping records in memory (a caller decides later which ones to keep)."""

    def __init__(self, only_known: bool = False) -> None:
        self.items: list[Divergence] = []
        self.only_known = only_known
        #: the first unknown one, kept even when only known ones are: the record of a
        #: divergence whose example Hypothesis could not replay
        self.first_unknown: Divergence | None = None

    def add(self, d: Divergence) -> None:
        if d.known_quirk or not self.only_known:
            self.items.append(d)
        if not d.known_quirk and self.first_unknown is None:
            self.first_unknown = d

    def distinct(self) -> list[Divergence]:
        """One record per (QP type, verb, rule, state, kind), the shortest step list kept."""
        best: dict[tuple[str, ...], Divergence] = {}
        for d in self.items:
            key = (d.qp_type, d.verb, d.rule_id, d.state, d.kind)
            if key not in best or len(d.steps) < len(best[key].steps):
                best[key] = d
        return list(best.values())
