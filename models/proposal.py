"""Proposal: the verb a QP model proposed and the device has not answered yet.

A verb is modelled in two steps (models/qp.py): the model proposes an expectation without
changing, then `apply` says what the device did. What accepting it would do waits here, with
the WR it posts, so that nothing changes before the answer and a refused WR is known by id.
"""

from collections.abc import Callable
from dataclasses import replace

from models.outcomes import Expectation, Outcome
from models.sources import Rule

#: What accepting a verb does to the model (None: nothing).
Effect = Callable[[], None] | None


class Proposal:
    """The last verb proposed on one QP: its expectation, its effect, the WR it posts."""

    def __init__(self) -> None:
        self._held: tuple[Expectation, Effect, int | None] | None = None

    def hold(self, exp: Expectation, effect: Effect, wr_id: int | None = None) -> Expectation:
        """Keep `exp` (and what accepting it does) until the device answered; returns it."""
        self._held = (exp, effect, wr_id)
        return exp

    def take(self, exp: Expectation) -> tuple[Effect, int | None]:
        """The effect and WR of `exp`, which must be the verb held; nothing is held after."""
        if self._held is None or self._held[0] is not exp:
            raise RuntimeError("apply() must follow the verb that produced this expectation")
        _, effect, wr_id = self._held
        self._held = None
        return effect, wr_id

    def overrule(
        self, exp: Expectation, outcome: Outcome, rule: Rule,
        errnos: frozenset[int] | None = None,
    ) -> Expectation:
        """The post just proposed, judged instead by a rule that knows the WR, not only the
        QP (models/pair.py: an inline WR beyond max_inline_data, an operation the QP type
        lacks): `outcome` under `rule`. Accepted, it does what the QP alone said; refused,
        it never runs (QPModel.apply)."""
        if self._held is None or self._held[0] is not exp or exp.outcome is not (
            Outcome.ACCEPT
        ):
            raise RuntimeError("overrule() takes the accepted post that was just proposed")
        _, effect, wr_id = self._held
        refused = outcome is Outcome.REFUSE
        judged = replace(
            exp, outcome=outcome, rule=rule, checked=(rule,), errnos=errnos,
            completions=() if refused else exp.completions,
            never_run=frozenset({wr_id}) if refused and wr_id is not None else frozenset(),
        )
        self._held = (judged, effect, wr_id)
        return judged
