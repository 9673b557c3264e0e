"""How many Hypothesis examples a self-test runs: `full` in CI, `dev` in the everyday loop.

`scripts/test.sh` runs the `dev` set; CI (the CI variable) and `scripts/test.sh --full` the
`full` one, derandomized. A property keeps its power per example in both: only the number of
examples changes. A test whose count finds a planted fault at a fixed example (derandomized,
generation stopping at the failure) keeps its count: it costs nothing there.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import Phase

#: "full" (CI, scripts/test.sh --full) or "dev" (scripts/test.sh; plain pytest outside CI)
MODE = os.environ.get("QPCONFORM_TEST_EXAMPLES") or ("full" if os.environ.get("CI") else "dev")
if MODE not in ("full", "dev"):
    raise SystemExit(f"QPCONFORM_TEST_EXAMPLES={MODE!r}: the allowed values are full and dev")

#: the dev set runs this share of a test's full count
DEV_SHARE = 4


def examples(full: int, *, floor: int = 10) -> int:
    """`full` in the full set; a quarter of it, and at least `floor`, in the dev set."""
    if MODE == "full":
        return full
    return min(full, max(floor, full // DEV_SHARE))


#: Whether a planted-fault run shrinks what it finds. A planted fault is always found, and its
#: shrink was nine tenths of such a test's time (docs/measured.md), so the dev set finds each
#: fault and checks its rule and kind unshrunk; the full set shrinks it and checks the length.
SHRINK = MODE == "full"

#: Hypothesis settings for a planted-fault run: no shrink phase in the dev set.
PLANTED_RUN: dict[str, Any] = (
    {} if SHRINK else {"phases": (Phase.explicit, Phase.reuse, Phase.generate)}
)


def shrunk_within(verb_steps: int, limit: int) -> bool:
    """A found divergence is at most `limit` verbs long once shrunk (the full set); unshrunk
    (the dev set) it only has to exist."""
    return 1 <= verb_steps <= limit if SHRINK else verb_steps >= 1
