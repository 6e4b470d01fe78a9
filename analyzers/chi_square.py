"""The chi-square distribution's upper tail, for goodness-of-fit tests (pure: numbers in, a
probability out).

`survival(x, df)` is P(X > x) for X chi-square with `df` degrees of freedom: the regularised upper
incomplete gamma function Q(df/2, x/2). Below x/2 = df/2 + 1 it is 1 minus the power series of
the lower function, above it the continued fraction of the upper one, evaluated by the modified
Lentz method; each converges fast on its side (Abramowitz & Stegun 6.5.29 and 6.5.31; the
standard split, as in Press et al., Numerical Recipes, §6.2).
"""

from __future__ import annotations

import math

_EPS = 1e-15
_TINY = 1e-300
_STEPS = 10_000


def survival(x: float, df: int) -> float:
    """P(X > x) for X chi-square with `df` >= 1 degrees of freedom; 1 for x <= 0, 0 for x = inf.
    Raises ValueError for df < 1 or a NaN x."""
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    if math.isnan(x):
        raise ValueError("x is NaN")
    if x <= 0:
        return 1.0
    if math.isinf(x):
        return 0.0
    a, half = df / 2.0, x / 2.0
    if half < a + 1.0:
        return max(0.0, 1.0 - _lower_series(a, half))
    return _upper_fraction(a, half)


def _log_prefactor(a: float, x: float) -> float:
    """log(x^a · e^-x / Γ(a))."""
    return a * math.log(x) - x - math.lgamma(a)


def _lower_series(a: float, x: float) -> float:
    """P(a, x) by its power series."""
    term = total = 1.0 / a
    denominator = a
    for _ in range(_STEPS):
        denominator += 1.0
        term *= x / denominator
        total += term
        if abs(term) < abs(total) * _EPS:
            break
    return total * math.exp(_log_prefactor(a, x))


def _upper_fraction(a: float, x: float) -> float:
    """Q(a, x) by its continued fraction (modified Lentz)."""
    b = x + 1.0 - a
    c = 1.0 / _TINY
    d = 1.0 / b
    h = d
    for i in range(1, _STEPS):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = _TINY if abs(d) < _TINY else d
        c = b + an / c
        c = _TINY if abs(c) < _TINY else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            break
    return math.exp(_log_prefactor(a, x)) * h
