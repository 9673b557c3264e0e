"""The self-tests' Hypothesis profile: `dev` in the everyday loop, `full` in CI.

`scripts/test.sh` runs the `dev` set, the same tests with fewer examples, so the loop a change
goes through stays under five minutes on two cores; CI and `scripts/test.sh --full` the full
counts, derandomized (tests/example_counts.py says which, and scales a test's own count).
"""

from hypothesis import settings

from tests.example_counts import MODE, examples

settings.register_profile("selftest-ci", settings.get_profile("ci"), max_examples=100)
settings.register_profile("selftest-dev", settings.get_profile("default"),
                          max_examples=examples(100))
settings.load_profile("selftest-ci" if MODE == "full" else "selftest-dev")
