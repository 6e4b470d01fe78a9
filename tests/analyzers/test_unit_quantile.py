"""A quantile over units: independent values give the order-statistic spread, units of alike
values widen it, ties and zeros never give a zero-width or infinite spread."""

from __future__ import annotations

import math
import random

import pytest

from analyzers.unit_quantile import unit_quantile


def _lognormal(rng: random.Random, n: int, sigma: float = 0.5) -> list[float]:
    return [rng.lognormvariate(0.0, sigma) for _ in range(n)]


def test_independent_values_give_the_asymptotic_spread_of_the_log_median() -> None:
    # Lognormal(0, s): median 1, density there 1/(s√(2π)), so SE(log median) = ½s√(2π)/√n.
    rng = random.Random(3)
    values = _lognormal(rng, 4000)
    estimate = unit_quantile([(v,) for v in values], 0.5)
    assert estimate is not None and estimate.log_se is not None
    assert estimate.value == pytest.approx(1.0, abs=0.05)
    expected = 0.5 * 0.5 * math.sqrt(2 * math.pi) / math.sqrt(4000)
    assert estimate.log_se == pytest.approx(expected, rel=0.15)
    assert (estimate.values, estimate.units) == (4000, 4000)


def test_units_of_alike_values_count_as_one_each() -> None:
    # 800 units of 5 identical values carry the information of 800 values, not 4,000.
    rng = random.Random(4)
    values = _lognormal(rng, 800)
    alike = unit_quantile([(v,) * 5 for v in values], 0.5)
    apart = unit_quantile([(v,) for v in values for _ in range(5)], 0.5)
    assert alike is not None and apart is not None
    assert alike.log_se is not None and apart.log_se is not None
    assert alike.value == apart.value
    assert alike.log_se / apart.log_se == pytest.approx(math.sqrt(5), rel=0.2)


def test_fewer_alike_units_never_look_surer_than_independent_values() -> None:
    rng = random.Random(5)
    groups = [tuple(_lognormal(rng, 3)) for _ in range(300)]
    grouped = unit_quantile(groups, 0.95)
    flat = unit_quantile([(v,) for g in groups for v in g], 0.95)
    assert grouped is not None and flat is not None
    assert grouped.log_se is not None and flat.log_se is not None
    assert grouped.log_se >= flat.log_se * 0.999


def test_rounded_latencies_still_have_a_spread_and_a_quantile_that_moves_with_the_mass() -> None:
    # Latencies rounded to 1 s: 60 % at 1 s, 40 % at 2 s, and the same with 2 s more common.
    fast = unit_quantile([(1.0,)] * 600 + [(2.0,)] * 400, 0.5)
    slow = unit_quantile([(1.0,)] * 400 + [(2.0,)] * 600, 0.5)
    assert fast is not None and slow is not None
    assert fast.log_se is not None and fast.log_se > 0
    assert slow.log_se is not None and slow.log_se > 0
    assert 1.0 < fast.value < slow.value < 2.0
    tail = unit_quantile([(1.0,)] * 900 + [(2.0,)] * 100, 0.95)
    assert tail is not None and tail.log_se is not None and tail.log_se > 0


def test_one_value_zeros_and_nothing() -> None:
    same = unit_quantile([(1.5,)] * 50, 0.5)
    assert same is not None and same.value == 1.5 and same.log_se is None
    zeros = unit_quantile([(0.0,)] * 80, 0.5)
    assert zeros is not None and zeros.value == 0.0 and zeros.log_se is None
    # 60 % at 0 s: the mid-distribution puts the median between the two values, with a spread.
    mostly = unit_quantile([(0.0,)] * 60 + [(1.0,)] * 40, 0.5)
    assert mostly is not None and mostly.value == pytest.approx(0.4)
    assert mostly.log_se is not None and 0 < mostly.log_se < math.inf
    lone = unit_quantile([(1.0, 2.0, 3.0)], 0.5)
    assert lone is not None and lone.value == 2.0 and lone.log_se is None and lone.units == 1
    assert unit_quantile([(), ()], 0.5) is None
    some_zeros = unit_quantile([(0.0,)] * 40 + [(1.0 + i / 100,) for i in range(60)], 0.5)
    assert some_zeros is not None and some_zeros.log_se is not None
    assert math.isfinite(some_zeros.log_se)


@pytest.mark.parametrize("q", [0.0, 1.0, -0.1, 2.0])
def test_a_quantile_outside_the_open_interval_is_refused(q: float) -> None:
    with pytest.raises(ValueError, match="q must be"):
        unit_quantile([(1.0,)], q)
