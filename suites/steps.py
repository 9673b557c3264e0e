"""What the deterministic suites share: parametrisation from suites/cases.py and the steps
that run one case on a fresh checked QP.

No pyverbs here either: the device is reached only through the checker (qpconform/engine/lone.py),
which compares every step with the model and raises DivergenceError on an unknown divergence.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pytest

from models.attributes import DeviceCaps
from models.enums import QPState, QPType
from models.reach import reachable_states
from models.variant import Variant
from qpconform.engine.device import Device, UnsupportedQPType
from qpconform.engine.hazards import HazardAvoided
from qpconform.engine.judge import DivergenceError
from qpconform.engine.lone import CheckedQP, Checker, Unreachable
from suites.cases import Case, Group, after_post_path, err_path


# ------------------------------------------------------------------ parametrisation
def collection_variant(config: pytest.Config) -> str:
    """The model variant the session runs, known at collection (the plugin's --variant,
    `auto` resolved at configure time; without a device nothing resolves it and no suite
    test runs: linux, so that collection still works)."""
    found = str(config.getoption("variant", default=None) or "linux")
    return "linux" if found == "auto" else found


def parametrize(metafunc: pytest.Metafunc, argname: str, groups: Iterable[Group]) -> None:
    """Parametrise `argname` with one test per group, labelled for the reports."""
    params = []
    for g in groups:
        label = {"feature": g.feature, "qp_type": g.qp_type.name, "transition": g.transition}
        marks: list[Any] = [pytest.mark.qpconform(**label)]
        if g.skip is not None:
            marks.append(pytest.mark.skip(reason=g.skip))
        params.append(pytest.param(g, id=g.id, marks=marks))
    metafunc.parametrize(argname, params)


def check_session(
    group: Group, qp_types: Sequence[QPType], variant: Variant, generated: str
) -> None:
    """Skip a QP type the session does not run; refuse cases generated for another variant
    (`generated`: the name collection_variant() found)."""
    if variant.name != generated:
        pytest.fail(
            f"cases were generated for model variant {generated!r} but the session runs "
            f"{variant.name!r}: the plugin's variant option must have dest 'variant'",
            pytrace=False,
        )
    if group.qp_type not in qp_types:
        pytest.skip(f"{group.qp_type.name} QPs are not selected or not supported by this device")


# ------------------------------------------------------------------------- steps
def step_to(qp: CheckedQP, nxt: QPState) -> None:
    """One modify to nxt with valid attributes and the exactly-required mask."""
    qp.modify(*qp.values.transition_attrs(nxt))


def bring_to(qp: CheckedQP, state: QPState) -> None:
    """Set a fresh QP up in `state` along transitions every variant allows.

    ERR is reached through INIT: the shortest ibta path (RESET->ERR) is itself a case under
    test, and a device that refuses it must not fail every ERR-from case at setup.
    """
    if state == QPState.ERR and qp.model.state == QPState.RESET:
        qp.bring_to(QPState.INIT)
        step_to(qp, QPState.ERR)
    else:
        qp.bring_to(state)


def run_modify_case(qp: CheckedQP, device: Device, case: Case) -> None:
    """Bring a fresh QP to case.cur and run the case's modify.

    No settle here: run_group retires the QP next, and CheckedQP.retire() settles first
    (one bounded wait per case instead of two; its quiet window overlaps the next case).
    """
    bring_to(qp, case.cur)
    attrs = qp.values.attrs_for(case.mask, case.nxt)  # valid values of the mask's fields
    attrs.update(case.overrides(device.caps))
    qp.modify(attrs, case.mask)  # outside the mask: the checker's fill (unmasked.Keyed)


#: At most this many cases share one QP (the chain's reproducer replays them all), and the
#: next one starts on a fresh QP: every chain is also a sample of fresh-QP behaviour.
REUSE_CHAIN = int(os.environ.get("QPCONFORM_REUSE_CHAIN", "8"))


def run_post_case(qp: CheckedQP, case: Case) -> None:
    """The post of `case` in case.cur, then on to RTS (where a modify reaches it) and ERR:
    a refused WR must never complete, an accepted one must be flushed."""
    bring_to(qp, case.cur)
    getattr(qp, case.kind)()  # post_send / post_recv: the checker picks the wr_id
    qp.settle()
    for nxt in after_post_path(case.cur, reachable_states(qp.model.table, qp.qp_type)):
        step_to(qp, nxt)
    qp.settle()


def run_sends_then_err(qp: CheckedQP, case: Case) -> None:
    """Two post_sends in case.cur, then the shortest path to ERR, then the one wait for
    what the model owes (each accepted send's flush; nothing for a refused one)."""
    bring_to(qp, case.cur)
    qp.post_send()
    qp.post_send()
    for nxt in err_path(qp.model.table, qp.qp_type, qp.model.state):
        step_to(qp, nxt)
    qp.settle()


def run_group(
    checker: Checker,
    group: Group,
    body: Callable[[CheckedQP, Case], None],
    caps: DeviceCaps | None = None,
    reuse_refused: bool = False,
) -> None:
    """Run each case of a group on its own QP; fail once, listing every unknown divergence.

    A divergence in one case must not hide the others, so each is caught and collected;
    known (quirked) divergences never raise and so pass. With `reuse_refused`, a QP whose
    case ended in a refused modify (a failed verb changes nothing: the model and the
    read-back check that it did not) carries on to the next case, up to REUSE_CHAIN
    cases, instead of a create, bring-up and destroy per case. A case whose start state a
    known quirk keeps the QP from (mlx5 and hns refuse RTS->SQD: no QP reaches SQD) cannot
    run: when no case of the group could, the group is a skip saying so (the device lacks
    the state); when only some could not, the group fails naming them.
    """
    if len(group.cases) == 1 and caps is not None:
        reason = group.cases[0].unfit_reason(caps)
        if reason is not None:
            pytest.skip(reason)
    failures: list[str] = []
    unreachable: list[str] = []
    avoided: list[str] = []  # cases whose modify a known hazard kept unsent (recorded as known)
    ran, chain = 0, 0
    qp: CheckedQP | None = None
    try:
        for case in group.cases:
            if caps is not None and case.unfit_reason(caps) is not None:
                continue
            if qp is None:
                try:
                    qp = checker.open_qp(case.qp_type)
                except UnsupportedQPType as exc:
                    pytest.skip(f"{case.qp_type.name}: {exc}")
                chain = 0
            ran, chain = ran + 1, chain + 1
            diverged = False
            try:
                body(qp, case)
            except DivergenceError as exc:
                failures.append(f"{case.id}: {exc}")
                diverged = True
            except Unreachable as exc:  # judged (a known quirk) while bringing the QP up
                unreachable.append(f"{case.id}: {exc}")
                diverged = True
            except HazardAvoided as exc:
                avoided.append(f"{case.id}: {exc}")
                diverged = True
            if diverged or not (reuse_refused and chain < REUSE_CHAIN and _refused_last(qp)):
                failures += _destroy(qp, case.id)
                qp = None
    finally:
        if qp is not None:
            failures += _destroy(qp, "last case")
    if avoided and len(avoided) == ran and not failures:
        pytest.skip(f"{avoided[0]}" + (f" (and {len(avoided) - 1} more)" if avoided[1:] else ""))
    if unreachable and len(unreachable) == ran and not failures:
        pytest.skip(f"not supported by this device: {unreachable[0].split(': ', 1)[1]}")
    failures += [f"{u} (its start state was reached by other cases)" for u in unreachable]
    if failures:
        pytest.fail(
            f"{len(failures)} of {ran} cases diverged from the model:\n" + "\n".join(failures),
            pytrace=False,
        )


def _refused_last(qp: CheckedQP) -> bool:
    """The QP's last verb was a modify the model and the device both refused."""
    last = qp.steps[-1] if qp.steps else {}
    return (
        not qp.broken
        and last.get("verb") == "modify"
        and last.get("expect", {}).get("outcome") == "refuse"
        and last.get("result", {}).get("accepted") is False
    )


def _destroy(qp: CheckedQP, label: str) -> list[str]:
    """The case is done with `qp`: retired (observed on while the next cases run, then
    destroyed: CheckedQP.retire), or destroyed at once once it diverged."""
    try:
        qp.retire()
    except DivergenceError as exc:
        return [f"{label} (destroy): {exc}"]
    return []
