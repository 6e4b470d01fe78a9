"""The Dirichlet-multinomial Bayes factor: a martingale of mean 1 under the null (what makes it
valid at every look), the beta-binomial in two categories, and refusals."""

from __future__ import annotations

import itertools
import math

import pytest

from analyzers.dirichlet_multinomial import log_bayes_factor


def _multinomial_pmf(counts: tuple[int, ...], probabilities: tuple[float, ...]) -> float:
    n = sum(counts)
    log = math.lgamma(n + 1) - sum(math.lgamma(x + 1) for x in counts)
    log += sum(x * math.log(p) for x, p in zip(counts, probabilities, strict=True))
    return math.exp(log)


@pytest.mark.parametrize("concentration", [1.0, 30.0, 300.0])
def test_under_the_null_its_mean_is_one_at_every_n(concentration: float) -> None:
    # E[BFₙ] = 1 for every n under the null: summed exactly over every outcome of n draws.
    theta = (0.5, 0.3, 0.2)
    for n in (1, 5, 12):
        total = math.fsum(
            _multinomial_pmf(c, theta) * math.exp(log_bayes_factor(c, theta, concentration))
            for c in itertools.product(range(n + 1), repeat=3)
            if sum(c) == n
        )
        assert total == pytest.approx(1.0, abs=1e-9)


def test_two_categories_give_the_beta_binomial_against_the_binomial() -> None:
    k, p, x, n = 20.0, 0.25, 7, 40
    a, b = k * p, k * (1 - p)
    beta = math.lgamma(a + x) + math.lgamma(b + n - x) - math.lgamma(a + b + n)
    beta -= math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    expected = beta - x * math.log(p) - (n - x) * math.log(1 - p)
    assert log_bayes_factor([x, n - x], [p, 1 - p], k) == pytest.approx(expected, rel=1e-12)


def test_evidence_grows_with_a_mismatch_and_not_with_a_match() -> None:
    assert log_bayes_factor([0, 0], [0.5, 0.5], 300.0) == 0.0
    assert log_bayes_factor([5000, 5000], [0.5, 0.5], 300.0) < 0
    shifted = [log_bayes_factor([n, round(n * 0.9)], [0.5, 0.5], 300.0) for n in (1000, 5000)]
    assert shifted[0] < math.log(100) < shifted[1]


@pytest.mark.parametrize(
    ("counts", "probabilities", "concentration", "match"),
    [
        ([1], [0.5, 0.5], 1.0, "same length"),
        ([-1, 1], [0.5, 0.5], 1.0, "counts"),
        ([1, 1], [0.0, 1.0], 1.0, "probabilities"),
        ([1, 1], [0.5, 0.6], 1.0, "sum to 1"),
        ([1, 1], [0.5, 0.5], 0.0, "concentration"),
        ([1, 1], [0.5, 0.5], math.inf, "concentration"),
    ],
)
def test_bad_input_is_refused(
    counts: list[int], probabilities: list[float], concentration: float, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        log_bayes_factor(counts, probabilities, concentration)
