"""The chi-square upper tail against closed forms and published critical values."""

from __future__ import annotations

import itertools
import math

import pytest

from analyzers.chi_square import survival


@pytest.mark.parametrize("x", [0.01, 0.5, 1.0, 3.0, 7.5, 20.0, 60.0])
def test_two_degrees_of_freedom_is_an_exponential(x: float) -> None:
    assert survival(x, 2) == pytest.approx(math.exp(-x / 2), rel=1e-10)


@pytest.mark.parametrize("x", [0.01, 0.5, 1.0, 3.84, 10.0, 30.0])
def test_one_degree_of_freedom_is_a_squared_normal(x: float) -> None:
    assert survival(x, 1) == pytest.approx(math.erfc(math.sqrt(x / 2)), rel=1e-9)


@pytest.mark.parametrize(
    ("x", "df", "p"),
    [
        # critical values from the standard tables (NIST/SEMATECH e-Handbook, 1.3.6.7.4)
        (3.841, 1, 0.05),
        (10.828, 1, 0.001),
        (13.816, 2, 0.001),
        (16.266, 3, 0.001),
        (11.070, 5, 0.05),
        (29.588, 10, 0.001),
        (124.342, 100, 0.05),
    ],
)
def test_published_critical_values(x: float, df: int, p: float) -> None:
    assert survival(x, df) == pytest.approx(p, rel=2e-3)


def test_edges() -> None:
    assert survival(0.0, 3) == 1.0
    assert survival(-1.0, 3) == 1.0
    assert survival(math.inf, 3) == 0.0
    assert survival(5000.0, 3) < 1e-300
    # monotone across the switch between the series and the fraction (x/2 = df/2 + 1)
    values = [survival(x / 10, 4) for x in range(1, 200)]
    assert all(a >= b for a, b in itertools.pairwise(values))


@pytest.mark.parametrize(("x", "df"), [(1.0, 0), (math.nan, 2)])
def test_bad_arguments_are_refused(x: float, df: int) -> None:
    with pytest.raises(ValueError):
        survival(x, df)
