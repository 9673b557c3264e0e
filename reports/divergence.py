"""The run's one divergence store: reports/out/divergences.json, its only writer and its reader.

The record is the engine's (qpconform/engine/records.py: `Divergence`). A run hands
the engine a `DivergenceStore` as its sink; nothing else writes divergences: the run
records (reports/run_record.py) count steps and refuse to carry records, and every
report reads the store: report.json and report.html (through `merge_runs`), the
JUnit properties, the TAP diagnostics and the Allure attachments of a failed test
(fixtures/report_labels.py, fixtures/tap_output.py: the stored record of the test's
divergence), the reproducers (named by the stored record), `--compare`, the soak and
the mutant gate.

xdist safety: an append takes an exclusive fcntl lock on a sidecar `<file>.lock` and
appends in place, so any number of worker processes on one host can append to the same
file, which stays a valid JSON list with one record per line (a line cut short by a
full disk: see `read_divergences`).
"""

from __future__ import annotations

import fcntl
import json
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from qpconform.engine.records import Divergence
from reports.atomic import write_error

#: Where a run writes its records and reports; QPCONFORM_OUT_DIR moves it (the mutation
#: run gives every mutant its own folder).
OUT_DIR = Path(os.environ.get("QPCONFORM_OUT_DIR") or Path(__file__).resolve().parent / "out")
STORE_NAME = "divergences.json"
DIVERGENCES_JSON = OUT_DIR / STORE_NAME


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


def _append(path: str | os.PathLike[str], d: Divergence) -> None:
    """Append one record to the JSON list at path, under an exclusive lock (xdist-safe).

    The list's closing bracket is overwritten in place, so an append costs the size of
    one record, not of the whole file (runs under TCG write thousands of records). The
    record is one line, written at once; if the write fails (a full disk), the file gets
    its old end back and the error (ReportWriteError) names the file and the fix.
    """
    path = Path(path)
    record = d.to_json().encode()
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


class DivergenceStore:
    """The one writer of a run's divergences.json, and its reader (by default
    reports/out/divergences.json; a folder names the store inside it)."""

    def __init__(self, path: str | os.PathLike[str] = DIVERGENCES_JSON) -> None:
        path = Path(path)
        self.path = path / STORE_NAME if path.is_dir() else path

    @classmethod
    def beside(cls, run_record: str | os.PathLike[str]) -> DivergenceStore:
        """The store of the run whose record (run-<worker>.json) is at `run_record`."""
        return cls(Path(run_record).parent / STORE_NAME)

    def add(self, d: Divergence) -> None:
        """Append one record (xdist-safe; see the module docstring)."""
        _append(self.path, d)

    def records(self) -> list[Divergence]:
        """Every stored record, typed."""
        return [Divergence.from_dict(r) for r in read_divergences(self.path)]

    def dicts(self) -> list[dict[str, Any]]:
        """Every stored record as plain JSON data (what the reports build from)."""
        return read_divergences(self.path)

    def find(self, record_id: str) -> Divergence | None:
        """The last stored record with this id (a test's divergence, as the store holds it)."""
        found = [r for r in read_divergences(self.path) if r.get("id") == record_id]
        return Divergence.from_dict(found[-1]) if found else None

    def as_stored(self, raised: Divergence) -> Divergence:
        """What a failed test's reports show for the divergence it raised: the stored
        record. One the store does not hold came from a checker a test built with a sink
        of its own (the self-tests): that one is shown as raised."""
        return self.find(raised.id) or raised
