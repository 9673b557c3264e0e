"""One ELF note's descriptor: how a loaded module's build id is read from sysfs.

The adapters read /sys/module/<name>/notes/.note.gnu.build-id (identity.py); the VM
runner reads the same note out of the .ko it loads (qpconform/vm/drivers.py), so the
report can prove which file is loaded. It lives here, below both.
"""

from __future__ import annotations

import struct


def note_build_id(note: bytes) -> str:
    """Hex of the descriptor of one ELF note (the raw ``.note.gnu.build-id``)."""
    if len(note) < 12:
        return ""
    namesz, descsz, _type = struct.unpack_from("<III", note)
    start = 12 + (namesz + 3) // 4 * 4
    return note[start : start + descsz].hex()
