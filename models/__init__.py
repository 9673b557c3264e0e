"""Pure-Python reference model of the RDMA Queue Pair state machine.

Nothing here imports pyverbs, the engine or the reports (import-linter checks it:
pyproject.toml): the model must be usable (and testable) on a host without any
RDMA stack. Every rule names its source so reports can cite it, and every rule is
declared here: models/catalog.py says which rules exist.
"""

from models.enums import MTU, AccessFlag, Attr, EventType, QPState, QPType, WCOpcode, WCStatus
from models.outcomes import Expectation, ExpectedCompletion, Outcome
from models.qp import QPModel
from models.sources import Rule, Source
from models.table import TransitionTable
from models.variant import Variant, variant

__all__ = [
    "MTU",
    "AccessFlag",
    "Attr",
    "EventType",
    "Expectation",
    "ExpectedCompletion",
    "Outcome",
    "QPModel",
    "QPState",
    "QPType",
    "Rule",
    "Source",
    "TransitionTable",
    "Variant",
    "WCOpcode",
    "WCStatus",
    "variant",
]
