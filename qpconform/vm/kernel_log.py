"""Scan a guest kernel log (dmesg) for reports that must fail a run.

Pure function, tested on the host.  Any of these, from the RDMA stack or any
other part of the kernel, counts; a pattern must start the message (after the
``[ time]`` stamp and an optional ``[ T123]`` caller id), so a driver that
merely mentions a word does not trip it:

- ``WARNING:``            WARN()/WARN_ON() splats, lockdep and RCU reports
                          ("WARNING: possible circular locking dependency
                          detected", "WARNING: suspicious RCU usage", ...)
- ``BUG:``                "BUG: kernel NULL pointer dereference",
                          "BUG: KASAN: ...", "BUG: KFENCE: ...",
                          "BUG: sleeping function called ...", "BUG: held lock freed!"
- ``kernel BUG at``       BUG_ON()
- ``Oops:`` / ``general protection fault`` / ``Kernel panic``
- ``UBSAN:``              undefined behaviour sanitizer
- ``INFO: possible ...`` / ``INFO: task ... blocked for more than`` /
  ``INFO: rcu_..._detected stalls``  lockdep info reports, hung tasks, RCU stalls
- ``Unable to handle kernel``, ``list_add corruption``, ``list_del corruption``,
  ``refcount_t:``, ``watchdog: BUG: soft lockup``
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = r"^(?:<\d+>)?(?:\[\s*\d+\.\d+\]\s*)?(?:\[\s*[TC]\d+\]\s*)?"

PATTERNS: dict[str, str] = {
    "warning": r"WARNING:",
    "bug": r"BUG:",
    "bug_on": r"kernel BUG at ",
    "oops": r"Oops:|Oops\b",
    "gpf": r"general protection fault",
    "panic": r"Kernel panic",
    "ubsan": r"UBSAN:",
    "lockdep_info": r"INFO: (?:possible|inconsistent|trying to register non-static key)",
    "hung_task": r"INFO: task \S+ blocked for more than",
    "rcu_stall": r"INFO: rcu\w* (?:detected|self-detected) stall",
    "bad_access": r"Unable to handle kernel",
    "list_corruption": r"list_(?:add|del) corruption",
    "refcount": r"refcount_t: ",
    "soft_lockup": r"watchdog: BUG: soft lockup",
}

_COMPILED = [(name, re.compile(PREFIX + rx)) for name, rx in PATTERNS.items()]


@dataclass(frozen=True)
class Finding:
    """One offending kernel log line."""

    kind: str
    line_number: int
    line: str


def scan(text: str, ignore: list[str] | tuple[str, ...] = ()) -> list[Finding]:
    """Lines of ``text`` that report a kernel problem, minus those matching ``ignore``.

    ``ignore`` holds regular expressions (searched anywhere in the line) for
    known, accepted messages.
    """
    ignored = [re.compile(rx) for rx in ignore]
    findings = []
    for number, line in enumerate(text.splitlines(), start=1):
        for kind, rx in _COMPILED:
            if rx.search(line):
                if not any(ig.search(line) for ig in ignored):
                    findings.append(Finding(kind, number, line.rstrip()))
                break
    return findings


def summary(findings: list[Finding], limit: int = 10) -> str:
    """Human-readable lines for the run's failure message."""
    lines = [f"  line {f.line_number} [{f.kind}]: {f.line}" for f in findings[:limit]]
    if len(findings) > limit:
        lines.append(f"  ... and {len(findings) - limit} more")
    return "\n".join(lines)


#: Reports after which the guest kernel cannot be trusted to finish the run: the task that
#: met it died inside a system call, maybe holding locks, over memory that may be corrupt
#: (seen: rxe on 6.1 corrupting a slab, then flooding the console for minutes). The host
#: stops such a guest soon after one (qemu.py) instead of waiting out the run's timeout.
CRASHES = ("oops", "panic", "gpf", "bad_access")
_CRASH = re.compile(PREFIX + "(?:" + "|".join(PATTERNS[k] for k in CRASHES) + ")")


def crash(line: str) -> bool:
    """Whether one console line reports a kernel crash (CRASHES)."""
    return _CRASH.search(line) is not None
