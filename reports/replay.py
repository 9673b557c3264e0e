"""What a run record says about replaying its random examples: the replay line and the
names of the stateful tests whose batches it counts.

The plugin writes these into every worker's run record (fixtures/seeds.py,
fixtures/budget.py) and the merge of the workers' records rewrites them
(reports/run_record.py), so they live here, below both: a report never imports
the plugin.
"""

from __future__ import annotations

#: The stateful tests by the name their batches and spending are recorded under (and the
#: keys of --stateful-batches): the lone-QP machine, the traffic machine per QP type.
PARTS = ("lone", "traffic-RC", "traffic-UC", "traffic-UD")
#: How a replay line gives the batch counts (always last, see with_batches).
BATCHES_OPTION = " --stateful-batches "


def part_order(part: str) -> tuple[int, str]:
    """Sort key: the PARTS in their order, then any other name alphabetically."""
    return (PARTS.index(part) if part in PARTS else len(PARTS), part)


def replay_args(
    seed: int | None, profile: str, batches: str = "", budget_off: bool = False
) -> str:
    """The options that replay a run's stateful sequences exactly: its seed, its profile
    (the examples per batch), `--stateful-budget=0` when it ran without a budget (one
    batch of the profile's count), and the batches each stateful test ran, last."""
    args = [] if seed is None else [f"--hypothesis-seed={seed}"]
    args.append(f"--hypothesis-profile={profile}")
    if budget_off:
        args.append("--stateful-budget=0")
    return with_batches(" ".join(args), batches)


def with_batches(replay: str, batches: str) -> str:
    """A replay line whose --stateful-batches is `batches` (a SPEC, fixtures/budget.py):
    an xdist worker's line names only its own tests, the merged record every test's."""
    base = replay.split(BATCHES_OPTION)[0].rstrip()
    return f"{base}{BATCHES_OPTION}{batches}" if batches else base


def describe(seed: int | None, profile: str, replay: str | None = None) -> str:
    """What the report and the header say about the seed: `replay` is the run's exact
    replay line once its batches are known (the header, before any batch ran, says the
    end of the run adds them)."""
    if seed is None:
        return f"derandomized (profile {profile}: the same examples every run)"
    if replay is None:
        return (f"{seed} (replay: {replay_args(seed, profile)} plus the --stateful-batches "
                "printed at the end of the run)")
    return f"{seed} (replay: {replay})"
