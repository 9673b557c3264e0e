"""One divergence between a device and the model, as a self-contained record.

A record holds everything a driver developer needs without the suite: the QP
type, state and verb, the attributes and mask, what the model expected and what
the device did, the rule (with its source) and every step that led there. The
records of a session go to reports/out/divergences.json.

xdist safety: `append_divergence` takes an exclusive fcntl lock on a sidecar
`<file>.lock` and appends in place, so any number of worker processes on one
host can append to the same file, which stays a valid JSON list with one record
per line (a line cut short by a full disk: see `read_divergences`).
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from reports.atomic import write_error

#: Where a run writes its records and reports; QPCONFORM_OUT_DIR moves it (the mutation
#: run gives every mutant its own folder).
OUT_DIR = Path(os.environ.get("QPCONFORM_OUT_DIR") or Path(__file__).resolve().parent / "out")
DIVERGENCES_JSON = OUT_DIR / "divergences.json"


@dataclass
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
            self.id = self.fingerprint()

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
    return f"{head} -> expected {step.get('expected', '?')}; observed {step.get('observed', '?')}"


def _device_line(device: Mapping[str, str]) -> str:
    keys = ("device", "name", "driver", "kernel", "rdma_core", "port", "gid_index")
    shown = [f"{k}={device[k]}" for k in keys if device.get(k)]
    return " ".join(shown) or "-"


def _plain(value: Any) -> Any:
    """JSON-able copy (enums and paths become ints/strings)."""
    return json.loads(json.dumps(value, default=str))


# ----------------------------------------------------------------------------- storage
@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_divergences(path: str | os.PathLike[str] = DIVERGENCES_JSON) -> list[dict[str, Any]]:
    """The records of a divergences.json ([] when there is none).

    The file is a JSON list with one record per line, and an append writes one whole
    line, so a write cut short (a full disk, a killed worker) can only damage the last
    line. Such a file still gives every complete record, with a RuntimeWarning naming
    the file and the lost line: one record lost is better than the whole run's. Damage
    anywhere else is a ValueError naming the line (qpconform never writes that).
    """
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    try:
        data = json.loads(text)
    except ValueError:
        return _complete_lines(path, text)
    if not isinstance(data, list):
        raise ValueError(f"{path} is not a JSON list of divergence records")
    return data


def _complete_lines(path: Path, text: str) -> list[dict[str, Any]]:
    """The records of a file whose last append was cut short (see read_divergences)."""
    lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)]
    lines = [(n, line.strip("[,]")) for n, line in lines if line.strip("[,]")]
    records: list[dict[str, Any]] = []
    for i, (n, line) in enumerate(lines):
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict):
            records.append(record)
        elif i == len(lines) - 1:
            warnings.warn(
                f"{path}: line {n} is a record cut short (the disk was full or the run was "
                f"killed while it was written); {len(records)} complete record(s) read, that "
                f"one is lost",
                RuntimeWarning,
                stacklevel=3,
            )
        else:
            raise ValueError(
                f"{path}: line {n} is not a divergence record, and it is not the last line: "
                f"the file is damaged (remove it; a device run writes it anew)"
            )
    return records


def _write_at(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, offset)
        view, offset = view[done:], offset + done


def append_divergence(path: str | os.PathLike[str], d: Divergence) -> None:
    """Append one record to the JSON list at path, under an exclusive lock (xdist-safe).

    The list's closing bracket is overwritten in place, so an append costs the size of
    one record, not of the whole file (runs under TCG write thousands of records). The
    record is one line, written at once; if the write fails (a full disk), the file gets
    its old end back and the error (ReportWriteError) names the file and the fix.
    """
    path = Path(path)
    record = json.dumps(d.to_dict()).encode()
    try:
        with _locked(path):
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            try:
                _append_line(fd, path, record)
            finally:
                os.close(fd)
    except OSError as exc:
        raise write_error(path, exc) from None


def _append_line(fd: int, path: Path, record: bytes) -> None:
    end = os.fstat(fd).st_size
    if end == 0:
        at, old_tail, chunk = 0, b"", b"[\n" + record + b"\n]\n"
    else:
        start = max(0, end - 64)
        tail = os.pread(fd, end - start, start)
        close = tail.rfind(b"]")
        if close < 0:
            raise ValueError(
                f"{path} does not end with the closing bracket of a JSON list (a write was "
                f"cut short?): remove it and rerun"
            )
        empty = tail[:close].rstrip().endswith(b"[") and start == 0
        at, old_tail = start + close, tail[close:]
        chunk = (b"" if empty else b",\n") + record + b"\n]\n"
    try:
        _write_at(fd, chunk, at)
        os.ftruncate(fd, at + len(chunk))
    except OSError:
        with suppress(OSError):  # the old end fits where it was: no new space needed
            _write_at(fd, old_tail, at)
            os.ftruncate(fd, end)
        raise


class DivergenceSink(Protocol):
    """Where a checker sends each divergence it found (known or not)."""

    def add(self, d: Divergence) -> None: ...


class DivergenceFile:
    """A sink appending to a divergences.json (the default: reports/out/divergences.json)."""

    def __init__(self, path: str | os.PathLike[str] = DIVERGENCES_JSON) -> None:
        self.path = Path(path)

    def add(self, d: Divergence) -> None:
        append_divergence(self.path, d)


class DivergenceList:
    """A sink keeping records in memory (a caller decides later which ones to keep)."""

    def __init__(self, only_known: bool = False) -> None:
        self.items: list[Divergence] = []
        self.only_known = only_known

    def add(self, d: Divergence) -> None:
        if d.known_quirk or not self.only_known:
            self.items.append(d)

    def distinct(self) -> list[Divergence]:
        """One record per (QP type, verb, rule, state, kind), the shortest step list kept."""
        best: dict[tuple[str, ...], Divergence] = {}
        for d in self.items:
            key = (d.qp_type, d.verb, d.rule_id, d.state, d.kind)
            if key not in best or len(d.steps) < len(best[key].steps):
                best[key] = d
        return list(best.values())
