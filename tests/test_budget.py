"""The stateful time budget: how it is chosen, split and spent."""

from __future__ import annotations

import time

import pytest

from fixtures.budget import DEFAULT_BUDGETS, Budget, choose_budget, spend


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
    budget = Budget(120.0)
    budget.spent["lone"] = "40 examples, 700 steps, 58 s"
    assert budget.text() == "120 s (lone: 40 examples, 700 steps, 58 s)"
    assert "example count" in Budget(None).text()
