"""`judge(budget=...)`: a call spends only its share of the false-rollback rate, so a caller can
split one rollout's budget over several calls."""

from __future__ import annotations

import pytest

from analyzers.judge_stats import judge
from analyzers.verdicts import ArmWindow, Thresholds

TH = Thresholds()


def test_a_share_of_the_budget_scales_every_alpha_of_the_call() -> None:
    whole = judge(ArmWindow(100, 1), ArmWindow(100, 1), TH, sequences=2)
    quarter = judge(ArmWindow(100, 1), ArmWindow(100, 1), TH, sequences=2, budget=0.25)
    assert [v.alpha for v in quarter] == pytest.approx([v.alpha / 4 for v in whole])
    assert quarter[0].alpha == pytest.approx(TH.false_rollback_rate * 0.25 / 2)


def test_a_smaller_budget_needs_more_evidence_to_fail() -> None:
    # 80/800 against 8/800: fails on the whole budget, not on a millionth of it.
    bad, good = ArmWindow(800, 80), ArmWindow(800, 8)
    assert judge(good, bad, TH)[0].outcome.value == "fail"
    assert judge(good, bad, TH, budget=1e-6)[0].outcome.value != "fail"


@pytest.mark.parametrize("budget", [0.0, -0.1, 1.5])
def test_a_budget_outside_zero_to_one_is_refused(budget: float) -> None:
    with pytest.raises(ValueError, match="budget"):
        judge(ArmWindow(10, 0), ArmWindow(10, 0), TH, budget=budget)
