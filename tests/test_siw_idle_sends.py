"""Two sends in a state before RTS, then ERR (suites/test_post_rules.py::test_sends_then_err).

The case provokes `siw.send_accepted_in_idle_never_flushed` on every siw run, not only when
the stateful machine's sequence happens to: a libsiw-like fake (LibsiwIdleSend: the
first send in IDLE refused, the next accepted, IDLE->ERR flushing receives only) must show
exactly that quirk's divergence from RESET, INIT and RTR, known under the siw profile; clean
fakes of both variants pass; a refused send that is flushed after all is still a divergence.

libsiw is a Behaviour (the driver's own code, asked before the model), not a FAULTS entry:
it exists on the iwarp variant only, and every planted fault is also hunted on linux.
"""

from __future__ import annotations

import pytest

from fixtures.selection import QUIRKS_DIR
from models.enums import Attr, QPState, QPType
from models.outcomes import Expectation, Outcome
from models.variant import variant as parse_variant
from qpconform.engine.device import AttrValues
from qpconform.engine.judge import DivergenceError
from qpconform.engine.lone import Checker
from qpconform.engine.quirks import Quirks
from qpconform.engine.records import DivergenceList
from suites import steps
from suites.cases import err_path, sends_then_err_groups
from tests.fake_device import IWARP_STYLES, SIW_CAPS, Behaviour, FakeDevice, FakeQP, Verdict

S = QPState
QUIRK = "siw.send_accepted_in_idle_never_flushed"
K61 = "6.1.0-50-amd64"
K612 = "6.12.117+deb13-amd64"
IDLE = (S.RESET, S.INIT, S.RTR)


class LibsiwIdleSend(Behaviour):
    """libsiw's siw_post_send() in IDLE: the SQE is written to the ring, the doorbell's
    write() fails (refused, no errno), the next sends are accepted without a doorbell; the
    kernel's siw_qp_nextstate_from_idle() then flushes only the receive queue on ERR."""

    name = "libsiw-idle-send"

    def post(self, qp: FakeQP, queue: str, exp: Expectation) -> Verdict | None:
        if queue != "send" or qp.model.state not in IDLE or exp.outcome is not Outcome.EITHER:
            return None
        refused_once = qp.private.setdefault("idle_sends", 0) > 0
        qp.private["idle_sends"] += 1
        return Verdict(True) if refused_once else Verdict(False)

    def modified(self, qp: FakeQP, before: QPState, after: QPState, attrs: AttrValues,
                 mask: Attr) -> None:
        if before in IDLE and after == S.ERR:  # siw_rq_flush() only: accepted sends stay
            refused = qp.model.queues.never_run  # what another fault runs is not this driver's
            qp.cq[:] = [c for c in qp.cq if c.queue != "send" or c.wr_id in refused]


def _libsiw(kernel: str, faults: tuple[str, ...] = ()) -> FakeDevice:
    return FakeDevice(list(faults), variant="iwarp", caps=SIW_CAPS, qp_types=[QPType.RC],
                      kernel=kernel, behaviour=LibsiwIdleSend(), **IWARP_STYLES["siw-like"])


def _siw_quirks(kernel: str) -> Quirks:
    return Quirks.load(QUIRKS_DIR / "siw.toml").for_run({"kernel": kernel, "rdma_core": "44.0"})


def _checker(device: FakeDevice, variant: str, quirks: Quirks | None = None,
             sink: DivergenceList | None = None) -> Checker:
    return Checker(device, variant=variant, quirks=quirks, settle_window=0.0, must_wait=0.0,
                   sink=DivergenceList() if sink is None else sink)


def _run_all(checker: Checker, variant: str, types: list[QPType]) -> int:
    """Every runnable group of the case as the suite runs it (pytest.fail on an unknown
    divergence); how many cases ran."""
    ran = 0
    for group in sends_then_err_groups(variant, types):
        if group.skip is None:
            steps.run_group(checker, group, steps.run_sends_then_err)
            ran += len(group.cases)
    return ran


