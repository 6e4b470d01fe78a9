"""The false-rollback budget spent look by look: never more than alpha over all looks and
metrics, strictest first."""

from __future__ import annotations

import pytest

from analyzers.sequential import look_alpha, spent_alpha, upper_tail, z_for


def test_the_levels_of_every_look_and_metric_sum_to_at_most_alpha() -> None:
    alpha, scale, metrics = 0.01, 180, 7
    total = sum(look_alpha(k, alpha, scale, metrics) * metrics for k in range(1, 10_001))
    assert total == pytest.approx(spent_alpha(10_000, alpha, scale))
    assert total < alpha


def test_early_looks_are_strictest_and_half_the_budget_is_spent_by_two_and_a_half_scales() -> None:
    alpha, scale = 0.01, 180
    levels = [look_alpha(k, alpha, scale) for k in range(1, 2 * scale)]
    peak = levels.index(max(levels))
    assert levels[: peak + 1] == sorted(levels[: peak + 1])  # growing, then shrinking
    assert levels[peak:] == sorted(levels[peak:], reverse=True)
    assert levels[0] < levels[peak] / 50
    assert spent_alpha(round(2.42 * scale), alpha, scale) == pytest.approx(alpha / 2, rel=0.01)
    assert spent_alpha(0, alpha, scale) == 0.0


def test_the_normal_tail_and_its_quantile_are_inverses_far_into_the_tail() -> None:
    for alpha in (0.05, 1e-3, 1e-9):
        assert upper_tail(z_for(alpha)) == pytest.approx(alpha, rel=1e-6)
    assert z_for(0.05) == pytest.approx(1.6449, abs=1e-4)


@pytest.mark.parametrize(
    ("call", "why"),
    [
        (lambda: look_alpha(0, 0.01, 10), "1-based"),
        (lambda: look_alpha(1, 0.01, 10, metrics=0), "metrics"),
        (lambda: look_alpha(1, 1.0, 10), "alpha"),
        (lambda: spent_alpha(-1, 0.01, 10), "look"),
        (lambda: spent_alpha(1, 0.01, 0), "scale"),
        (lambda: z_for(0.0), "alpha"),
    ],
)
def test_impossible_settings_are_refused(call: object, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        call()  # type: ignore[operator]
