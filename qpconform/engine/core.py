"""The comparison engine: N tracked QPs, one step log each, one poll loop, bounded waits.

`Engine` is what a rule set (the lone-QP `Checker`, the connected `PairHarness`) is
built on. It holds what every part needs (the judge, the run's delivery log, the
windows' lengths) and the hooks a rule set overrides, and composes the parts that do
the work:

- `log` (steplog.py): each QP's step log and the run record's steps and choices;
- `windows` (delivery_windows.py): the quiet windows a step opens, widened by the run's deliveries;
- `match` (matching.py): each completion and event matched against the QP's ledger, and
  what never came judged;
- `watch` (watch.py): polling every tracked QP and the bounded waits around it;
- `verdict` (verdict.py): a verb's outcome compared, the model committed, what is due
  booked, and a known divergence followed.

Every divergence goes through the `Judge`. A rule set adds only what is its own: which
QPs are observed (`tracks`), how a completion the ledger does not know is explained
(`explain_completion`: a send the lone model knows is on the wire; a flush after an
automatic move to ERR on a pair), how an event nobody booked is judged
(`unbooked_event_rule`), and how a record is worded (`record_verb`).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

from models import rules, srq
from models.enums import EventType
from models.sources import Rule

from . import unmasked
from .delivery_windows import DeliveryWindows
from .device import Completion
from .judge import DivergenceError, Judge
from .matching import Matcher
from .park import Park
from .quirks import Quirk
from .records import Divergence
from .steplog import StepLog
from .timing import DeliveryLog
from .track import Track
from .verdict import Verdict
from .watch import Watch

POLL_INTERVAL = 0.002


class Engine:
    """Compare tracked QPs with their models; subclasses are the rule sets."""

    #: The rule a completion the ledger cannot place breaks: a second completion of one
    #: WR, or one nobody expected (None: the rule that made it due the first time, else
    #: the send/receive completion rule of its queue).
    stray_completion_rule: Rule | None = None
    #: Seconds between two polls of the CQs while waiting.
    poll_interval: float = POLL_INTERVAL
    #: Quiet windows (seconds) a step opens: after a WR that must never run or a delivered
    #: completion, and after a move that can raise an event late (0: none).
    completion_window: float = 0.0
    event_window: float = 0.0
    #: Rules whose completions a transport timer decides (RC retries exhausted, RNR): their
    #: delay measures the timer, not delivery, so windows do not follow it.
    timer_rules: frozenset[str] = frozenset()
    #: When the engine last stopped holding its polls back on purpose (an unpolled block):
    #: what was due before then waited for the engine, not the device, so its delay is no
    #: delivery sample.
    polls_held_until: float = 0.0
    #: Which deliveries this rule set's windows are judged against ("": a pair's, over the
    #: wire; "lone QP": flushes a QP makes alone, which a pair's network delays say nothing
    #: about). Its delivery kinds read "lone QP completion", "lone QP event".
    delivery_scope: str = ""
    #: Finished pairs still observed (qpconform/engine/park.py): every collect polls them too,
    #: so they stay watched while this rule set runs (None: nothing parked here).
    parking: Park | None = None

    def __init__(
        self,
        judge: Judge,
        identity: dict[str, str],
        delivery: DeliveryLog | None = None,
        watch: Callable[[Engine], Watch] | None = None,
    ) -> None:
        """`watch` builds the rule set's own watch from the engine's parts (default: the
        plain Watch; the lone checker's also reaps the QPs it retired)."""
        self.judge = judge
        #: the fill of the fields outside the next modify's mask (a machine draws them)
        self.fills: unmasked.FillSource = unmasked.Keyed()
        #: a lone QP's bring-up walk (CheckedQP.bring_to) takes the keyed fill even in a
        #: machine: drawn on every hop, the fills spent the examples' data and the
        #: derandomized search met fewer sequences (planted faults went unfound)
        self.walk_fills: unmasked.FillSource = unmasked.Keyed()
        self.device_identity = identity
        self.delivery = delivery if delivery is not None else DeliveryLog()
        #: time.monotonic() of the last verb or delivery: what a late item would follow
        self.active_at = time.monotonic()
        self.log = StepLog(self)
        self.windows = DeliveryWindows(self)
        self.match = Matcher(self, self.log, self.windows)
        self.watch = (watch(self) if watch is not None
                      else Watch(self, self.log, self.windows, self.match))
        self.verdict = Verdict(self, self.log, self.windows)

    # ------------------------------------------------------------------ the rule set's part
    def tracks(self) -> list[Track]:
        """The QPs whose completions and events are observed now."""
        raise NotImplementedError

    def explain_completion(self, track: Track, wc: Completion) -> bool:
        """A completion the ledger does not know: True if the rule set accounts for it."""
        return False

    def unbooked_event_rule(self, track: Track, event: EventType) -> Rule | None:
        """The rule an event neither required nor forbidden breaks (None: not judged).
        A CQ error is never owed: every CQ has room for all of its queue's WRs; Last WQE
        Reached is an SRQ's QP's, due when it enters ERR."""
        if event == EventType.QP_LAST_WQE_REACHED:
            has_srq = track.model.srq is not None
            return srq.LAST_WQE_REACHED if has_srq else srq.NO_LAST_WQE_WITHOUT_SRQ
        if event == EventType.SRQ_LIMIT_REACHED:  # once per arming
            return srq.SRQ_LIMIT_REACHED
        return rules.CQ_NO_OVERRUN if event == EventType.CQ_ERR else None

    def stray_rule(self, track: Track, wc: Completion) -> Rule:
        """The rule a completion the ledger knows nothing of breaks: an SRQ's receive is
        never flushed with the QP (it is the SRQ's); anything else, the rule set's."""
        queue = track.model.srq
        if queue is not None and wc.queue == "recv" and wc.wr_id in queue.recvs:
            return srq.SRQ_KEEPS_RECEIVES
        return self.stray_completion_rule or (
            rules.SEND_DONE if wc.queue == "send" else rules.RECV_DONE
        )

    def route(self, track: Track, wc: Completion) -> Track | None:
        """The track a completion polled from `track`'s CQs belongs to (a rule set whose QPs
        share CQs routes by qp_num; default: the polled one); None: the rule set handled it."""
        return track

    def record_verb(self, kind: str) -> str | None:
        """The verb a record of this kind names (None: the verb of the step it comes from)."""
        return None

    def related_tracks(self, track: Track, step: dict[str, Any]) -> list[Track]:
        """Other QPs whose history matters to a divergence placed at `step`."""
        return []

    def after_completion(self, track: Track, wc: Completion, expected: Any) -> None:
        """Called after a completion matched its due entry (right status or wrong)."""

    def on_unknown(self, track: Track) -> None:
        """Called just before an unknown divergence is raised."""

    def on_known_missing(self, track: Track, wr_ids: list[int], quirk: Quirk) -> None:
        """Called when `quirk` excused missing completions (they may still come, late)."""

    def on_event(self, track: Track, event: EventType) -> None:
        """An event polled from `track`: matched against its ledger (matching.py)."""
        self.match.event(track, event)

    # -------------------------------------------------------------------------- judging
    def divergence(
        self,
        track: Track,
        kind: str,
        rule: Rule,
        origin: int,
        expected: str,
        observed: str,
        tags: list[str],
        **override: Any,
    ) -> Divergence:
        """A record of one difference, placed at the step `origin` of the track's log."""
        step = track.steps[origin] if 0 <= origin < len(track.steps) else {}
        fields: dict[str, Any] = {
            "verb": self.record_verb(kind) or step.get("verb", "settle"),
            "state": step.get("expect", {}).get("state_before", track.model.state.name),
            "attrs": dict(step.get("attrs", {})),
            "mask": list(step.get("mask", [])),
        }
        fields.update(override)
        side = [] if track.side is None else [f"side={track.side}"]
        prefix = "" if track.side is None else f"[{track.side}] "
        context = track.context(origin)
        for other in self.related_tracks(track, step):  # e.g. the requester of a wire step
            context["after"] = sorted({*context["after"], *other.context(-1)["after"]})
        fields.setdefault("context", context)
        return Divergence(
            qp_type=track.qp_type.name,
            expected=prefix + expected,
            observed=prefix + observed,
            rule_id=rule.id,
            rule_summary=rule.summary,
            source=str(rule.source),
            rule_kind=rule.kind or "",
            rule_layer=rule.layer or "",
            device=dict(self.device_identity),
            steps=copy.deepcopy(track.steps),
            kind=kind,
            tags=[kind, *side, *tags],
            qp_num=track.qp_num,
            **fields,
        )

    def diverge(self, track: Track, d: Divergence) -> Quirk | None:
        """Judge `d`: the quirk if known, None if deferred; raises if unknown."""
        try:
            return self.judge.verdict(d, track.steps)
        except DivergenceError:
            track.broken = True
            self.on_unknown(track)
            raise
