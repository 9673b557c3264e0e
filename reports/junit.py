"""What a JUnit XML file says of a run: its time, its failing tests, how many passed.

The soak and the mutant gate read the same junit file pytest writes for each VM run.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class JunitSummary:
    """Suite seconds (None: no file), the failing tests (name, first message line), and
    the number of tests that passed (neither failed, errored nor skipped)."""

    seconds: float | None = None
    failed: list[tuple[str, str]] = field(default_factory=list)
    passed: int = 0


def read_junit(path: Path) -> JunitSummary:
    """Summarise one junit file; an absent file gives an empty summary."""
    if not path.is_file():
        return JunitSummary()
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    seconds = sum(float(s.get("time", 0) or 0) for s in suites) if suites else None
    out = JunitSummary(seconds)
    for case in root.iter("testcase"):
        bad = [c for c in case if c.tag in ("failure", "error", "skipped")]
        for child in bad:
            if child.tag in ("failure", "error"):
                name = f"{case.get('classname', '')}::{case.get('name', '')}"
                text = (child.get("message") or child.text or "").strip().splitlines()
                out.failed.append((name, text[0][:200] if text else ""))
        out.passed += not bad
    return out


def merge_junit(parts: list[Path], target: Path) -> int:
    """One junit file of a run made of several pytest sessions (scripts/conformance.sh:
    the lone-QP suites on the host, the pair suites in the guest): every part's test
    suites under one <testsuites>; a missing part is left out. Returns the suites kept."""
    merged = ET.Element("testsuites")
    for part in parts:
        if not part.is_file():
            continue
        root = ET.parse(part).getroot()
        merged.extend([root] if root.tag == "testsuite" else list(root.iter("testsuite")))
    ET.ElementTree(merged).write(target, encoding="utf-8", xml_declaration=True)
    return len(merged)


def main(argv: list[str] | None = None) -> int:
    """python -m reports.junit MERGED PART [PART ...]: merge_junit, then remove the parts."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m reports.junit", description=merge_junit
                                     .__doc__.split(":")[0])
    parser.add_argument("merged", type=Path)
    parser.add_argument("parts", type=Path, nargs="+")
    args = parser.parse_args(argv)
    kept = merge_junit(args.parts, args.merged)
    for part in args.parts:
        if part.resolve() != args.merged.resolve():
            part.unlink(missing_ok=True)
    print(f"qpconform: {args.merged}: {kept} test suite(s) of {len(args.parts)} part(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
