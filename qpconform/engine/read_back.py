"""What a lone QP reads back, judged: the state query_qp reports (under one of the names
the variant allows for it), every attribute the model knows (models/readback.py), and the
other values query_qp hands back (returned.py).

A known divergence is followed (the model takes the device's value or state, a returned
field is not judged again) so one bug is reported once."""

from __future__ import annotations

from models import readback, rules
from models.enums import Attr, QPState
from models.outcomes import Expectation

from . import returned
from .core import Engine
from .device import Created, QueryResult
from .quirks import reads_wrong
from .track import Track


class ReadBack:
    """The read-back checks of one lone QP (lone.py CheckedQP)."""

    def __init__(self, engine: Engine, track: Track, created: Created | None) -> None:
        self.engine = engine
        self.track = track
        self.created = created  # what create_qp and create_cq wrote back
        self.followed: set[str] = set()  # returned fields a known divergence was seen in

    def returned(self, found: QueryResult) -> None:
        """query_qp's cur_qp_state and capabilities (engine/returned.py, models/returned.py)."""
        if not self.track.broken:
            returned.judge_query(self.engine, self.track, self.created, found,
                                 self.track.last(), self.followed)

    def attributes(self, found: QueryResult, mask: Attr | None, accepted: bool) -> None:
        """Every attribute the model knows must read back as set (models/readback.py).

        A field outside the modify's mask that changed, or any change by a refused
        modify, breaks its own rule; a known divergence is followed (the model takes the
        device's value) so one bug is reported once.
        """
        track, model = self.track, self.track.model
        if track.broken or not found.attrs:
            return
        if mask is not None and model.stored.fields:  # what a reproducer checks
            track.steps[-1]["readback"] = {
                name: sorted(e.values) for name, e in model.stored.fields.items()
            }
        engine = self.engine
        for name, exp, seen in model.stored.differences(found.attrs):
            if not accepted:
                rule = readback.READBACK_REFUSED
            elif mask is None or readback.COMPARED[name] in mask:
                rule = exp.rule
            else:
                rule = readback.READBACK_UNMASKED
            d = engine.divergence(
                track, "readback", rule, track.last(), exp.text(name),
                f"query_qp {name}={seen}", [f"field={name}", *readback.direction(exp, seen)],
            )
            engine.diverge(track, d)
            model.stored.follow(name, seen)

    def state(self, found: QPState) -> None:
        """The state query_qp reported outside any step must be the model's (a name the
        variant allows for it is recorded as the device's choice)."""
        track, model = self.track, self.track.model
        if found in model.reported():
            self.named(model.state, found)
            return
        if found != model.state:
            engine, origin = self.engine, track.last()
            d = engine.divergence(
                track, "state", rules.QUERY, origin,
                expected=f"state {model.state.name}", observed=f"state {found.name}",
                tags=[f"state={found.name}"], verb="query", attrs={}, mask=[],
            )
            if not reads_wrong(engine.diverge(track, d)):
                engine.verdict.follow_state(track, found, origin)

    def named(self, want: QPState, seen: QPState) -> None:
        """query_qp named a QP in `want` `seen`, one of the names the variant allows for it
        (iwarp: IDLE entered as RESET or RTR may read back as INIT): which name a device
        uses is its choice, recorded for the report's characteristics."""
        rule = self.track.model.table.naming_rule(want)
        if rule is not None:
            self.engine.log.record_choice(
                rule, "as the state asked for" if seen == want else f"as {seen.name}"
            )

    def landed(self, exp: Expectation, seen: QPState, idx: int) -> bool:
        """An accepted modify left the QP in another state its "may" rule allows (iwarp: a
        driver that ignores the move): the model follows the device there (the choice of
        outcome is already recorded by `Verdict.conclude`)."""
        for state in exp.may_land:
            if seen in self.track.model.reported(state):
                self.engine.verdict.follow_state(self.track, state, idx)
                return True
        return False
