"""Reports under a full disk: the previous file (or none) stays, and one clear error says why.

`FullDisk` makes a folder behave like a nearly full disk: a write that would grow a
file past the room left writes what fits and then fails with ENOSPC, as write(2)
does; overwriting bytes a file already has always works. Only files in that folder
are affected (the fd's /proc path says where it points).
"""

from __future__ import annotations

import errno
import json
import os
import warnings
from pathlib import Path

import pytest

from qpconform.engine.records import Divergence
from reports import atomic
from reports import cli as report_cli
from reports.atomic import ReportWriteError, check_writable, write_atomic
from reports.compare import write_compare
from reports.divergence import DivergenceStore, read_divergences
from reports.html import write_reports
from reports.reproducer import write_reproducer
from reports.run_record import RunRecorder

ENOSPC_TEXT = "No space left on device (ENOSPC)"


class FullDisk:
    """os.write/os.pwrite on files under `folder` get `room` more bytes, then ENOSPC."""

    def __init__(self, folder: Path, room: int, monkeypatch: pytest.MonkeyPatch) -> None:
        self.folder, self.room = str(folder.resolve()), room
        self.failures = 0
        self._write, self._pwrite = os.write, os.pwrite
        monkeypatch.setattr(os, "write", self.write)
        monkeypatch.setattr(os, "pwrite", self.pwrite)

    def _allowed(self, fd: int, offset: int, n: int) -> int | None:
        """Bytes of this write that fit; None if the fd is not under the folder."""
        try:
            where = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None
        if not where.startswith(self.folder + os.sep):
            return None
        growth = max(0, offset + n - os.fstat(fd).st_size)
        if growth <= self.room:
            self.room -= growth
            return n
        fits = n - (growth - self.room)
        self.room = 0
        if fits <= 0:
            self.failures += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return fits

    def write(self, fd: int, data: bytes) -> int:
        n = self._allowed(fd, os.lseek(fd, 0, os.SEEK_CUR), len(data))
        return self._write(fd, data if n is None else bytes(data[:n]))

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        n = self._allowed(fd, offset, len(data))
        return self._pwrite(fd, data if n is None else bytes(data[:n]), offset)


def _no_temp_files(folder: Path) -> None:
    assert not [p.name for p in folder.rglob("*.tmp")], "a temporary file was left behind"


def _clear_error(exc: ReportWriteError, path: Path) -> None:
    text = str(exc)
    assert f"cannot write {path}: {ENOSPC_TEXT}" in text
    assert "free space on that disk" in text and "QPCONFORM_OUT_DIR" in text
    assert exc.errno == errno.ENOSPC


def _record(rule: str) -> Divergence:
    return Divergence(
        qp_type="RC",
        state="INIT",
        verb="modify",
        attrs={"qp_state": 3},
        mask=["STATE"],
        expected="refused",
        observed="accepted",
        rule_id=rule,
        rule_summary="s",
        source="src",
        device={"device": "fake0"},
        steps=[{"verb": "modify"}],
    )


def _run_record(folder: Path) -> Path:
    rec = RunRecorder({"device": "fake0", "driver": "fake"}, {"qp_types": ["RC"]})
    rec.step("RC", "modify", "RESET", "INIT", ["linux.transition.RC.RESET->INIT"], "match")
    return rec.write(folder / "run-main.json")


