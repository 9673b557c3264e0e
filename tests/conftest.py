"""Self-tests run derandomized when CI is set (the plugin's `ci` profile, more examples)."""

import os

from hypothesis import settings

settings.register_profile("selftest-ci", settings.get_profile("ci"), max_examples=100)
if os.environ.get("CI"):
    settings.load_profile("selftest-ci")
