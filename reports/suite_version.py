"""The suite version a run record carries, so the fleet matrix merges only runs whose rows
mean the same thing.

It is the qpconform release and a fingerprint of the model's rules (every rule id a record
can name, with its kind): a rule renamed, added, dropped or turned from "must" into "may"
changes what a divergence row or a characteristic row says, and so the version. Wording
changes (summaries, sources) and new test cases do not: two such runs still compare.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import metadata

from models.catalog import all_rules


@functools.cache
def rules_fingerprint() -> str:
    """Ten hex digits over the sorted (rule id, kind) pairs of every variant."""
    pairs = sorted((rule_id, rule.kind or "") for rule_id, rule in all_rules().items())
    return hashlib.sha256(repr(pairs).encode()).hexdigest()[:10]


def suite_version() -> str:
    """"0.1.0+rules.<fingerprint>" (the release is "unknown" outside an installed tree)."""
    try:
        release = metadata.version("qpconform")
    except metadata.PackageNotFoundError:
        release = "unknown"
    return f"{release}+rules.{rules_fingerprint()}"
