"""docs/architecture.md's data-flow diagram names real code: every module path in its
mermaid block exists, and the names written after a path are defined there, so a rename
that leaves the diagram behind fails here instead of misleading the next reader."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
_PATH = re.compile(r"^\(?((?:qpconform|fixtures|suites|models|reports)/[\w/]+\.py)\)?$")
_NAME = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?$")
_CHAIN = {"->", "/", "+"}


def mermaid_blocks(text: str) -> list[str]:
    """The bodies of the ```mermaid fences in `text`."""
    return re.findall(r"```mermaid\n(.*?)```", text, flags=re.S)


def named_pairs(block: str) -> list[tuple[str, str]]:
    """(path, name) for each name written after a module path: "name," goes on to the
    next name, and so does "name ->" (or "/", "+"); anything else ends the list."""
    tokens = re.sub(r"<br/>|[\[\]\"]", " ", block).split()
    pairs: list[tuple[str, str]] = []
    path: str | None = None
    state = "stop"  # "name": a name may follow; "chain": only a chain token goes on
    for tok in tokens:
        found = _PATH.match(tok.rstrip(",:;"))
        if found:
            path, state = found.group(1), "name"
        elif tok in _CHAIN:
            state = "name" if state == "chain" else state
        elif state == "name" and path is not None and _NAME.match(tok.rstrip(",:;)")):
            word = tok.rstrip(",:;)")
            pairs.append((path, word))
            state = "name" if tok == word + "," else "chain" if tok == word else "stop"
        else:
            state = "stop"
    return pairs


def defined(path: Path, name: str) -> bool:
    """Is `name` ("f" or "Class.method") bound at the top of `path` (or in that class)?"""
    tree = ast.parse(path.read_text())
    head, _, attr = name.partition(".")
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == head:
            return not attr or any(
                getattr(item, "name", None) == attr
                or any(getattr(t, "id", None) == attr for t in getattr(item, "targets", []))
                or getattr(getattr(item, "target", None), "id", None) == attr
                for item in node.body
            )
        if attr:
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == head:
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
            (a.asname or a.name) == head for a in node.names
        ):
            return True
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(getattr(t, "id", None) == head for t in targets):
            return True
    return False


def missing(text: str) -> list[str]:
    """What the diagram names that the code does not have."""
    out = []
    for block in mermaid_blocks(text):
        for path, name in named_pairs(block):
            file = ROOT / path
            if not file.is_file():
                out.append(f"{path}: no such file")
            elif not defined(file, name):
                out.append(f"{path}: {name} not defined")
    return out


def test_the_diagram_names_real_modules_and_functions() -> None:
    text = DOC.read_text()
    blocks = mermaid_blocks(text)
    assert blocks, "docs/architecture.md lost its data-flow diagram"
    pairs = named_pairs(blocks[0])
    assert ("qpconform/adapters/remote_device.py", "RemoteQP.modify") in pairs
    assert ("qpconform/adapters/executor.py", "Executor.handle") in pairs
    assert ("fixtures/device_session.py", "start_run") in pairs
    assert missing(text) == []


def test_a_renamed_function_is_caught() -> None:
    """The planted fault: a name the code does not define, and a path that is not there."""
    text = ("```mermaid\nflowchart TB\n  a[\"x<br/>qpconform/adapters/executor.py "
            "Executor.handle -> Executor.no_such_verb,<br/>qpconform/adapters/gone.py f\"]\n```\n")
    assert missing(text) == ["qpconform/adapters/executor.py: Executor.no_such_verb not defined",
                             "qpconform/adapters/gone.py: no such file"]