def test_the_groups_and_their_path_to_err() -> None:
    for var in ("linux", "iwarp"):
        ids = [g.id for g in sends_then_err_groups(var, [QPType.RC])]
        assert ids == [f"RC-{s}-post_send-twice-ERR" for s in ("RESET", "INIT", "RTR")]
    assert [g.skip is not None for g in sends_then_err_groups("iwarp", [QPType.UD])] == [True]
    linux, iwarp = parse_variant("linux").table, parse_variant("iwarp").table
    assert err_path(linux, QPType.RC, S.RESET) == (S.INIT, S.ERR)  # Linux refuses RESET->ERR
    assert err_path(linux, QPType.RC, S.RTR) == (S.ERR,)
    assert err_path(iwarp, QPType.RC, S.RESET) == (S.ERR,)  # the move siw was seen failing


@pytest.mark.parametrize("kernel", [K61, K612])
def test_a_libsiw_like_fake_shows_exactly_the_quirk_from_each_idle_state(kernel: str) -> None:
    quirks = _siw_quirks(kernel)
    device = _libsiw(kernel)
    checker = _checker(device, "iwarp", quirks)
    assert _run_all(checker, "iwarp", [QPType.RC]) == 3  # raises on an unknown divergence
    checker.close()
    mine = [d for d in checker.known if d.known_quirk == QUIRK]
    others = {d.known_quirk for d in checker.known} - {QUIRK, "siw.query_qp_state_unset"}
    assert not others, others  # 6.1's query bug may show too; nothing else
    assert {(d.kind, d.rule_id) for d in mine} == {("missing_completion", "iwarp.err.flush")}
    assert {d.state for d in mine} == {"RESET", "INIT", "RTR"}
    assert QUIRK not in {q.id for q in quirks.stale()}
    assert not device.live


@pytest.mark.parametrize(
    ("variant", "types", "style"),
    [
        ("linux", [QPType.RC, QPType.UC, QPType.UD], {}),
        ("iwarp", [QPType.RC], IWARP_STYLES["siw-like"]),  # refuses both sends
        ("iwarp", [QPType.RC], IWARP_STYLES["irdma-like"]),  # accepts both: two flushes
    ],
    ids=["linux", "iwarp-refusing", "iwarp-accepting"],
)
def test_a_clean_fake_passes_without_any_quirk(variant: str, types: list[QPType],
                                               style: dict) -> None:
    device = FakeDevice(variant=variant, qp_types=types,
                        caps=SIW_CAPS if variant == "iwarp" else None, **style)
    sink = DivergenceList()
    checker = _checker(device, variant, sink=sink)
    assert _run_all(checker, variant, types) == 3 * len(types)
    checker.close()
    assert not checker.known and not sink.items
    assert not device.live


def test_the_planted_fault_outside_the_profile_fails() -> None:
    """Without the siw profile the same fake diverges: the case can fail."""
    device = _libsiw(K612)
    with pytest.raises(pytest.fail.Exception, match=r"iwarp\.err\.flush"):
        _run_all(_checker(device, "iwarp"), "iwarp", [QPType.RC])


def test_a_refused_send_flushed_after_all_is_not_masked() -> None:
    """Near miss: the first (refused) send's WQE kept and flushed on ERR (run_failed_post)
    breaks 'a refused WR must never run': another bug, not the quirk."""
    device = _libsiw(K612, ("run_failed_post",))
    checker = _checker(device, "iwarp", _siw_quirks(K612))
    (group, *_) = sends_then_err_groups("iwarp", [QPType.RC])
    with pytest.raises(DivergenceError) as caught:
        steps.run_sends_then_err(checker.open_qp(QPType.RC), group.cases[0])
    record = caught.value.record
    assert (record.known_quirk, record.rule_id, record.kind) == (
        None, "iwarp.post_send.RESET", "completion")
    checker.close()
