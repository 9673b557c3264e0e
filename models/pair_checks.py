"""What the pair harness checks after every step, besides what the wire decides.

`PairModel` (models/pair.py) decides each send's fate; these rules are the checks
around it that qpconform/engine/pair.py makes on every step of a connected pair:
no completion or event nobody booked, both states as the model says, and the
SQD drain's end. They are not in a variant's catalogue (models/catalog.py
`variant_rules`), which lists what the model decides, but a divergence can carry
them (`all_rules`).
"""

from models.sources import DRIVER, MUST, OPTIONAL, Rule, Source

UNEXPECTED_COMPLETION = Rule(
    "pair.completion.unexpected",
    "a completion appears only for a WR the model says completes now (each WR once, in order)",
    Source("IBTA Vol. 1", "ch. 10.8 Work request processing / completion ordering"),
    kind=MUST,
    layer=DRIVER,
)
UNEXPECTED_EVENT = Rule(
    "pair.event.unexpected",
    "only the affiliated async events the spec names for what happened may appear",
    Source("IBTA Vol. 1", "ch. 11.6.3 Asynchronous events"),
    kind=MUST,
    layer=DRIVER,
)
STATE_RULE = Rule(
    "pair.state",
    "after every step both QPs are in the state the model says",
    Source("IBTA Vol. 1", "ch. 10.3.1 QP states"),
    kind=MUST,
    layer=DRIVER,
)
SQ_DRAINING = Rule(
    "pair.sqd.sq_draining",
    "in SQD the drain ends (sq_draining 0, SQ_DRAINED if asked) only once every send that was "
    "started before SQD has completed; query reports sq_draining = 1 until then",
    Source(
        "IBTA Vol. 1",
        "ch. 10.3.1 QP states (SQD: Draining / Drained) and ch. 11.6.3 affiliated events; "
        "man ibv_query_qp(3): sq_draining",
        "Send Queue Drained: all outstanding messages have been completed",
    ),
    kind=OPTIONAL,
    layer=DRIVER,
)

#: The rules declared above, by name (tests/test_model_catalog.py checks that none is left
#: out).
RULES: tuple[Rule, ...] = (UNEXPECTED_COMPLETION, UNEXPECTED_EVENT, STATE_RULE, SQ_DRAINING)
