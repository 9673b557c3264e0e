"""Find the Debian mirror to build from in the host's apt sources.

The project must not name a mirror host itself, so the mirror is the one the
host already uses (or the user's ``--mirror``).
"""

from __future__ import annotations

from pathlib import Path

APT_DIR = Path("/etc/apt")


class MirrorError(Exception):
    """No usable Debian mirror was found."""


def _is_debian_archive(uri: str) -> bool:
    path = uri.rstrip("/")
    return path.endswith("/debian") and "security" not in path


def parse_one_line_sources(text: str) -> list[str]:
    """URIs of ``deb`` lines in the one-line ``sources.list`` format."""
    uris = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line.startswith("deb "):
            continue
        words = line.split()[1:]
        if words and words[0].startswith("["):
            while words and not words[0].endswith("]"):
                words.pop(0)
            words = words[1:]
        if words:
            uris.append(words[0])
    return uris


def parse_deb822_sources(text: str) -> list[str]:
    """URIs of enabled ``Types: deb`` stanzas in the deb822 ``.sources`` format."""
    uris: list[str] = []
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for raw in stanza.splitlines():
            if raw.startswith("#") or ":" not in raw or raw[:1].isspace():
                continue
            key, value = raw.split(":", 1)
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split():
            continue
        if fields.get("enabled", "yes").lower() == "no":
            continue
        uris.extend(fields.get("uris", "").split())
    return uris


def host_mirror(apt_dir: Path = APT_DIR) -> str:
    """The first Debian archive URI in the host's apt sources."""
    candidates: list[str] = []
    one_line = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]
    for path in one_line:
        if path.is_file():
            candidates += parse_one_line_sources(path.read_text(errors="replace"))
    for path in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        candidates += parse_deb822_sources(path.read_text(errors="replace"))
    for uri in candidates:
        if _is_debian_archive(uri):
            return uri.rstrip("/")
    raise MirrorError(
        f"no Debian archive (a URI ending in /debian) in {apt_dir}/sources.list "
        f"or {apt_dir}/sources.list.d/; pass --mirror URI"
    )
