"""The statistical judge: each metric passes on equal arms, fails on a clear regression and is
inconclusive on too few samples; the rank test against a hand-computed example; the look
correction; determinism."""

from __future__ import annotations

import math
import random

import pytest
from pydantic import ValidationError

from analyzers.judge_stats import judge
from analyzers.ranktest import mann_whitney, quantile_bounds
from analyzers.sequential import look_alpha, spent_alpha, z_for
from analyzers.verdicts import ArmWindow, MetricVerdict, Outcome, Thresholds

TH = Thresholds()


def _lognormal(seed: int, n: int, median: float = 0.8, sigma: float = 0.5) -> tuple[float, ...]:
    rng = random.Random(seed)
    return tuple(median * math.exp(sigma * rng.gauss(0.0, 1.0)) for _ in range(n))


def _arm(
    seed: int,
    n: int = 2000,
    errors: float = 0.02,
    check_pass: float = 0.98,
    corrected: float = 0.05,
    disagree: float = 0.10,
    sigma: float = 0.5,
    median: float = 0.8,
    cost: float = 0.002,
) -> ArmWindow:
    """An arm of n requests with the given rates (exact counts, no sampling noise on rates)."""
    samples = _lognormal(seed, n, median, sigma)
    return ArmWindow(
        requests=n,
        errors=round(n * errors),
        latencies_s=samples,
        ttfts_s=tuple(v / 4 for v in samples),
        costs_usd=tuple(cost * (0.5 + v) for v in _lognormal(seed + 1, n)),
        checks={"json_schema": (round(n * check_pass), n)},
        corrections=(round(n * corrected), n),
        agreement=(round(n * disagree), n),
        noise=(round(n * disagree), n),
    )


def _by_metric(verdicts: list[MetricVerdict]) -> dict[str, MetricVerdict]:
    return {v.metric: v for v in verdicts}


ALL_METRICS = {
    "error_rate",
    "check_pass_rate:json_schema",
    "correction_rate",
    "disagreement",
    "latency_p50",
    "latency_p95",
    "ttft_p50",
    "ttft_p95",
    "cost_per_request",
}


def test_equal_arms_pass_every_metric() -> None:
    verdicts = _by_metric(judge(_arm(1), _arm(2), TH, look=20))
    assert set(verdicts) == ALL_METRICS
    for verdict in verdicts.values():
        assert verdict.outcome is Outcome.PASS, verdict
        assert verdict.n_primary == verdict.n_candidate == 2000


@pytest.mark.parametrize(
    ("metric", "candidate"),
    [
        ("error_rate", _arm(2, errors=0.10)),
        ("check_pass_rate:json_schema", _arm(2, check_pass=0.80)),
        ("correction_rate", _arm(2, corrected=0.15)),
        ("disagreement", _arm(2, disagree=0.30)),
        ("latency_p50", _arm(2, median=1.6)),
        ("ttft_p50", _arm(2, median=1.6)),
        ("latency_p95", _arm(2, sigma=0.75)),
        ("ttft_p95", _arm(2, sigma=0.75)),
        ("cost_per_request", _arm(2, cost=0.003)),
    ],
)
def test_a_clear_regression_fails_its_metric(metric: str, candidate: ArmWindow) -> None:
    verdict = _by_metric(judge(_arm(1), candidate, TH, look=1))[metric]
    assert verdict.outcome is Outcome.FAIL, verdict
    assert verdict.estimate is not None and verdict.estimate > verdict.threshold
    assert verdict.reason


def test_a_heavier_tail_under_the_same_median_fails_p95_but_not_p50() -> None:
    verdicts = _by_metric(judge(_arm(1), _arm(2, sigma=0.75), TH, look=1))
    assert verdicts["latency_p95"].outcome is Outcome.FAIL
    assert verdicts["latency_p50"].outcome is not Outcome.FAIL


@pytest.mark.parametrize("metric", sorted(ALL_METRICS))
def test_too_few_samples_is_inconclusive_never_fail(metric: str) -> None:
    # Ten requests each, the candidate awful on every metric.
    bad = _arm(2, n=10, errors=0.9, check_pass=0.1, corrected=0.9, disagree=0.9, median=8.0)
    verdict = _by_metric(judge(_arm(1, n=10), bad, TH, look=1))[metric]
    assert verdict.outcome is Outcome.INCONCLUSIVE
    assert "too few samples" in verdict.reason


def test_empty_windows_give_no_verdicts() -> None:
    # A look at a route with no traffic yet in the window (or none recorded yet, after a store
    # outage): nothing to judge, nothing that could fail.
    assert judge(ArmWindow(0, 0), ArmWindow(0, 0), TH, look=3) == []
    with pytest.raises(ValueError, match="1-based"):
        judge(ArmWindow(0, 0), ArmWindow(0, 0), TH, look=0)


