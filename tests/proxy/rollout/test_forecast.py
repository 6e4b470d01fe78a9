"""The step simulation behind a forecast: a metric without noise passes where its bound does,
noise spreads the time around and beyond it, and the same seed gives the same forecast."""

from __future__ import annotations

import math

import pytest

from analyzers.sequential import offset
from proxy.rollout.forecast import Channel, MetricCurve, quantile, sigma_for, simulate_step

BETA = 0.05


def curve(sigma: float, margin: float = 0.02) -> MetricCurve:
    return MetricCurve("error_rate", 0.0, sigma, margin, margin, 50)


def test_noise_spreads_the_pass_around_where_the_noise_free_bound_meets_the_margin() -> None:
    # A margin the bound reaches at about 400 answers; arrivals of 1 a second; no look delay.
    sigma = 0.1
    need = next(n for n in range(50, 10_000) if offset(sigma / math.sqrt(n), 0.02, BETA) <= 0.02)
    times = simulate_step(
        [Channel(1.0, (curve(sigma),), need)], beta=BETA, interval_s=1e-9, step_interval_s=0,
        runs=400, seed=3,
    )  # fmt: skip
    ordered = sorted(times)
    # Noise moves the pass both ways around the noise-free need, and the tail is long.
    assert 0.6 * need < quantile(ordered, 0.5) < 1.6 * need
    assert quantile(ordered, 0.9) > quantile(ordered, 0.5) * 1.1


def test_every_metric_must_pass_at_once_so_more_metrics_take_longer() -> None:
    one = simulate_step(
        [Channel(1.0, (curve(0.1),), 400)], beta=BETA, interval_s=5, step_interval_s=0, seed=1
    )
    three = simulate_step(
        [Channel(1.0, (curve(0.1),) * 3, 400)], beta=BETA, interval_s=5, step_interval_s=0, seed=1
    )
    assert quantile(sorted(three), 0.5) > quantile(sorted(one), 0.5)


def test_a_step_lasts_at_least_its_interval_and_the_seed_fixes_the_answer() -> None:
    args = ([Channel(10.0, (curve(0.1),), 400)],)
    kwargs = {"beta": BETA, "interval_s": 5.0, "step_interval_s": 3600.0, "seed": 7}
    times = simulate_step(*args, **kwargs)  # type: ignore[arg-type]
    assert min(times) == 3600.0
    assert simulate_step(*args, **kwargs) == times  # type: ignore[arg-type]


def test_the_noise_is_read_back_from_a_bounds_width() -> None:
    se, n = 0.004, 500
    width = offset(se, 0.02, BETA)
    assert sigma_for(width, n, 0.02, BETA) == pytest.approx(se * math.sqrt(n), rel=1e-6)
    assert sigma_for(0.0, n, 0.02, BETA) == 0.0
