"""Descriptive statistics: percentiles, Wilson and Newcombe intervals, arm and agreement summaries.

Reference values are the published ones: Wilson intervals from Newcombe (1998a, Table I) and
Agresti & Coull (1998); differences from Newcombe (1998b, Table II, method 10).
"""

from __future__ import annotations

import math

import pytest

from analyzers.summary import (
    AgreementSummary,
    ArmSummary,
    Rate,
    attributable_disagreement,
    median,
    newcombe_difference,
    percentile,
    wilson_interval,
)


def test_percentile_interpolates_linearly_between_ranks() -> None:
    values = [0.4, 0.1, 0.3, 0.2]  # unsorted on purpose
    assert percentile(values, 0.5) == pytest.approx(0.25)
    assert percentile(values, 0.0) == 0.1
    assert percentile(values, 1.0) == 0.4
    # h = (4 - 1) * 0.95 = 2.85 → 0.3 + 0.85 * (0.4 - 0.3)
    assert percentile(values, 0.95) == pytest.approx(0.385)
    assert median([5.0, 1.0, 3.0]) == 3.0


def test_percentile_of_one_to_a_hundred_matches_the_type_7_definition() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == pytest.approx(50.5)
    assert percentile(values, 0.95) == pytest.approx(95.05)
    assert percentile(values, 0.99) == pytest.approx(99.01)


def test_percentile_of_nothing_is_none_and_of_equal_values_is_that_value() -> None:
    assert percentile([], 0.5) is None
    assert median([]) is None
    assert percentile([0.7] * 9, 0.99) == 0.7
    assert percentile([2.5], 0.01) == 2.5


def test_percentile_refuses_bad_input() -> None:
    with pytest.raises(ValueError):
        percentile([1.0], 1.5)
    with pytest.raises(ValueError):
        percentile([1.0, math.nan], 0.5)
    with pytest.raises(ValueError):
        percentile([1.0, math.inf], 0.5)


@pytest.mark.parametrize(
    ("successes", "n", "low", "high"),
    [
        (8, 10, 0.4902, 0.9433),  # Agresti & Coull's worked example
        (81, 263, 0.2553, 0.3662),  # Newcombe 1998a, Table I
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
        (10, 10, 0.7225, 1.0),
    ],
)
def test_wilson_interval_matches_published_values(
    successes: int, n: int, low: float, high: float
) -> None:
    got = wilson_interval(successes, n)
    assert got == pytest.approx((low, high), abs=5e-5)


def test_wilson_interval_edges_and_errors() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(0, 5)[0] == 0.0
    assert wilson_interval(5, 5)[1] == 1.0
    with pytest.raises(ValueError):
        wilson_interval(3, 2)
    with pytest.raises(ValueError):
        wilson_interval(-1, 2)


def test_rate_counts_flags_and_knows_nothing_without_observations() -> None:
    rate = Rate.count([True, False, True, True])
    assert (rate.successes, rate.n, rate.value) == (3, 4, 0.75)
    assert rate.low < 0.75 < rate.high
    empty = Rate.count([])
    assert empty.value is None
    assert (empty.low, empty.high) == (0.0, 1.0)
    assert rate.complement().successes == 1


@pytest.mark.parametrize(
    ("a", "b", "low", "high"),
    [
        ((56, 70), (48, 80), 0.0524, 0.3339),  # Newcombe 1998b, Table II, example (a)
        ((9, 10), (3, 10), 0.1705, 0.8090),  # example (c)
        ((5, 56), (0, 29), -0.0381, 0.1926),  # example (e)
        ((0, 10), (0, 20), -0.1611, 0.2775),  # example (h)
    ],
)
def test_newcombe_difference_matches_published_values(
    a: tuple[int, int], b: tuple[int, int], low: float, high: float
) -> None:
    diff = newcombe_difference(Rate.of(*a), Rate.of(*b))
    assert diff.value == pytest.approx(a[0] / a[1] - b[0] / b[1])
    assert (diff.low, diff.high) == pytest.approx((low, high), abs=5e-5)


def test_newcombe_difference_without_observations_is_unknown() -> None:
    diff = newcombe_difference(Rate.of(0, 0), Rate.of(3, 10))
    assert diff.value is None
    assert (diff.low, diff.high) == (-1.0, 1.0)
    assert not diff.significant


