"""A quantile of values that come in units — the latencies of a user's or a tenant's operations
— with a standard error over the units (pure: values in, an estimate out).

Operations of one unit resemble each other (a tenant with long documents is slow on all of
them), so the operations of an experiment arm are not independent draws and an order-statistic
standard error that treats them as such is too small: with 200 tenants a p50 interval so made
covers about 79 % where 95 % is promised. Here the units are what is independent.

**The quantile.** With the distinct values v₁ < … < v_K, each holding cₖ of the N values, the
mid-distribution function (Parzen 2004) at vₖ is G(vₖ) = (c₁ + … + cₖ₋₁ + cₖ/2) / N, and G is
linear between those knots. The q-quantile is G⁻¹(q): Hazen's definition (Hyndman & Fan 1996,
type 5) for distinct values, and for tied ones (latencies rounded to 1 s) a value that moves
smoothly with the mass on either side, not a step. Below v₁ and above v_K, G runs to 0 and 1
half a gap beyond them (v₁ - (v₂ - v₁)/2, never below 0, and v_K + (v_K - v_{K-1})/2), the
cells a rounded value stands for, so G⁻¹ is strictly increasing on [0, 1] whenever there are two
distinct values: ties never make a zero-width interval. One distinct value has no spread.

**Its standard error** (Woodruff 1952, with the empirical distribution's variance over units):
G(x) at the quantile x is a ratio of sums over units, Σᵢ cᵢ(x) / Σᵢ nᵢ, where unit i holds nᵢ
values and cᵢ(x) is its share of G's count (1 for a value below x, 1/2 for one at a knot at x,
as interpolated between the knots either side). Its variance is the delta method's over the m
units (the cluster-robust variance of a ratio over units, as a rate's),
Σᵢ (dᵢ / (1 - hᵢ))² / N² · m/(m - 1) with dᵢ = cᵢ - q·nᵢ and hᵢ = nᵢ/N, the unit's share of the
values: dividing by 1 - hᵢ is the jackknife's correction for a unit that weighs much (CR3,
Bell & McCaffrey 2002), without which a batch user or a big tenant, whose own residual hides
part of its pull, left the standard error ~15-30 % short of the true spread at p95. It is
floored at q(1 - q)/N, what independent values would give (a few units must not look more
certain than as many independent operations). The interval [q - s, q + s] in probability,
s its standard error, maps through G⁻¹ to values, and half the log of their ratio is the
standard error of the log quantile — the slope of G⁻¹ where it matters, with no density to
estimate and no bandwidth to choose.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

LOW_FLOOR = 1e-3
"""A lower end at 0 s counts as this share of the quantile: a zero latency must not make the
log's spread infinite."""


@dataclass(frozen=True, slots=True)
class UnitQuantile:
    """A quantile of grouped values and the standard error of its log."""

    value: float
    """The q-quantile, G⁻¹(q) (see the module docstring)."""
    log_se: float | None
    """Standard error of log(value) over units; None when the value is 0 (no log), every value
    is the same (no spread), or there are fewer than 2 units."""
    values: int
    """How many values (operations) there are."""
    units: int
    """How many units hold them."""