def test_a_small_real_difference_within_the_margin_does_not_fail() -> None:
    # Error rate 2% -> 2.5% on 20,000 requests: real, but within the 1-point margin.
    primary = ArmWindow(requests=20_000, errors=400)
    candidate = ArmWindow(requests=20_000, errors=500)
    (verdict,) = judge(primary, candidate, TH, look=5)
    assert verdict.outcome is Outcome.PASS
    assert verdict.estimate == pytest.approx(0.005)


def test_mann_whitney_matches_a_hand_computed_example() -> None:
    # Primary 1, 2, 3; candidate 2, 4, 5. U = (1 + 0.5) + 3 + 3 = 7.5; mean 4.5.
    # One tie group of 2: sum(t^3 - t) = 6; N = 6.
    # var = 3*3/12 * (7 - 6/30) = 5.1; z = (7.5 - 4.5 - 0.5) / sqrt(5.1) = 1.107019.
    result = mann_whitney([1.0, 2.0, 3.0], [2.0, 4.0, 5.0])
    assert result.u == 7.5
    assert result.z == pytest.approx(2.5 / math.sqrt(5.1))
    assert result.p_value == pytest.approx(0.134143, abs=1e-6)


def test_mann_whitney_without_ties_and_in_the_other_direction() -> None:
    # Candidate all below: U = 0; var = 4*4/12 * 9 = 12; z = (0 - 8 + 0.5) / sqrt(12).
    result = mann_whitney([5.0, 6.0, 7.0, 8.0], [1.0, 2.0, 3.0, 4.0])
    assert result.u == 0
    assert result.z == pytest.approx(-7.5 / math.sqrt(12))
    assert result.p_value == pytest.approx(0.984809, abs=1e-6)
    assert mann_whitney([1.0, 1.0], [1.0, 1.0]).p_value == 1.0


def test_quantile_bounds_are_order_statistics_around_the_quantile() -> None:
    values = [float(v) for v in range(1, 101)]
    # n*q = 50, spread = 1.96 * 5 = 9.8 -> ranks 40 and 60.
    assert quantile_bounds(values, 0.5, 1.96) == (40.0, 60.0)
    low, high = quantile_bounds(values[:10], 0.95, 1.96)
    assert low == 8.0 and high == math.inf


def test_the_look_correction_is_strictest_on_early_looks() -> None:
    levels = [look_alpha(k, 0.01, 180) for k in (1, 2, 6, 30, 180)]
    assert levels == sorted(levels)
    assert z_for(levels[0]) > z_for(levels[-1]) > z_for(0.01)
    # The increments add up to the spending function, which never exceeds the budget.
    assert sum(look_alpha(k, 0.01, 180) for k in range(1, 501)) == pytest.approx(
        spent_alpha(500, 0.01, 180)
    )
    assert spent_alpha(10**9, 0.01, 180) <= 0.01
    # Split over metrics (Bonferroni).
    assert look_alpha(3, 0.01, 180, metrics=4) == pytest.approx(look_alpha(3, 0.01, 180) / 4)


def test_an_early_look_does_not_fail_what_a_later_look_with_the_same_data_fails() -> None:
    # Same borderline data at look 1 and look 180: the early look demands more evidence.
    primary = ArmWindow(requests=400, errors=8, checks={"c": (392, 400)})
    candidate = ArmWindow(requests=400, errors=8, checks={"c": (334, 400)})
    early = _by_metric(judge(primary, candidate, TH, look=1))["check_pass_rate:c"]
    late = _by_metric(judge(primary, candidate, TH, look=180))["check_pass_rate:c"]
    assert early.alpha < late.alpha
    assert early.outcome is Outcome.INCONCLUSIVE
    assert late.outcome is Outcome.FAIL


def test_the_judge_is_deterministic() -> None:
    first = judge(_arm(1), _arm(2, sigma=0.7), TH, look=3)
    second = judge(_arm(1), _arm(2, sigma=0.7), TH, look=3)
    assert first == second


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="requests/errors"):
        ArmWindow(requests=5, errors=6)
    with pytest.raises(ValueError, match=r"checks\.c"):
        ArmWindow(requests=5, errors=0, checks={"c": (6, 5)})
    with pytest.raises(ValueError, match="look is 1-based"):
        judge(ArmWindow(10, 0), ArmWindow(10, 0), TH, look=0)
    with pytest.raises(ValidationError, match="error_rate_increase"):
        Thresholds(error_rate_increase=-0.1)
    with pytest.raises(ValidationError):
        Thresholds.model_validate({"no_such_key": 1})