# ----------------------------------------------------------------------------- one file
def test_a_full_disk_leaves_the_previous_file(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "report.json"
    target.write_text("previous\n")
    disk = FullDisk(tmp_path, room=100, monkeypatch=monkeypatch)
    with pytest.raises(ReportWriteError) as exc:
        write_atomic(target, "x" * 1000)
    assert disk.failures == 1  # the write started and was cut short
    assert target.read_text() == "previous\n"
    _no_temp_files(tmp_path)
    _clear_error(exc.value, target)


def test_a_full_disk_leaves_no_file_where_there_was_none(tmp_path: Path, monkeypatch) -> None:
    FullDisk(tmp_path, room=10, monkeypatch=monkeypatch)
    with pytest.raises(ReportWriteError):
        write_atomic(tmp_path / "report.json", "x" * 1000)
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_reported_at_fsync(tmp_path: Path, monkeypatch) -> None:
    """Delayed allocation: the data went to the page cache, the disk says no at fsync."""
    target = tmp_path / "run-main.json"
    target.write_text("previous\n")

    def fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(ReportWriteError) as exc:
        write_atomic(target, "new")
    assert target.read_text() == "previous\n"
    _no_temp_files(tmp_path)
    _clear_error(exc.value, target)


def test_ctrl_c_in_a_write_leaves_the_previous_file(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "report.html"
    target.write_text("previous\n")

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(target, "new")
    assert target.read_text() == "previous\n"
    _no_temp_files(tmp_path)


def test_a_written_file_is_whole_with_the_usual_mode(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    try:
        plain = write_atomic(tmp_path / "a" / "report.json", "{}\n")
        script = write_atomic(tmp_path / "a" / "r.py", "print()\n", mode=0o755)
    finally:
        os.umask(umask)
    assert plain.read_text() == "{}\n" and plain.stat().st_mode & 0o777 == 0o644
    assert script.stat().st_mode & 0o777 == 0o755
    _no_temp_files(tmp_path)


# ----------------------------------------------------------------------------- each report
def test_report_json_and_html_stay_as_they_were(tmp_path: Path, monkeypatch) -> None:
    runs = _run_record(tmp_path / "runs")
    _, _, json_path = write_reports([runs], tmp_path / "measure")
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text("previous json\n")
    (out / "report.html").write_text("previous html\n")
    room = json_path.stat().st_size + 100  # report.json fits, the page does not
    FullDisk(out, room=room, monkeypatch=monkeypatch)
    with pytest.raises(ReportWriteError) as exc:
        write_reports([runs], out)
    assert (out / "report.json").read_text() == "previous json\n"  # both or neither
    assert (out / "report.html").read_text() == "previous html\n"
    _no_temp_files(out)
    _clear_error(exc.value, out / "report.html")


def test_qpconform_report_says_which_file_and_what_to_do(
    tmp_path: Path, monkeypatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = _run_record(tmp_path / "runs")
    out = tmp_path / "out"
    FullDisk(out.parent, room=0, monkeypatch=monkeypatch)
    assert report_cli.main(["--input", str(runs), "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"qpconform report: cannot write {out / 'report.json'}: ")
    assert ENOSPC_TEXT in err[0] and "--output DIR" in err[0]
    assert not (out / "report.json").exists() and not (out / "report.html").exists()


def test_compare_files_stay_as_they_were(tmp_path: Path, monkeypatch) -> None:
    runs = _run_record(tmp_path / "runs")
    out = tmp_path / "out"
    out.mkdir()
    (out / "compare.txt").write_text("previous\n")
    FullDisk(out, room=50, monkeypatch=monkeypatch)
    with pytest.raises(ReportWriteError):
        write_compare(runs, runs, out)
    assert [p.name for p in out.iterdir()] == ["compare.txt"]
    assert (out / "compare.txt").read_text() == "previous\n"


def test_run_record_and_reproducer_are_whole_or_absent(tmp_path: Path, monkeypatch) -> None:
    FullDisk(tmp_path, room=100, monkeypatch=monkeypatch)
    with pytest.raises(ReportWriteError) as exc:
        _run_record(tmp_path)
    _clear_error(exc.value, tmp_path / "run-main.json")
    with pytest.raises(ReportWriteError):
        write_reproducer(_record("r.a"), tmp_path / "reproducers")
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


# ----------------------------------------------------------------------------- divergences.json
def test_a_full_disk_during_an_append_keeps_the_list(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "divergences.json"
    DivergenceStore(path).add(_record("r.a"))
    DivergenceStore(path).add(_record("r.b"))
    before = path.read_bytes()
    disk = FullDisk(tmp_path, room=40, monkeypatch=monkeypatch)  # part of the next record
    with pytest.raises(ReportWriteError) as exc:
        DivergenceStore(path).add(_record("r.c"))
    assert disk.failures == 1
    _clear_error(exc.value, path)
    assert path.read_bytes() == before  # the old end is back: still a valid JSON list
    disk.room = 1 << 20  # space freed: appends go on
    DivergenceStore(path).add(_record("r.d"))
    assert [d["rule_id"] for d in json.loads(path.read_text())] == ["r.a", "r.b", "r.d"]


def test_a_record_cut_short_is_the_only_one_lost(tmp_path: Path) -> None:
    """The old end could not be put back (or the writer was killed): every complete
    record is still read, with a warning naming the file and the line."""
    path = tmp_path / "divergences.json"
    for rule in ("r.a", "r.b", "r.c"):
        DivergenceStore(path).add(_record(rule))
    whole = path.read_bytes()
    path.write_bytes(whole[: whole.rindex(b"r.c") + 10])  # the last record, torn
    torn = len(path.read_text().splitlines())
    cut = rf"divergences.json: line {torn} is a record cut short"
    with pytest.warns(RuntimeWarning, match=cut):
        saved = read_divergences(path)
    assert [d["rule_id"] for d in saved] == ["r.a", "r.b"]


def test_damage_before_the_last_line_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "divergences.json"
    for rule in ("r.a", "r.b"):
        DivergenceStore(path).add(_record(rule))
    lines = path.read_text().splitlines()
    assert lines[1].startswith('{"qp_type"')
    lines[1] = lines[1][:20]
    path.write_text("\n".join(lines) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="line 2 is not a divergence record"):
            read_divergences(path)
    assert read_divergences(tmp_path / "none.json") == []


# ----------------------------------------------------------------------------- the folder
def test_a_folder_that_cannot_take_files_is_named(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "file").write_text("")
    for where in (tmp_path / "file", tmp_path / "file" / "out"):
        with pytest.raises(ReportWriteError, match="it is not a folder") as exc:
            check_writable(where)
        assert str(where) in str(exc.value) and "QPCONFORM_OUT_DIR" in str(exc.value)

    def refused(*args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(atomic.os, "open", refused)  # what a 0o500 folder does to a non-root
    with pytest.raises(ReportWriteError, match=r"Permission denied \(EACCES\)"):
        check_writable(tmp_path / "ro")
    monkeypatch.undo()
    check_writable(tmp_path / "fine" / "out")
    assert list((tmp_path / "fine" / "out").iterdir()) == []
