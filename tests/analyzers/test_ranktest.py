"""Mann-Whitney U and the order-statistic bounds of a quantile, checked against hand counts."""

from __future__ import annotations

import math
import random

import pytest

from analyzers.ranktest import mann_whitney, quantile_bounds


def test_u_counts_the_pairs_where_the_candidate_is_larger_and_half_the_ties() -> None:
    primary, candidate = [1.0, 2.0, 3.0], [2.0, 4.0]
    pairs = sum(1.0 if c > p else 0.5 if c == p else 0.0 for p in primary for c in candidate)
    assert mann_whitney(primary, candidate).u == pairs == 4.5


def test_a_clearly_slower_candidate_is_significant_and_a_faster_one_is_not() -> None:
    rng = random.Random(7)
    primary = sorted(rng.gauss(100, 10) for _ in range(200))
    slower = sorted(rng.gauss(120, 10) for _ in range(200))
    faster = sorted(rng.gauss(80, 10) for _ in range(200))
    assert mann_whitney(primary, slower).p_value < 1e-10
    assert mann_whitney(primary, faster).p_value > 0.99


def test_identical_arms_give_no_evidence() -> None:
    same = [5.0] * 20
    test = mann_whitney(same, same)
    assert (test.z, test.p_value) == (0.0, 1.0)
    sample = sorted(random.Random(1).random() for _ in range(100))
    assert mann_whitney(sample, sample).p_value >= 0.5


def test_an_empty_arm_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one value"):
        mann_whitney([], [1.0])


def test_quantile_bounds_bracket_the_quantile_and_say_when_data_cannot_bound_it() -> None:
    values = [float(i) for i in range(1, 101)]  # the p50 is 50
    low, high = quantile_bounds(values, 0.5, 1.96)
    assert low < 50 < high and (low, high) == (40.0, 60.0)
    low, high = quantile_bounds(values[:5], 0.95, 1.96)
    assert high == math.inf  # five values cannot bound a p95 from above
    assert quantile_bounds([], 0.5, 1.96) == (-math.inf, math.inf)
