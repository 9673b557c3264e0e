"""A pair end's SRQ sizes and limit, judged by models/srq_sizes.py: what create_srq wrote
back, what query_srq reports after each arm and resize, and the resize itself where the
device says it can (IBV_DEVICE_SRQ_RESIZE in its identity's `srq_resize`).

Kept apart from the post verbs (pair_post.py) because it owns state the model does not:
the sizes a query must reach (create's write-back, then the last accepted resize) and the
limit last armed. A known divergence here is followed by not judging that field again for
this SRQ, so one bug is reported once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from models import srq_sizes
from models.sources import Rule

from .device import VerbResult

#: The errno a refused resize may carry (rxe, rdmavt: -EINVAL).
EINVAL = 22


@dataclass
class _SrqState:
    """What one end's SRQ must report: the sizes a query must reach and the armed limit."""

    floor: dict[str, int] = field(default_factory=dict)
    armed: int = 0
    judged_create: bool = False
    followed: set[str] = field(default_factory=set)  # fields with a known divergence


class SrqSizes:
    """The pair harness's part that reads and judges its ends' SRQ sizes and limits."""

    def __init__(self, harness: Any) -> None:  # the PairHarness it is part of
        self.h = harness
        self._state: dict[str, _SrqState] = {}

    @property
    def resizable(self) -> bool:
        """Does the device say it can resize an SRQ (IBV_DEVICE_SRQ_RESIZE)?"""
        return self.h.device_identity.get("srq_resize") == "yes"

    def forget(self, side: str) -> None:
        """The end (and its SRQ) was made anew: judge its create again."""
        self._state.pop(side, None)

    def armed(self, side: str, limit: int) -> None:
        """modify_srq(IBV_SRQ_LIMIT = limit) was accepted: query must now report it."""
        self._of(side).armed = limit
        self.check(side)

    def check(self, side: str, size_rule: Rule = srq_sizes.QUERY_SIZE) -> dict[str, int] | None:
        """Judge the end's create_srq (once) and one query_srq (a size short of its floor
        breaks `size_rule`: a resize's own, right after it); returns what it reported."""
        state = self._of(side)
        known_before = len(self.h.known)
        if not state.judged_create:
            state.judged_create = True
            self._judge_created(side, state)
        found = self.h.dev.end(side).query_srq()
        if found is None:
            self._report(side, srq_sizes.QUERY_SIZE, "query_srq", "accepted", "refused")
            return None
        misses = [(size_rule, name, want, got)
                  for _, name, want, got in srq_sizes.queried_short(state.floor, found)]
        fired = state.armed != 0 and self._model_limit(side) == 0
        allowed = srq_sizes.limit_allowed(state.armed, fired)
        if "srq_limit" in found and found["srq_limit"] not in allowed:
            shown = "|".join(str(v) for v in sorted(allowed))
            misses.append((srq_sizes.limit_rule(fired), "srq_limit", shown, found["srq_limit"]))
        for rule, name, want, got in misses:
            self._report(side, rule, name, want, got)
        self._log(side, "query_srq", [size_rule, srq_sizes.limit_rule(fired)], known_before)
        return found

    def resize(self, side: str, size: int) -> VerbResult:
        """modify_srq(IBV_SRQ_MAX_WR = size) on the end's SRQ (a device with the feature),
        judged against what the SRQ holds: accepted with room, or refused changing nothing."""
        if not self.resizable:
            raise ValueError("the device lacks IBV_DEVICE_SRQ_RESIZE: no resize is sent")
        state = self._of(side)
        before = self.check(side)
        known_before = len(self.h.known)
        srq = self.h.model.qp(side).srq
        held, limit = (len(srq.recvs), srq.limit) if srq is not None else (0, 0)
        res = self.h.dev.end(side).resize_srq(size)
        rule = srq_sizes.resize_rule(size, held)
        if res.accepted:
            state.floor["max_wr"] = max(size, held)  # room for what it holds, and the size
            self.check(side, rule)
        elif srq_sizes.resize_must_accept(size, held, limit):
            self._report(side, rule, f"resize to {size}", "accepted", f"refused ({res.errno})")
        elif res.errno not in (EINVAL, None):
            self._report(side, rule, f"resize to {size}", f"refused ({EINVAL})",
                         f"refused ({res.errno})")
        else:  # read raw: unchanged is the rule here, whatever the floor says
            after = self.h.dev.end(side).query_srq()
            if before is not None and after is not None:
                for name in sorted(set(before) & set(after)):
                    if after[name] != before[name]:
                        self._report(side, srq_sizes.FAILED_UNCHANGED, name,
                                     str(before[name]), after[name])
        self._log(side, "modify_srq", [rule, srq_sizes.FAILED_UNCHANGED], known_before)
        return res

    # ------------------------------------------------------------------ helpers
    def _of(self, side: str) -> _SrqState:
        return self._state.setdefault(side, _SrqState())

    def _model_limit(self, side: str) -> int:
        srq = self.h.model.qp(side).srq
        return 0 if srq is None else srq.limit

    def _judge_created(self, side: str, state: _SrqState) -> None:
        created = self.h.dev.end(side).srq_created()
        if created is None:
            return
        known_before = len(self.h.known)
        state.floor = {f: max(created.asked.get(f, 0), created.returned.get(f, 0))
                       for f in srq_sizes.SIZES}
        for rule, name, want, got in srq_sizes.created_short(created.asked, created.returned):
            self._report(side, rule, name, want, got, verb="create_srq")
        self._log(side, "create_srq", [srq_sizes.CREATE_AT_LEAST], known_before)

    def _report(
        self, side: str, rule: Rule, name: str, want: str, got: object, verb: str = "query_srq"
    ) -> None:
        """One divergence on `side`'s SRQ (a field already followed is not judged again)."""
        state = self._of(side)
        if name in state.followed:
            return
        h = self.h
        track = h.ends[side]
        d = h.divergence(
            track, "readback", rule, track.last(), f"{name} {want}", f"{verb} {name}={got}",
            [f"field={name}", "srq"], verb=verb, attrs={}, mask=[],
        )
        if h.diverge(track, d) is not None:
            state.followed.add(name)

    def _log(self, side: str, verb: str, checked: list[Rule], known_before: int) -> None:
        """One run-record step: "known" when a quirk covered what it found, else "match"
        (an unknown divergence raised before it)."""
        recorder = self.h.judge.recorder
        if recorder is not None:
            track = self.h.ends[side]
            recorder.step(track.qp_type.name, verb, track.model.state.name, None,
                          [r.id for r in checked],
                          "known" if len(self.h.known) > known_before else "match")
