"""Report files are replaced whole or not at all, and a failed write says what to do.

A report read by a person or a CI job must never be half a file: a full disk or
a Ctrl-C in the middle of a write would otherwise leave a truncated report.json
that looks like a run's result. Every report is written to a temporary file in
its own folder (same file system, so the rename is atomic), flushed to disk,
then renamed over the target; on any failure the temporary file is removed and
the previous file, if there was one, stays as it was.
"""

from __future__ import annotations

import errno
import os
import secrets
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path

#: Where else the reports can go (a run, `qpconform report`).
ELSEWHERE = "QPCONFORM_OUT_DIR=DIR for a run, --output DIR for qpconform report"


class ReportWriteError(OSError):
    """A report file could not be written: the message names the file, the cause and the fix."""


def _cause(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0)
    text = exc.strerror or str(exc)
    return f"{text} ({name})" if name else text


def _fix(exc: OSError) -> str:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "free space on that disk"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "make the folder writable"
    return "check the folder"


def write_error(path: str | os.PathLike[str], exc: OSError) -> ReportWriteError:
    """The one clear error for a report file that could not be written."""
    error = ReportWriteError(
        f"cannot write {path}: {_cause(exc)}; {_fix(exc)}, or write the reports elsewhere "
        f"({ELSEWHERE})"
    )
    error.errno = exc.errno
    return error


def _write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is out (a nearly full disk takes part of a write)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _temp_for(path: Path, data: bytes, mode: int | None) -> Path:
    """data in a new temporary file next to path, on disk (fsync); removed if that fails."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        try:
            _write_all(fd, data)
            if mode is not None:
                os.fchmod(fd, mode)
            os.fsync(fd)  # a full disk may only say so here (delayed allocation)
        finally:
            os.close(fd)
    except BaseException:
        with suppress(OSError):
            tmp.unlink()
        raise
    return tmp


def write_atomic_many(
    files: Mapping[str | os.PathLike[str], str | bytes], mode: int | None = None
) -> list[Path]:
    """Write several files that belong together (report.json and report.html): every
    temporary file is complete before the first rename, so a failure replaces none.

    Raises ReportWriteError naming the file that could not be written.
    """
    written: list[tuple[Path, Path]] = []
    current = Path()
    try:
        for name, data in files.items():
            current = Path(name)
            current.parent.mkdir(parents=True, exist_ok=True)
            blob = data.encode() if isinstance(data, str) else data
            written.append((_temp_for(current, blob, mode), current))
        for tmp, current in written:
            os.replace(tmp, current)
    except OSError as exc:
        raise write_error(current, exc) from None
    finally:
        for tmp, _ in written:
            with suppress(OSError):
                tmp.unlink()  # only those not renamed yet are still there
    return [target for _, target in written]


def write_atomic(path: str | os.PathLike[str], data: str | bytes, mode: int | None = None) -> Path:
    """Replace path with data whole, or leave it as it was; `mode` e.g. 0o755 for a script.

    Raises ReportWriteError naming the file, the cause (ENOSPC, EACCES, ...) and the fix.
    """
    return write_atomic_many({path: data}, mode)[0]


def check_writable(
    directory: str | os.PathLike[str], elsewhere: str = "set QPCONFORM_OUT_DIR to one"
) -> None:
    """Create directory if needed and write (then remove) a probe file in it, so a run
    learns before its first test that its reports could not be kept.

    Raises ReportWriteError naming the folder, the cause and the fix (`elsewhere`: how
    to choose another folder).
    """
    folder = Path(directory)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _temp_for(folder / ".qpconform-probe", b"probe\n", None).unlink()
    except OSError as exc:
        if isinstance(exc, FileExistsError | NotADirectoryError):
            cause = "it is not a folder (a file is in the way)"
        else:
            cause = _cause(exc)
        error = ReportWriteError(
            f"the report folder {folder} cannot take the run's records: {cause}; make it a "
            f"writable folder or {elsewhere}"
        )
        error.errno = exc.errno
        raise error from None
