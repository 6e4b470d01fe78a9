"""The anytime-valid bounds: the closed-form mixture against numerical integration, the bound's
coverage under repeated looks."""

from __future__ import annotations

import math
import random

import pytest

from analyzers.sequential import bounds, log_mixture, offset, upper_tail, z_for


def test_the_closed_form_mixture_matches_numerical_integration() -> None:
    s, info, tau = 40.0, 900.0, 0.05
    # ∫_{λ≥0} exp(λs - λ²I/2) · 2·N(λ; 0, tau²) dλ by the trapezoid rule.
    steps, top = 200_000, 1.0
    h = top / steps
    total = 0.0
    for i in range(steps + 1):
        lam = i * h
        weight = 0.5 if i in (0, steps) else 1.0
        density = 2 * math.exp(-lam * lam / (2 * tau * tau)) / (tau * math.sqrt(2 * math.pi))
        total += weight * math.exp(lam * s - lam * lam * info / 2) * density
    assert log_mixture(s, info, tau) == pytest.approx(math.log(total * h), rel=1e-6)


def test_the_bound_is_wider_than_a_fixed_sample_bound_and_narrows_with_evidence() -> None:
    # The price of looking at will: wider than z·se at the same level, narrower as se shrinks.
    for se in (0.1, 0.01, 0.001):
        assert offset(se, 0.05, 0.05) > z_for(0.05) * se
    assert offset(0.001, 0.05, 0.05) < offset(0.01, 0.05, 0.05) < offset(0.1, 0.05, 0.05)
    assert offset(0.0, 0.05, 0.05) == 0.0
    low, high = bounds(1.0, 0.1, 0.05, 0.05)
    assert low < 1.0 < high and high - 1.0 == pytest.approx(1.0 - low)


def test_coverage_holds_when_looking_after_every_sample() -> None:
    # Gaussian increments with mean 0; the lower bound of the running mean is checked after every
    # one of 500 samples. The share of runs where it ever rises above 0 stays within alpha (a
    # fixed-sample bound checked as often crosses in about half the runs).
    rng = random.Random(5)
    alpha, runs, crossed = 0.05, 200, 0
    for _ in range(runs):
        total = 0.0
        for n in range(1, 501):
            total += rng.gauss(0.0, 1.0)
            low, _ = bounds(total / n, 1 / math.sqrt(n), 0.2, alpha)
            if low > 0:
                crossed += 1
                break
    assert crossed / runs <= alpha


def test_normal_tail_helpers() -> None:
    for alpha in (0.05, 1e-3, 1e-9):
        assert upper_tail(z_for(alpha)) == pytest.approx(alpha, rel=1e-6)
    assert z_for(0.05) == pytest.approx(1.6449, abs=1e-4)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: offset(0.1, 0.05, 0.0), "alpha"),
        (lambda: offset(0.1, 0.0, 0.05), "tau"),
        (lambda: offset(-1.0, 0.05, 0.05), "se"),
        (lambda: offset(math.inf, 0.05, 0.05), "se"),
        (lambda: log_mixture(1.0, 0.0, 0.05), "info"),
        (lambda: z_for(0.0), "alpha"),
    ],
)
def test_bad_arguments_are_refused(call: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()  # type: ignore[operator]
