"""The stateful time budget: how it is chosen, split and spent."""

from __future__ import annotations

import time

import pytest

from fixtures.budget import (
    DEFAULT_BUDGETS,
    Budget,
    choose_budget,
    format_batches,
    parse_batches,
    spend,
)


def test_profiles_get_their_default_budget_and_ci_keeps_its_count() -> None:
    assert choose_budget(None, "default", False).seconds == DEFAULT_BUDGETS["default"]
    assert choose_budget(None, "thorough", False).seconds == 3600.0
    assert choose_budget(None, "ci", True).seconds is None
    assert choose_budget(None, "mine", False).seconds is None  # a user's own profile: its count
    assert choose_budget(45.0, "default", False).seconds == 45.0
    assert choose_budget(0.0, "default", False).seconds is None


def test_a_budget_cannot_be_spent_on_a_derandomized_profile() -> None:
    with pytest.raises(ValueError, match="derandomized"):
        choose_budget(30.0, "ci", True)
    with pytest.raises(ValueError, match=">= 0"):
        choose_budget(-1.0, "default", False)


def test_the_traffic_share_is_split_between_its_qp_types() -> None:
    budget = Budget(120.0)
    assert budget.share("lone") == 60.0
    assert budget.share("traffic") == 20.0
    assert budget.share("traffic-UD") == 20.0
    assert Budget(None).share("lone") is None


def test_spend_runs_batches_until_the_next_would_overrun() -> None:
    def batch() -> int:
        time.sleep(0.02)
        return 10

    batches, examples, took = spend(0.1, batch)
    assert 3 <= batches <= 5
    assert examples == 10 * batches
    assert took < 0.1 + 0.02 * 2


def test_without_a_budget_one_batch_runs() -> None:
    calls: list[int] = []
    assert spend(None, lambda: calls.append(1) or 7) == (1, 7, pytest.approx(0, abs=0.05))
    assert calls == [1]


def test_a_batch_longer_than_the_budget_still_runs_once() -> None:
    def slow() -> int:
        time.sleep(0.05)
        return 1

    assert spend(0.01, slow)[0] == 1


def test_the_run_record_says_what_was_spent() -> None:
    budget = Budget(120.0, fixed={"traffic-UD": 2})
    budget.spent["traffic-RC"] = "2 batches, 12 examples, 20 s"
    budget.spent["lone"] = "4 batches, 40 examples, 700 steps, 58 s"
    assert budget.text() == "120 s; fixed by --stateful-batches: traffic-UD=2"
    assert budget.spent_text() == (
        "lone: 4 batches, 40 examples, 700 steps, 58 s; traffic-RC: 2 batches, 12 examples, 20 s"
    )
    assert "example count" in Budget(None).text()


def test_stateful_batches_names_each_tests_count() -> None:
    assert parse_batches("lone=4, traffic-RC=3,traffic-UC=2,traffic-UD=2") == {
        "lone": 4, "traffic-RC": 3, "traffic-UC": 2, "traffic-UD": 2}
    assert format_batches({"traffic-UD": 1, "lone": 2}) == "lone=2,traffic-UD=1"
    assert choose_budget(None, "default", False, "lone=3").fixed == {"lone": 3}


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("lone=4,traffic=3", "unknown key 'traffic'"),
        ("traffic RC=3", "unknown key 'traffic RC'"),
        ("lone", "'lone' is not KEY=N"),
        ("", "'' is not KEY=N"),
        ("lone=0", "lone='0' is not a number of batches"),
        ("lone=-2", "lone='-2' is not a number of batches"),
        ("lone=many", "lone='many' is not a number of batches"),
        ("lone=2,lone=3", "lone is given twice"),
    ],
)
def test_a_bad_stateful_batches_spec_says_what_is_allowed(spec: str, problem: str) -> None:
    with pytest.raises(ValueError) as error:
        parse_batches(spec)
    message = str(error.value)
    assert message.startswith(f"--stateful-batches {spec!r}: {problem}"), message
    if "twice" not in problem:
        assert "KEY one of lone, traffic-RC, traffic-UC, traffic-UD" in message


def test_fixed_batches_ignore_the_budget_and_the_others_keep_it() -> None:
    budget = Budget(0.0, fixed={"lone": 3})  # no time at all: only the fixed count runs more

    def batch() -> int:
        time.sleep(0.01)
        return 10

    assert budget.run("lone", batch)[:2] == (3, 30)
    assert budget.run("traffic-RC", batch)[:2] == (1, 10)  # the budget: one batch at least
    assert budget.batches_text() == "lone=3,traffic-RC=1"


def test_a_failing_batch_is_counted_so_a_replay_reaches_it() -> None:
    budget = Budget(None, fixed={"lone": 5})
    ran: list[int] = []

    def batch() -> int:
        ran.append(1)
        if len(ran) == 2:
            raise AssertionError("a divergence")
        return 10

    with pytest.raises(AssertionError):
        budget.run("lone", batch)
    assert budget.batches == {"lone": 2}
