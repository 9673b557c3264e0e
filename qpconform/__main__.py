"""``python -m qpconform``."""

import sys

from qpconform.cli import main

sys.exit(main())
