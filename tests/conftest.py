"""Hypothesis profiles for the self-tests: CI=1 runs derandomized, without deadlines."""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
