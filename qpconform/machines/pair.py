"""The traffic machines over a connected pair, as the suites and self-tests ask for them:
`machine_for` the InfiniBand machine of a QP type (machines/ib_traffic.py),
`iwarp_machine_for` the iWARP one over rdma_cm connections (machines/iwarp_traffic.py);
both over pairs from a `make` callable (a real device's adapter, or the self-tests' fake
pair).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from hypothesis.stateful import RuleBasedStateMachine

from models.enums import QPType
from qpconform.engine.pair import PairHarness
from qpconform.machines.ib_traffic import (
    SharedCQTrafficMachine,
    SrqSharedCQTrafficMachine,
    SrqTrafficMachine,
    TrafficMachine,
)
from qpconform.machines.iwarp_traffic import IwarpTrafficMachine, SharedCQIwarpTrafficMachine

#: The faults a machine can inject: a bad local key, a bad remote key, a replaced peer, an
#: inline WR one byte beyond max_inline_data, an operation the QP type lacks, a receive
#: shorter than a SEND, a receive whose lkey names no MR (RC), a valid rkey asking more
#: than its MR grants (models/access.py: "access"), a UD SEND with a wrong Q_Key
#: (models/qkey.py: "bad_qkey"), a local SGE past its MR's end or in another PD
#: (models/local_access.py: "local").
FAULTS = frozenset(
    {"bad_lkey", "bad_rkey", "peer", "inline_over_cap", "foreign_op", "short_recv",
     "bad_lkey_recv", "misaligned_atomic", "access", "bad_qkey", "local"}
)


def machine_for(
    qp_type: QPType,
    make: Callable[..., PairHarness],
    faults: Collection[str] = FAULTS,
    srq: bool = False,
    shared_cq: bool = False,
) -> type[RuleBasedStateMachine]:
    """A state machine class over pairs built by `make` (real device or fake), injecting
    the named `faults` (a subset of FAULTS). With `srq`, each example draws whether its
    pair's "b" end takes its receives from an SRQ: `make(srq_sides=("b",))`; with
    `shared_cq`, whether its "a" end shares its CQs with a bystander QP:
    `make(shared_cq_sides=("a",))`."""
    rules: type[TrafficMachine]
    if shared_cq:
        rules = SrqSharedCQTrafficMachine if srq else SharedCQTrafficMachine
    else:
        rules = SrqTrafficMachine if srq else TrafficMachine
    return rules.over(qp_type, make, faults)


def iwarp_machine_for(
    make: Callable[..., PairHarness], faults: Collection[str] = FAULTS,
    shared_cq: bool = False,
) -> type[RuleBasedStateMachine]:
    """The machine over an iWARP pair (machines/iwarp_traffic.py). With `shared_cq`, each
    example draws whether its pair's "a" end shares its CQs with a bystander QP
    (`make(shared_cq_sides=("a",))`)."""
    rules = SharedCQIwarpTrafficMachine if shared_cq else IwarpTrafficMachine
    return rules.over(make, faults)