def test_arm_summary_from_plain_numbers() -> None:
    summary = ArmSummary.from_samples(
        durations_s=[0.4, 0.1, 0.3, 0.2],
        failed=[False, True, False, False],
        ttfts_s=[0.05, 0.07],
        costs_usd=[0.001, 0.002, 0.003, 0.002],
        tokens_in=[10, 20, 30, 40],
        tokens_out=[1, 2, 3, 4],
    )
    assert summary.count == 4
    assert summary.errors == 1
    assert summary.error_rate.value == 0.25
    assert summary.latency_p50_s == pytest.approx(0.25)
    assert summary.latency_p99_s == pytest.approx(0.397)
    assert summary.ttft_count == 2
    assert summary.ttft_p50_s == pytest.approx(0.06)
    assert summary.cost_total_usd == pytest.approx(0.008)
    assert summary.cost_per_request_usd == pytest.approx(0.002)
    assert summary.cost_per_1k_usd == pytest.approx(2.0)
    assert (summary.tokens_in, summary.tokens_out) == (100, 10)


def test_arm_summary_of_nothing() -> None:
    summary = ArmSummary.from_samples(durations_s=[], failed=[])
    assert summary.count == 0
    assert summary.latency_p50_s is None
    assert summary.ttft_p95_s is None
    assert summary.error_rate.value is None
    assert summary.cost_total_usd == 0
    assert summary.cost_per_request_usd is None
    assert summary.cost_per_1k_usd is None


def test_arm_summary_of_identical_exchanges() -> None:
    summary = ArmSummary.from_samples(
        durations_s=[0.5] * 7, failed=[False] * 7, costs_usd=[0.01] * 7
    )
    assert summary.latency_p50_s == summary.latency_p95_s == summary.latency_p99_s == 0.5
    assert summary.cost_per_1k_usd == pytest.approx(10.0)
    assert summary.error_rate.value == 0.0
    assert summary.error_rate.high == pytest.approx(wilson_interval(0, 7)[1])


def test_arm_summary_needs_one_flag_per_duration() -> None:
    with pytest.raises(ValueError):
        ArmSummary.from_samples(durations_s=[0.1, 0.2], failed=[False])


def test_agreement_counts_json_only_where_both_answers_are_json() -> None:
    agreement = AgreementSummary.from_pairs(
        exact=[True, False, False, False],
        normalized=[True, True, False, True],
        json_equal=[True, None, False, None],
    )
    assert agreement.n == 4
    assert agreement.exact.value == 0.25
    assert agreement.normalized.value == 0.75
    assert (agreement.json.successes, agreement.json.n) == (1, 2)
    assert agreement.disagreement.value == 0.25
    assert agreement.exact.low == pytest.approx(wilson_interval(1, 4)[0])


def test_disagreement_reads_the_routes_verdicts_over_the_pairs_they_apply_to() -> None:
    # Worded differently but equal in the compared fields: the route's verdict says agree.
    agreement = AgreementSummary.from_pairs(
        exact=[False, False, False],
        normalized=[False, False, True],
        json_equal=[False, None, True],
        agreed=[True, None, False],
    )
    assert (agreement.agreed.successes, agreement.agreed.n) == (1, 2)
    assert agreement.disagreement.value == 0.5
    assert agreement.normalized.value == pytest.approx(1 / 3)
    with pytest.raises(ValueError):
        AgreementSummary.from_pairs([True], [True], [None], agreed=[])


def test_agreement_of_no_pairs() -> None:
    agreement = AgreementSummary.from_pairs([], [], [])
    assert agreement.n == 0
    assert agreement.normalized.value is None
    assert agreement.json.n == 0
    with pytest.raises(ValueError):
        AgreementSummary.from_pairs([True], [], [])


def test_attributable_disagreement_subtracts_the_noise_floor() -> None:
    # The candidate disagrees on 24 of 80 (30%), the primary with itself on 8 of 80 (10%).
    candidate = AgreementSummary.from_pairs([False] * 80, [False] * 24 + [True] * 56, [None] * 80)
    noise = AgreementSummary.from_pairs([False] * 80, [False] * 8 + [True] * 72, [None] * 80)
    diff = attributable_disagreement(candidate, noise)
    assert diff.value == pytest.approx(0.20)
    expected = newcombe_difference(Rate.of(24, 80), Rate.of(8, 80))
    assert (diff.low, diff.high) == (expected.low, expected.high)
    assert diff.low > 0
    assert diff.significant


def test_disagreement_within_the_noise_floor_is_not_significant() -> None:
    # 12% against a 10% noise floor on 50 pairs each: indistinguishable from noise.
    candidate = AgreementSummary.from_pairs([False] * 50, [False] * 6 + [True] * 44, [None] * 50)
    noise = AgreementSummary.from_pairs([False] * 50, [False] * 5 + [True] * 45, [None] * 50)
    diff = attributable_disagreement(candidate, noise)
    assert diff.value == pytest.approx(0.02)
    assert diff.low < 0 < diff.high
    assert not diff.significant
