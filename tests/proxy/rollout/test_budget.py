"""One false-rollback budget per rollout: the shares of its families and of its open-ended rule
epochs add up to at most the whole, whatever the configuration and however many epochs open."""

from __future__ import annotations

import itertools

import pytest

from proxy.rollout.budget import epoch_order, rollout_budget


@pytest.mark.parametrize("checks,probes,reviews", itertools.product([False, True], repeat=3))
def test_the_families_shares_add_up_to_the_whole_budget(
    checks: bool, probes: bool, reviews: bool
) -> None:
    budget = rollout_budget(checks=checks, probes=probes, reviews=reviews)
    total = budget.traffic + budget.epochs + budget.probes + budget.reviews
    assert total == pytest.approx(1.0)
    assert budget.traffic == pytest.approx(1 / (1 + checks + probes + reviews))
    assert (budget.epochs > 0, budget.probes > 0, budget.reviews > 0) == (checks, probes, reviews)


def test_any_number_of_rule_epochs_stays_within_their_share() -> None:
    budget = rollout_budget(checks=True, probes=True, reviews=True)
    spent = sum(budget.epoch(i) for i in range(1, 100_001))
    assert spent <= budget.epochs
    assert spent == pytest.approx(budget.epochs, rel=1e-4)
    assert budget.epoch(1) == pytest.approx(budget.epochs / 2)
    with pytest.raises(ValueError, match="epoch index"):
        budget.epoch(0)


def test_an_epochs_place_is_kept_when_a_later_version_opens() -> None:
    before = epoch_order({"v2": 20.0, "v1": 10.0})
    after = epoch_order({"v2": 20.0, "v1": 10.0, "v3": 30.0})
    assert before == {"v1": 1, "v2": 2}
    assert after == before | {"v3": 3}