class _Mid:
    """The mid-distribution function G of sorted values, evaluated where it is needed (a look
    asks for three points of it, so its knots are found by bisection, not listed)."""

    def __init__(self, ordered: Sequence[float]) -> None:
        self.ordered = ordered
        self.n = n = len(ordered)
        first, last = ordered[0], ordered[-1]
        self.spread = first != last
        """Whether there are two distinct values (else G has no slope anywhere)."""
        self.left = self.right = first
        if self.spread:
            second = ordered[bisect.bisect_right(ordered, first)]
            before_last = ordered[bisect.bisect_left(ordered, last) - 1]
            self.left = max(0.0, first - (second - first) / 2)
            self.right = last + (last - before_last) / 2
        self._twice_n = 2 * n

    def at(self, v: float) -> float:
        """G(v) for a value v of the sample."""
        o = self.ordered
        return (bisect.bisect_left(o, v) + bisect.bisect_right(o, v)) / self._twice_n

    def inverse(self, u: float) -> tuple[float, float, float, float]:
        """(G⁻¹(u), the segment's left knot a, its right knot b, the weight w of b), for u in
        [0, 1]; a is the left extension below the smallest value, b the right one above the
        largest."""
        o, n = self.ordered, self.n
        v = o[min(n - 1, max(0, int(u * n)))]
        gv = self.at(v)
        while True:
            if gv > u:  # the segment is below v
                j = bisect.bisect_left(o, v)
                if j == 0:
                    a, ga, b, gb = self.left, 0.0, v, gv
                    break
                previous = o[j - 1]
                gp = self.at(previous)
                if gp <= u:
                    a, ga, b, gb = previous, gp, v, gv
                    break
                v, gv = previous, gp
                continue
            j = bisect.bisect_right(o, v)
            if j == n:
                a, ga, b, gb = v, gv, self.right, 1.0
                break
            following = o[j]
            gf = self.at(following)
            if gf > u:
                a, ga, b, gb = v, gv, following, gf
                break
            v, gv = following, gf
        w = min(max((u - ga) / (gb - ga), 0.0), 1.0) if gb > ga else 0.0
        return a + w * (b - a), a, b, w


def _counts(ordered: Sequence[float], a: float, b: float) -> tuple[int, int, int, int]:
    """Of sorted values: how many are below a, at a, strictly between a and b, at b."""
    la = bisect.bisect_left(ordered, a)
    ra = bisect.bisect_right(ordered, a, la)
    lb = bisect.bisect_left(ordered, b, ra)
    rb = bisect.bisect_right(ordered, b, lb)
    return la, ra - la, lb - ra, rb - lb


def unit_quantile(
    groups: Sequence[Sequence[float]], q: float, ordered: Sequence[float] | None = None
) -> UnitQuantile | None:
    """The q-quantile (0 < q < 1) of every value of `groups` (one sequence per unit, values
    finite and >= 0, in any order) and the standard error of its log over the units (see the
    module docstring). `ordered`, all the values sorted, may be passed when the caller has it
    (two quantiles of one sample share a sort). None without any value. Raises ValueError for
    q outside (0, 1)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"q must be in (0, 1), got {q}")
    if ordered is None:
        ordered = sorted(v for g in groups for v in g)
    n = len(ordered)
    if n == 0:
        return None
    held = [g for g in groups if g]
    m = len(held)
    mid = _Mid(ordered)
    if not mid.spread:
        return UnitQuantile(ordered[0], None, n, m)
    point, a, b, w = mid.inverse(q)
    if point <= 0 or m < 2:
        return UnitQuantile(point, None, n, m)
    # Each value's part of G(point) = (1 - w)·G(a) + w·G(b), a < b consecutive knots: 1 below
    # a, 1/2 + w/2 at a, w between, w/2 at b, 0 above.
    at_a, at_b = 0.5 + 0.5 * w, 0.5 * w
    parts = (1.0, at_a, w, at_b)
    # Units of one value, the common case, counted together: their parts take five values.
    singles = sorted([g[0] for g in held if len(g) == 1])
    counted = _counts(singles, a, b)
    lone = 1.0 - 1.0 / n
    spread = math.fsum(
        [c * ((p - q) / lone) ** 2 for c, p in zip(counted, parts, strict=True)]
        + [(len(singles) - sum(counted)) * (q / lone) ** 2]
    )
    for g in held:
        size = len(g)
        if size == 1:
            continue
        below, at_low, between, at_high = _counts(sorted(g), a, b)
        d = below + at_a * at_low + w * between + at_b * at_high - q * size
        d /= 1.0 - size / n
        spread += d * d
    variance = max(spread / (n * n) * m / (m - 1), q * (1 - q) / n)
    s = math.sqrt(variance)
    low = mid.inverse(max(0.0, q - s))[0]
    high = mid.inverse(min(1.0, q + s))[0]
    floor = point * LOW_FLOOR
    log_se = (math.log(max(high, floor)) - math.log(max(low, floor))) / 2
    return UnitQuantile(point, log_se, n, m)
