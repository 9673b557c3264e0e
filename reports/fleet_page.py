"""matrix.html and matrix.json: the fleet matrix (reports/fleet.py) written for people and
machines, like report.html and its JSON twin (one self-contained page, no script)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from reports.atomic import write_atomic_many
from reports.fleet import build_matrix
from reports.html import render_template

HTML_NAME = "matrix.html"
JSON_NAME = "matrix.json"


def render_matrix(matrix: Mapping[str, Any]) -> str:
    """The matrix page for a matrix dict (built by build_matrix or read from matrix.json)."""
    return render_template("matrix.html.j2", m=matrix)


def write_matrix(
    paths: Iterable[str | os.PathLike[str]], out_dir: str | os.PathLike[str]
) -> tuple[dict[str, Any], Path, Path]:
    """Build the matrix of the runs at `paths`; write matrix.html and matrix.json (both or
    neither) into out_dir."""
    matrix = build_matrix(paths)
    out = Path(out_dir)
    html_path, json_path = out / HTML_NAME, out / JSON_NAME
    write_atomic_many({
        json_path: json.dumps(matrix, indent=1, sort_keys=True) + "\n",
        html_path: render_matrix(matrix),
    })
    return matrix, html_path, json_path
