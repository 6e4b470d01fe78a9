"""The statistical judge of a canary: candidate against primary over the same evidence, per metric
(pure: two `ArmWindow`s in, `MetricVerdict`s out; no clock, no I/O).

Every metric is an estimate of the candidate's regression on an additive scale, with a standard
error, judged against a tolerated margin by anytime-valid bounds (`analyzers.sequential`), so the
judge may look at accumulating evidence as often as it likes:

- **fail** when the lower bound at the metric's `alpha` is beyond the margin: the regression is
  real and larger than tolerated. `alpha` is the false-rollback budget split over the metrics of
  the call and the `sequences` the caller judges separately (Bonferroni);
- **pass** when the upper bound at `pass_confidence` is within the margin: non-inferiority, so a
  candidate regressed by more than the margin passes this metric at most 1 - pass_confidence of
  the time, whenever it is looked at;
- **inconclusive** otherwise, and always when either arm has fewer than the minimum samples:
  too little traffic holds a rollout, it never fails it. `needs` says how many more candidate
  answers would settle it if the estimate holds.

The scales, per metric:

- Rates (error rate, each rule check's failure rate, correction rate, share of answers with a
  severe finding, candidate-primary disagreement against the primary-primary noise floor, the
  share of rule-flip probes not followed — `rule_adaptation`): the difference of the two
  proportions. Both tests are of the one null boundary "candidate = primary + margin", so the
  standard error is the one there, at the rates the counts make most likely on it (the
  restricted maximum-likelihood estimate of Farrington & Manning and Miettinen & Nurminen): a
  candidate at the margin that happened to see few events has the spread of its true rate, not
  of its few events. When the window breaks a tally down by sticky unit (`ArmWindow.units`),
  each arm's variance is inflated by its design effect 1 + rho·Σn_i(n_i-1)/N, rho the
  intra-unit correlation pooled over both arms' per-unit sums (a beta-binomial moment
  estimator, as in cluster-randomised trials): requests of one user are not independent
  evidence. The normal test fails a rate only with at least `_NORMAL_EVENTS` effective events
  (and non-events) at the margin in the candidate's arm; an exact test (`_exact_beyond`, a
  Bernoulli mixture martingale valid at any sample size) spends a tenth of the fail budget and
  fails a canary whose exact lower bound clears the primary's exact upper bound by the margin,
  also below the minimum samples (a canary failing every request is rolled back after a dozen).
  The margin is the absolute one or, if larger, `rate_margin_relative` of the primary's rate,
  and at most half the distance from the primary's rate to 1.
- Latency and time to first token, p50 and p95: the log of the ratio of the two quantiles.
  Each arm's uncertainty is Woodruff's: the standard deviation of the empirical CDF at the
  quantile (`cdf_spread`: binomial for independent samples; with `ArmWindow.sample_units` the
  cluster-robust one over the sticky units, Σᵢ(bᵢ - q·nᵢ)²) mapped back through the arm's order
  statistics. Each side of the ratio's bound is read at the bound's own critical value (the
  candidate's upper side and the primary's lower side for the upper bound), so that a skewed or
  small sample is bounded by its own tail: a p95 with too few answers above it has no upper
  bound (it cannot pass), and a tied end of the interval lies halfway to the next recorded value
  (whole-second latencies never give a zero-width bound). The margin is the log of the ratio
  bound, or of (primary + `latency_min_increase_s`) / primary if that is larger.
- Cost per request: the log of the ratio of means; each mean is the ratio of per-unit sums
  over requests, its variance the delta method's over units (`unit_mean`), with a free and a
  double-priced pseudo-request added to each arm (a run of equal prices still has a spread).
- LLM-judge score: the mean over judged pairs of primary score minus candidate score (paired),
  its variance over units, with one pseudo-pair 4.5 points either side of the mean.
- Blind human preference (`human_preference`): per reviewed pair of the candidate against the
  primary, 1 when the reviewer preferred the candidate's answer, 0 the primary's, ½ a tie; the
  estimate is ½ minus the candidate's mean (so a regression is positive), with one preference
  each way added (as Agresti & Caffo do for rates: a run of ties still has a spread) and the
  standard error of that mean, times the design effect over units when reviews have them. The
  margin is `human_preference_drop`; fewer than `min_samples_reviews` reviews are inconclusive
  (they hold, never fail).
- Without a unit breakdown of a series, each sample is a unit of its own. With one, every
  variance over units is scaled by m/(m - 1) with m the `effective_units`, and fewer than
  `MIN_EFFECTIVE_UNITS` in either arm hold the metric.
- The adaptation floor (`rule_adaptation:min_adaptation`, when the rule sets
  `probes.min_adaptation`): one arm only, the floor minus the candidate's adaptation rate, i.e.
  its not-followed share minus 1 - floor, with the binomial standard error at the boundary
  (a not-followed share of exactly 1 - floor; times the design effect of the probes' units),
  bounded by the same confidence sequence around a margin of 0 (mixing scale `_FLOOR_TAU`). It
  fails when the adaptation's upper bound at `alpha` is below the floor, and passes when its
  lower bound at `pass_confidence` is above it.
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from analyzers.sequential import bounds, offset
from analyzers.summary import percentile
from analyzers.verdicts import (
    ArmWindow,
    MetricVerdict,
    Outcome,
    Tally,
    Thresholds,
    UnitTallies,
)

_TAU_FLOOR = {"rate": 0.01, "log": 0.05, "score": 0.25}
"""The smallest mixing scale per kind of scale, for margins of 0."""
_FLOOR_TAU = 0.1
"""The mixing scale of the adaptation floor: shortfalls of about ten points are what it is
tightest for (a memoriser's is far larger and still found within a few dozen probes)."""


@dataclass(frozen=True, slots=True)
class _Evidence:
    """One metric's estimate on its additive scale, ready to be bounded."""

    metric: str
    kind: str
    """`rate`, `log` (shown as a ratio) or `score`."""
    estimate: float
    se: float
    margin: float
    n_primary: int
    n_candidate: int
    described: str
    """The numbers, for the reason."""
    shown: float | None = None
    """The estimate as shown, when not `estimate` (a rate's raw difference)."""
    grown: Callable[[float], tuple[float, float]] | None = None
    """(estimate, se) with k times the evidence of the same quality, when that is not simply
    the estimate with se/√k (a rate's adjustment fades as it grows)."""
    tau: float | None = None
    """The confidence sequence's mixing scale, when not the margin (with its floor)."""
    bounded: Callable[[float, float], tuple[float, float]] | None = None
    """(lower, upper) at (tau, alpha), when not the estimate ± the mixture's width at `se`
    (a quantile ratio reads each side from its own order statistics); `se` then only sizes
    `needs`."""
    guard: Callable[[float], bool] | None = None
    """An exact test that fails the metric at the given level whatever the normal one says
    (a rate's hard guard); it then gets `_GUARD_SHARE` of the fail budget."""
    normal_fail: bool = True
    """Whether the normal test may fail the metric (a rate needs enough events for it)."""

    def bounds(self, tau: float, alpha: float) -> tuple[float, float]:
        if self.bounded is not None:
            return self.bounded(tau, alpha)
        return bounds(self.estimate, self.se, tau, alpha)

    def at(self, k: float) -> tuple[float, float]:
        if self.grown is not None:
            return self.grown(k)
        return self.estimate, self.se / math.sqrt(k)


@dataclass(frozen=True, slots=True)
class _Few:
    """Too few samples in either arm to judge."""

    metric: str
    threshold: float
    n_primary: int
    n_candidate: int
    need: int
    detail: str = ""
    guard: Callable[[float], bool] | None = None
    """As `_Evidence.guard`: too few samples for the normal test, not for an exact one."""
    estimate: float | None = None
    """The estimate, for a verdict of the guard."""


def _agresti_caffo(events: float, n: float) -> tuple[float, float]:
    """(adjusted proportion, its variance)."""
    adjusted = (events + 1) / (n + 2)
    return adjusted, adjusted * (1 - adjusted) / (n + 2)


_GUARD_SHARE = 0.1
"""The share of a rate's fail budget spent on its exact guard (`_exact_beyond`); the normal
test spends the rest."""
_NORMAL_EVENTS = 30.0
"""The normal test of a rate's fail side needs this many effective events (and non-events) in
the candidate's arm at the margin: below it the binomial's right tail is heavier than the
normal's at the small levels the budget is split into, and the exact guard alone decides."""
_MARGIN_CAP = 0.5
"""A rate's margin is at most this share of the distance from the primary's rate to 1, so a
candidate worse than a high-rate primary can still be shown worse (0.8 + 0.2 would be 1)."""


@dataclass(frozen=True, slots=True)
class _Clusters:
    """One arm's per-unit breakdown of a tally, reduced to what the variance needs."""

    squares: float
    """Σ n_i(n_i - 1) over its units: 0 when every unit made one observation."""
    residual: float
    """Σ (k_i - p̂·n_i)², p̂ the arm's rate."""
    centred: float
    """Σ n_i² / N, for the moment estimator's bias (one unit's own share of p̂)."""
    cubes: float
    """Σ n_i²(n_i - 1) / N, likewise."""
    units: int


def _clusters(per_unit: UnitTallies | None, events: float, n: float) -> _Clusters | None:
    """None when there is no breakdown or every unit is one observation (independent)."""
    if not per_unit or not n:
        return None
    squares = math.fsum(m * (m - 1) for _, m in per_unit)
    if not squares:
        return None
    p = events / n
    return _Clusters(
        squares,
        math.fsum((k - p * m) ** 2 for k, m in per_unit),
        math.fsum(m * m for _, m in per_unit) / n,
        math.fsum(m * m * (m - 1) for _, m in per_unit) / n,
        len(per_unit),
    )


def _icc(arms: Sequence[tuple[_Clusters | None, float, float]]) -> float:
    """The intra-unit correlation rho of a tally, pooled over both arms (Donner & Klar's
    cluster-randomised trials: one rho for the traffic, each arm's own unit sizes): the moment
    estimator of the beta-binomial model Var(k_i) = p(1-p)·(n_i + rho·n_i(n_i-1)) from the
    per-unit residuals, corrected for p̂ being estimated from the same units (a dominant unit's
    residual is largely absorbed by its own arm's p̂). In [0, 1]; 0 without any breakdown."""
    observed = expected = slope = 0.0
    for c, k, n in arms:
        if c is None or not 0 < k < n:
            continue
        p = k / n
        observed += c.residual / (p * (1 - p))
        expected += n - c.centred
        slope += c.squares - 2 * c.cubes + c.centred * c.squares / n
    if slope <= 0:
        return 0.0
    return min(1.0, max(0.0, (observed - expected) / slope))


@dataclass(frozen=True, slots=True)
class _Boundary:
    """The null boundary of a rate, p_c = p_p + m(p_p) with the margin
    m(p) = min(max(absolute, relative·p), cap·(1 - p)): three lines p_c = a + b·p_p, the one
    with the smallest value ruling where the max of the first two is above the cap."""

    absolute: float
    relative: float

    def lines(self) -> tuple[tuple[float, float, float, float], ...]:
        """(a, b, from p_p, to p_p) per piece of the boundary within [0, 1]."""
        pieces: list[tuple[float, float, float, float]] = []
        knee = self.absolute / self.relative if self.relative > 0 else 1.0
        for a, b, low, high in (
            (self.absolute, 1.0, 0.0, min(1.0, knee)),
            (0.0, 1.0 + self.relative, min(1.0, knee), 1.0),
        ):
            # where this piece is above the cap p + cap·(1-p), the cap rules
            cut = (_MARGIN_CAP - a) / (b - 1.0 + _MARGIN_CAP) if b - 1.0 + _MARGIN_CAP else 1.0
            if b - 1.0 + _MARGIN_CAP > 0:
                if low < min(high, cut):
                    pieces.append((a, b, low, min(high, cut)))
                if max(low, cut) < high:
                    pieces.append((_MARGIN_CAP, 1.0 - _MARGIN_CAP, max(low, cut), high))
            else:
                pieces.append((a, b, low, high))
        return tuple(p for p in pieces if p[2] < p[3])

    def margin(self, p: float) -> float:
        return min(max(self.absolute, self.relative * p), _MARGIN_CAP * (1.0 - p))

    def slope(self, p: float) -> float:
        """d(p_p + m(p_p))/dp_p at p (the side of a kink the margin's formula takes)."""
        capped = _MARGIN_CAP * (1.0 - p)
        if max(self.absolute, self.relative * p) >= capped:
            return 1.0 - _MARGIN_CAP
        return 1.0 + self.relative if self.relative * p > self.absolute else 1.0


def _log_likelihood(k: float, n: float, p: float) -> float:
    if (k and p <= 0.0) or (n - k and p >= 1.0):
        return -math.inf
    return (k * math.log(p) if k else 0.0) + ((n - k) * math.log1p(-p) if n - k else 0.0)


def _restricted(
    k_c: float, n_c: float, k_p: float, n_p: float, boundary: _Boundary
) -> tuple[float, float]:
    """(candidate's, primary's) rate on the null boundary that is most likely given the counts:
    the restricted maximum-likelihood estimate of Farrington & Manning (1990) and Miettinen &
    Nurminen (1985), for a difference (p_c = p_p + a), a ratio (p_c = (1+r)·p_p) and the cap,
    whichever rules at the primary's rate. On each line p_c = a + b·p_p the log-likelihood is
    concave in p_p, so its slope is bisected; the best of the pieces wins."""
    best = (-math.inf, 0.0, 0.0)
    for a, b, low, high in boundary.lines():
        # p_c must stay in [0, 1] on the piece
        lo = max(low, -a / b if b > 0 else low)
        hi = min(high, (1.0 - a) / b if b > 0 else high)
        if lo > hi:
            continue

        def slope(p: float, a: float = a, b: float = b) -> float:
            q = a + b * p
            return (
                b * ((k_c / q if k_c else 0.0) - ((n_c - k_c) / (1 - q) if n_c - k_c else 0.0))
                + (k_p / p if k_p else 0.0)
                - ((n_p - k_p) / (1 - p) if n_p - k_p else 0.0)
            )

        x, y = lo, hi
        for _ in range(60):
            mid = (x + y) / 2
            q = a + b * mid
            if mid <= 0.0 or q <= 0.0:
                x = mid
            elif mid >= 1.0 or q >= 1.0:
                y = mid
            elif slope(mid) > 0:
                x = mid
            else:
                y = mid
            if y - x < 1e-13:
                break
        for p in ((x + y) / 2, lo, hi):
            q = min(1.0, max(0.0, a + b * p))
            value = _log_likelihood(k_c, n_c, q) + _log_likelihood(k_p, n_p, p)
            if value > best[0]:
                best = (value, q, p)
    return best[1], best[2]


def _design_effect(n: float, clusters: _Clusters | None, icc: float) -> float:
    """The design effect 1 + rho·Σn_i(n_i-1)/N of an arm's units (Kish 1965): by how much its
    units' correlation inflates the binomial variance of the ratio estimator Σk/Σn; 1 for
    independent requests."""
    return 1.0 if clusters is None or not n else 1.0 + icc * clusters.squares / n


_LEAST_UNITS = 2.0
"""An arm whose traffic comes from fewer effective units than this (`_effective_units`) cannot
tell a model from the units it happened to get: its rate neither passes nor fails by the normal
test."""


def _effective_units(n: float, clusters: _Clusters | None) -> float:
    """Kish's effective number of units N²/Σn_i² (inf for independent requests): 200 tenants
    of which one sends half the traffic count as fewer than four."""
    return math.inf if clusters is None else n / clusters.centred


def _few_units_factor(n: float, clusters: _Clusters | None) -> float:
    """The small-number-of-units correction G/(G-1) of cluster-robust variances (CR1: Cameron
    & Miller 2015), with G the effective number of units (Carter, Schnepel & Steigerwald 2017:
    unequal units behave like fewer equal ones); 1 for independent requests."""
    units = _effective_units(n, clusters)
    return 1.0 if math.isinf(units) else units / (units - 1.0)


def _rate_variance(p: float, n: float, effect: float) -> float:
    """The variance of an arm's rate at rate p over n observations with that design effect."""
    return p * (1 - p) * effect / n if n else 0.0


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def _exact_bound(k: float, n: float, alpha: float, upper: bool) -> float:
    """An exact anytime-valid bound of a Bernoulli rate from k events in n: the rates q where the
    uniform-prior mixture martingale B(k+1, n-k+1) / (q^k (1-q)^(n-k)) stays below 1/alpha
    (Robbins 1970; a likelihood ratio mixed over every alternative, so by Ville's inequality it
    ever reaches 1/alpha with probability at most alpha, at any n, without a normal
    approximation). `upper`: the largest such q, else the smallest."""
    if n <= 0:
        return 1.0 if upper else 0.0
    p = k / n
    if (upper and k >= n) or (not upper and k <= 0):
        return p
    threshold = math.log(1 / alpha) - _log_beta(k + 1, n - k + 1)

    def beyond(q: float) -> bool:
        # log M(q) >= log(1/alpha): q is excluded
        return -(k * math.log(q) if k else 0.0) - ((n - k) * math.log1p(-q) if n > k else 0.0) >= (
            threshold
        )

    inside, outside = p, (1.0 if upper else 0.0)
    for _ in range(50):
        mid = (inside + outside) / 2
        if mid <= 0.0 or mid >= 1.0 or beyond(mid):
            outside = mid
        else:
            inside = mid
    return inside


def _exact_beyond(
    primary: tuple[float, float], candidate: tuple[float, float], margin: float, alpha: float
) -> bool:
    """The hard guard: the candidate's exact lower bound is beyond the primary's exact upper
    bound plus the margin, each at alpha/2 (so valid together at alpha, at any sample size).
    The counts are effective ones (divided by the arm's design effect)."""
    low = _exact_bound(candidate[0], candidate[1], alpha / 2, upper=False)
    if low <= margin:
        return False
    return low - _exact_bound(primary[0], primary[1], alpha / 2, upper=True) > margin


def _rate(
    metric: str,
    primary: Tally,
    candidate: Tally,
    margin: float,
    th: Thresholds,
    min_samples: int | None = None,
    units: tuple[UnitTallies | None, UnitTallies | None] = (None, None),
) -> _Evidence | _Few:
    """`primary` and `candidate` count bad events (errors, failed checks...) out of n; fewer
    than `min_samples` (default `min_samples_rate`) in either arm is too few to pass or to fail
    by the normal test (the exact guard may still fail it). `units`: each arm's breakdown of
    its tally by sticky unit, if any.

    The estimate is the difference of the rates; both sides test the one null boundary
    p_c - p_p = margin, so the standard error is the one at the boundary's most likely rates
    (`_restricted`), times each arm's design effect over its units (`_icc`): a candidate at the
    margin that happened to see few events is not passed on their small spread."""
    (k_p, n_p), (k_c, n_c) = primary, candidate
    p_rate = k_p / n_p if n_p else 0.0
    boundary = _Boundary(margin, th.rate_margin_relative)
    margin = boundary.margin(p_rate)
    least = th.min_samples_rate if min_samples is None else min_samples
    c_p = _clusters(units[0], k_p, n_p)
    c_c = _clusters(units[1], k_c, n_c)
    icc = _icc(((c_p, k_p, n_p), (c_c, k_c, n_c))) if c_p or c_c else 0.0
    d_p, d_c = _design_effect(n_p, c_p, icc), _design_effect(n_c, c_c, icc)

    def guard(alpha: float) -> bool:
        if not n_c or not n_p:
            return False
        return _exact_beyond((k_p / d_p, n_p / d_p), (k_c / d_c, n_c / d_c), margin, alpha)

    shown = k_c / n_c - p_rate if n_c else None
    if min(n_p, n_c) < least:
        return _Few(metric, margin, n_p, n_c, least, guard=guard, estimate=shown)
    units_p, units_c = _effective_units(n_p, c_p), _effective_units(n_c, c_c)
    if min(units_p, units_c) < _LEAST_UNITS:
        detail = (
            f"too few sticky units: the traffic of {units_p:.3g} primary, {units_c:.3g} "
            f"candidate effective units, need {_LEAST_UNITS:g} each"
        )
        return _Few(metric, margin, n_p, n_c, 0, detail, guard=guard, estimate=shown)
    tilde_c, tilde_p = _restricted(k_c, n_c, k_p, n_p, boundary)
    # The test is of p̂_c - p̂_p - m(p̂_p) against 0 (the difference against the margin at the
    # primary's rate): its variance weighs the primary's by the boundary's slope squared, so a
    # relative margin's own noise is counted (a primary that happened to see many errors widens
    # the margin it is judged with).
    # Near a kink of the margin (where the relative part takes over from the absolute one) the
    # primary's estimate may fall on either side of it, and the convex kink biases the statistic
    # towards passing: the steeper slope within two standard deviations of the primary's rate
    # is taken (measured: at the kink, a 50 % step passed 12.5 % at the margin without it).
    var_p = _rate_variance(tilde_p, n_p, d_p * _few_units_factor(n_p, c_p))
    spread = 2.0 * math.sqrt(var_p)
    slope = max(
        boundary.slope(min(1.0, max(0.0, tilde_p + side * spread))) for side in (-1.0, 0.0, 1.0)
    )
    se = math.sqrt(
        _rate_variance(tilde_c, n_c, d_c * _few_units_factor(n_c, c_c)) + slope**2 * var_p
    )
    effective = n_c / d_c
    normal = min(tilde_c, 1.0 - tilde_c) * effective >= _NORMAL_EVENTS
    estimate = k_c / n_c - p_rate
    return _Evidence(
        metric,
        "rate",
        estimate,
        se,
        margin,
        n_p,
        n_c,
        f"{k_c}/{n_c} vs {k_p}/{n_p}",
        shown=estimate,
        guard=guard,
        normal_fail=normal,
    )


def cdf_spread(
    values: Sequence[float], q: float, point: float, units: Sequence[int] | None = None
) -> float:
    """The standard deviation of the empirical CDF of sorted `values` at `point` (their
    q-quantile), on the probability scale: sqrt(q(1 - q)/n) for independent samples; with
    `units` (each sample's sticky unit, parallel to `values`) the cluster-robust one over units,
    sqrt(Σᵢ(bᵢ - q·nᵢ)² · m/(m - 1)) / n for m units, unit i having nᵢ samples of which bᵢ are at
    or below `point` (Woodruff 1952 with the linearised variance of the CDF over clusters).
    `math.inf` for a single unit: its spread cannot be estimated."""
    return _spread(values, q, point, units, None if units is None else Counter(units))


def _spread(
    values: Sequence[float],
    q: float,
    point: float,
    units: Sequence[int] | None,
    totals: Counter[int] | None,
) -> float:
    """`cdf_spread` with the samples per unit counted once per series (`totals`)."""
    n = len(values)
    if units is None or totals is None:
        return math.sqrt(q * (1 - q) / n)
    sizes = math.fsum(t * t for t in totals.values())
    m = effective_units(n, sizes)
    if m <= 1:
        return math.inf
    below = Counter(units[: bisect_right(values, point)])
    # Σ(b - q·t)² = Σb² - 2q·Σb·t + q²·Σt², the first two over units with samples below only
    squares = math.fsum(b * (b - 2 * q * totals[u]) for u, b in below.items())
    squares += q * q * sizes
    return math.sqrt(max(squares, 0.0) * m / (m - 1)) / n


MIN_EFFECTIVE_UNITS = 10
"""Fewer effective units (`effective_units`) than this in either arm hold a sample metric: a
variance over units is itself too uncertain below it (one batch user with half a canary's
traffic leaves about four, and their spread says little about the next user's)."""


def effective_units(samples: float, sizes: float) -> float:
    """Kish's effective number of units, (Σnᵢ)²/Σnᵢ², for `samples` = Σnᵢ and `sizes` = Σnᵢ²:
    m for m units of equal size, fewer when a few units have most of the samples. The variances
    over units are scaled by m/(m - 1) with this m, the first-order correction of their bias
    (a unit's own weight in the mean it is compared with), which is m/(m - 1) for equal units."""
    return samples * samples / sizes if sizes > 0 else 0.0


def log_quantile(
    values: Sequence[float], q: float, units: Sequence[int] | None = None
) -> tuple[float, float] | None:
    """(log of the q-quantile, its standard error) of sorted positive-or-zero `values`, or None
    when the quantile is 0 (no ratio). The standard error comes from the order statistics one
    CDF standard deviation (`cdf_spread`, over `units` when given: each sample's unit, parallel)
    either side of the quantile's rank, clamped to the sample."""
    point = percentile(values, q)
    if point is None:
        raise ValueError("log_quantile of no values")
    if point <= 0:
        return None
    return _log_quantile(values, q, point, cdf_spread(values, q, point, units))


def _log_quantile(
    values: Sequence[float], q: float, point: float, spread: float
) -> tuple[float, float]:
    n = len(values)
    ranks = n * min(spread, 1.0)
    low = values[max(0, math.floor(n * q - ranks) - 1)]
    high = values[min(n - 1, math.ceil(n * q + ranks) - 1)]
    floor = point * 1e-3  # a zero lower order statistic must not make the spread infinite
    se = (math.log(max(high, floor)) - math.log(max(low, floor))) / 2
    return math.log(point), se


@dataclass(frozen=True, slots=True)
class _QuantileArm:
    """One arm's q-quantile, for Woodruff intervals at any level."""

    values: Sequence[float]
    """Sorted."""
    q: float
    point: float
    spread: float
    """`cdf_spread` at the point."""

    def end(self, z: float, upper: bool) -> float:
        """The order statistic at probability q ± z·spread (Woodruff), moved halfway to the next
        distinct value beyond it: recorded values have a resolution (1 s, 0.5 points), and a run
        of ties says the quantile lies somewhere in that cell, never exactly on the tie (in the
        run of the largest or smallest value, half a cell beyond it, the cell as wide as the gap
        to its neighbour). Beyond the sample, at its last answer, or in a sample of one value,
        the end is unbounded (`math.inf`, or 0 below): n answers cannot bound a p95 from above
        until enough of them lie above it."""
        values, n = self.values, len(self.values)
        if upper:
            probability = self.q + z * self.spread
            if probability > 1:  # beyond the sample (and an infinite spread: one unit)
                return math.inf
            rank = max(math.ceil(n * probability), 1)
            value = values[rank - 1]
            beyond = bisect_right(values, value)
            if beyond < n:
                return (value + values[beyond]) / 2
            # Inside the run of the largest value (a timeout, a coarse resolution), with more of
            # it above the rank: bounded by half a cell above it, the cell's width read from the
            # value below. Only the last answer itself leaves the end unbounded.
            below = bisect_left(values, value) - 1
            return value + (value - values[below]) / 2 if rank < n and below >= 0 else math.inf
        probability = self.q - z * self.spread
        rank = math.floor(n * probability) if probability > 0 else 0
        if rank < 1:
            return 0.0
        value = values[rank - 1]
        beyond = bisect_left(values, value) - 1
        if beyond >= 0:
            return (value + values[beyond]) / 2
        above = bisect_right(values, value)  # likewise inside the run of the smallest value
        return max(0.0, value - (values[above] - value) / 2) if rank > 1 and above < n else 0.0

    def side(self, z: float, upper: bool) -> float:
        """The log-scale distance from the point to `end`, per unit of z (a one-sided standard
        error); `math.inf` when that end is unbounded."""
        end = self.end(z, upper)
        if end <= 0 or math.isinf(end):
            return math.inf
        return abs(math.log(end) - math.log(self.point)) / z


def _ratio_bounds(
    primary: _QuantileArm, candidate: _QuantileArm, estimate: float, tau: float, alpha: float
) -> tuple[float, float]:
    """(lower, upper) anytime-valid bounds at `alpha` of log(candidate / primary quantile).

    Each side's standard error is read from the two arms' Woodruff intervals at the bound's own
    critical value (the upper bound from the candidate's upper and the primary's lower side, and
    the other way round), so that a skewed, tied or small sample is bounded by its own order
    statistics rather than by a slope read one standard deviation from the quantile. The
    critical value depends on the standard error (the mixture's width over se), which depends on
    it: a few fixed-point steps from z = 1 settle it."""

    def bound(upper: bool) -> float:
        z = 1.0
        width = math.inf
        for _ in range(4):
            se = math.hypot(candidate.side(z, upper), primary.side(z, not upper))
            if math.isinf(se):
                return math.inf
            width = offset(se, tau, alpha)
            z_next = max(width / se, 1.0)
            if abs(z_next - z) < 1e-3:
                break
            z = z_next
        return width

    return estimate - bound(False), estimate + bound(True)


def _quantile(
    metric: str,
    primary: Sequence[float],
    candidate: Sequence[float],
    q: float,
    th: Thresholds,
    primary_units: Sequence[int] | None = None,
    candidate_units: Sequence[int] | None = None,
    primary_totals: Counter[int] | None = None,
    candidate_totals: Counter[int] | None = None,
) -> _Evidence | _Few:
    """Sorted samples of both arms, with each sample's unit (parallel to them) and the samples
    per unit (`Counter`) when known."""
    ratio = th.latency_p50_ratio if q == 0.5 else th.latency_p95_ratio
    n_p, n_c = len(primary), len(candidate)
    if min(n_p, n_c) < th.min_samples_latency:
        return _Few(metric, ratio, n_p, n_c, th.min_samples_latency)
    p_value, c_value = percentile(primary, q), percentile(candidate, q)
    if p_value is None or c_value is None or p_value <= 0 or c_value <= 0:
        return _Few(metric, ratio, n_p, n_c, 0, "a quantile is 0: no ratio")
    if primary_units is not None and primary_totals is None:
        primary_totals = Counter(primary_units)
    if candidate_units is not None and candidate_totals is None:
        candidate_totals = Counter(candidate_units)
    for totals, n in ((primary_totals, n_p), (candidate_totals, n_c)):
        if totals is not None:
            sizes = math.fsum(t * t for t in totals.values())
            if effective_units(n, sizes) < MIN_EFFECTIVE_UNITS:
                return _Few(metric, ratio, n_p, n_c, 0, _FEW_UNITS)
    arm_p = _QuantileArm(
        primary, q, p_value, _spread(primary, q, p_value, primary_units, primary_totals)
    )
    arm_c = _QuantileArm(
        candidate, q, c_value, _spread(candidate, q, c_value, candidate_units, candidate_totals)
    )
    of_primary = _log_quantile(primary, q, p_value, arm_p.spread)
    of_candidate = _log_quantile(candidate, q, c_value, arm_c.spread)
    margin = max(math.log(ratio), math.log((p_value + th.latency_min_increase_s) / p_value))
    estimate = of_candidate[0] - of_primary[0]
    # `needs` grows the evidence from one standard error: the wider of the two sides one
    # CDF deviation out (ties included), or, when one is unbounded, the clamped order statistics
    se = math.hypot(of_primary[1], of_candidate[1])
    sides = max(
        math.hypot(arm_c.side(1.0, True), arm_p.side(1.0, False)),
        math.hypot(arm_c.side(1.0, False), arm_p.side(1.0, True)),
    )
    if math.isfinite(sides):
        se = max(se, sides)
    return _Evidence(
        metric,
        "log",
        estimate,
        se,
        margin,
        n_p,
        n_c,
        f"p{round(q * 100)} {c_value:.4g}s vs {p_value:.4g}s",
        bounded=partial(_ratio_bounds, arm_p, arm_c, estimate),
    )


def unit_mean(
    values: Sequence[float], units: Sequence[int] | None = None, pseudo: float = 0.0
) -> tuple[float, float, float]:
    """(mean, the variance of that mean, effective units) of `values`, with one pseudo-sample
    each side of the mean at distance `pseudo` when `pseudo` > 0, so that ties and a zero spread
    still have one, fading as 1/n².

    With `units` (each value's sticky unit, parallel) the mean is the ratio of per-unit sums,
    Σsᵢ/Σnᵢ, and its variance the delta method's over units, Σ(sᵢ - mean·nᵢ)²/n² · m/(m - 1)
    with m the `effective_units` (the cluster-robust variance); without, one unit per value,
    which is s²/n."""
    n = len(values)
    centre = math.fsum(values) / n
    if units is None:
        squares = math.fsum((v - centre) ** 2 for v in values)
        m = float(n)
    else:
        sums: dict[int, float] = {}
        counts = Counter(units)
        for unit, value in zip(units, values, strict=True):
            sums[unit] = sums.get(unit, 0.0) + value
        squares = math.fsum((s - centre * counts[u]) ** 2 for u, s in sums.items())
        m = effective_units(n, math.fsum(c * c for c in counts.values()))
    if m <= 1:  # one unit: its spread cannot be estimated, pseudo-samples or not
        return centre, math.inf, m
    factor = m / (m - 1)
    if pseudo > 0:
        squares += 2 * pseudo * pseudo
        n += 2
    return centre, squares / (n * n) * factor, m


def _cost(
    primary: Sequence[float],
    candidate: Sequence[float],
    th: Thresholds,
    primary_units: Sequence[int] | None = None,
    candidate_units: Sequence[int] | None = None,
) -> _Evidence | _Few:
    """The log of the ratio of mean costs per request, each mean's variance over units, with a
    free and a double-priced pseudo-request added to each arm (0 and twice its mean): requests
    that all cost the same still leave the mean of what comes next unknown."""
    metric, n_p, n_c = "cost_per_request", len(primary), len(candidate)
    if min(n_p, n_c) < th.min_samples_latency:
        return _Few(metric, th.cost_ratio, n_p, n_c, th.min_samples_latency)
    mean_p, mean_c = math.fsum(primary) / n_p, math.fsum(candidate) / n_c
    if mean_p <= 0 or mean_c <= 0:
        return _Few(metric, th.cost_ratio, n_p, n_c, 0, "an arm costs nothing: no ratio")
    _, var_p, m_p = unit_mean(primary, primary_units, pseudo=mean_p)
    _, var_c, m_c = unit_mean(candidate, candidate_units, pseudo=mean_c)
    if min(m_p, m_c) < MIN_EFFECTIVE_UNITS:
        return _Few(metric, th.cost_ratio, n_p, n_c, 0, _FEW_UNITS)
    return _Evidence(
        metric,
        "log",
        math.log(mean_c / mean_p),
        math.sqrt(var_p / mean_p**2 + var_c / mean_c**2),
        math.log(th.cost_ratio),
        n_p,
        n_c,
        f"mean ${mean_c:.4g} vs ${mean_p:.4g}",
    )


_FEW_UNITS = (
    f"fewer than {MIN_EFFECTIVE_UNITS} effective units in an arm: a few users or tenants have "
    "most of its samples, and their spread says little about the next one"
)

_SCORE_PSEUDO = 4.5
"""The distance of the judge score's two pseudo-pairs from the mean delta: half the 1-10 scale,
as the preference's pseudo-reviews sit at its two ends. A run of equal deltas (judges often
score in whole or half points) then still has the spread an unseen pair might bring."""


def _score(
    deltas: Sequence[float], th: Thresholds, units: Sequence[int] | None = None
) -> _Evidence | _Few:
    metric, n = "judge_score", len(deltas)
    if n < th.min_samples_latency:
        return _Few(metric, th.judge_score_drop, n, n, th.min_samples_latency)
    centre, variance, m = unit_mean(deltas, units, pseudo=_SCORE_PSEUDO)
    if m < MIN_EFFECTIVE_UNITS:
        return _Few(metric, th.judge_score_drop, n, n, 0, _FEW_UNITS)
    return _Evidence(
        metric,
        "score",
        -centre,
        math.sqrt(variance),
        th.judge_score_drop,
        n,
        n,
        f"candidate {centre:+.2f} points against the primary over {n} judged pairs",
    )


def _preference(
    preferences: Sequence[float], th: Thresholds, units: Sequence[int] | None = None
) -> _Evidence | _Few:
    """The candidate's blind preferences against the primary (1, ½ or 0 each), with each
    review's unit (parallel) when known: the variance is then the one over units, as the design
    effect (clustered over independent) applied at every size."""
    metric, n = "human_preference", len(preferences)
    if n < th.min_samples_reviews:
        return _Few(metric, th.human_preference_drop, n, n, th.min_samples_reviews)
    total = math.fsum(preferences)
    squares = math.fsum(map(operator.mul, preferences, preferences))
    effect = 1.0
    if units is not None:
        _, clustered, m = unit_mean(preferences, units)
        if m < MIN_EFFECTIVE_UNITS:
            return _Few(metric, th.human_preference_drop, n, n, 0, _FEW_UNITS)
        _, independent, _ = unit_mean(preferences)
        if independent > 0:  # else every review is the same: the pseudo-reviews carry it
            # at most n: all of them one unit's (whose variance cannot be estimated) is one review
            effect = min(max(clustered / independent, 1.0), float(n))

    def grown(k: float) -> tuple[float, float]:
        # k times the reviews of the same quality, plus one preference each way (1 and 0)
        count, s1, s2 = k * n + 2, k * total + 1, k * squares + 1
        centre = s1 / count
        variance = max(s2 / count - centre * centre, 0.0) * count / (count - 1)
        return 0.5 - centre, math.sqrt(variance * effect / count)

    estimate, se = grown(1.0)
    share = total / n
    return _Evidence(
        metric,
        "rate",
        estimate,
        se,
        th.human_preference_drop,
        n,
        n,
        f"reviewers preferred the candidate in {share:.0%} of {n} blind reviews (ties half)",
        shown=0.5 - share,
        grown=grown,
    )


def _floor(
    candidate: Tally, floor: float, th: Thresholds, per_unit: UnitTallies | None = None
) -> _Evidence | _Few:
    """The candidate's (not followed, probes) against the rule's `min_adaptation`: the null
    boundary is a not-followed share of exactly 1 - floor, so the standard error is the binomial
    one there, times the design effect of the probes' units."""
    metric = "rule_adaptation:min_adaptation"
    k, n = candidate
    if n < th.min_samples_probes:
        return _Few(metric, 0.0, n, n, th.min_samples_probes)
    clusters = _clusters(per_unit, k, n)
    effect = _design_effect(n, clusters, _icc(((clusters, k, n),)))
    boundary = 1.0 - floor
    return _Evidence(
        metric,
        "rate",
        k / n - boundary,
        math.sqrt(_rate_variance(boundary, n, effect)),
        0.0,
        n,
        n,
        f"candidate follows {n - k}/{n} flipped rules against a floor of {floor:.0%}",
        tau=_FLOOR_TAU,
    )


def _verdict(
    evidence: _Evidence | _Few, th: Thresholds, alpha: float, with_needs: bool
) -> MetricVerdict:
    if isinstance(evidence, _Few):
        if evidence.guard is not None and evidence.guard(alpha * _GUARD_SHARE):
            return _guarded(evidence.metric, evidence.threshold, evidence.n_primary,
                            evidence.n_candidate, alpha, evidence.estimate)  # fmt: skip
        detail = evidence.detail or (
            f"too few samples: {evidence.n_primary} primary, {evidence.n_candidate} candidate, "
            f"need {evidence.need} each"
        )
        return MetricVerdict(
            evidence.metric,
            Outcome.INCONCLUSIVE,
            None,
            None,
            None,
            evidence.threshold,
            evidence.n_primary,
            evidence.n_candidate,
            alpha,
            detail,
            needs=max(0, evidence.need - evidence.n_candidate) if evidence.need else None,
        )
    e = evidence
    beta = 1.0 - th.pass_confidence
    tau = e.tau if e.tau is not None else max(e.margin, _TAU_FLOOR[e.kind])
    # The fail bound lies below the estimate (rounding keeps fl(estimate - width) <= estimate),
    # so it can only be beyond the margin when the estimate is: otherwise it is not solved for.
    # Most looks at a healthy candidate are of that kind.
    fail_alpha = alpha if e.guard is None else alpha * (1 - _GUARD_SHARE)
    beyond = e.estimate > e.margin
    fail_low = e.bounds(tau, fail_alpha)[0] if beyond and e.normal_fail else -math.inf
    if fail_low <= e.margin and beyond and e.guard is not None and e.guard(alpha * _GUARD_SHARE):
        return _guarded(e.metric, e.margin, e.n_primary, e.n_candidate, alpha, e.estimate)
    low, high = e.bounds(tau, beta)
    shown = e.shown if e.shown is not None else e.estimate

    def scaled(value: float) -> float:
        return math.exp(value) if e.kind == "log" else value

    def shown_bound(value: float) -> float | None:
        return None if math.isinf(value) else scaled(value)

    margin = scaled(e.margin)
    if fail_low > e.margin:
        outcome, needs = Outcome.FAIL, None
        word = "worse" if e.kind != "log" else "larger"
        reason = (
            f"{e.described}: {word} beyond {_fmt(e.kind, margin)} "
            f"(bound {_fmt(e.kind, scaled(fail_low))}, alpha {alpha:.2g})"
        )
    elif high <= e.margin:
        outcome, needs = Outcome.PASS, 0
        reason = (
            f"{e.described}: within {_fmt(e.kind, margin)} (bound {_fmt(e.kind, scaled(high))})"
        )
    else:
        outcome = Outcome.INCONCLUSIVE
        factor = _growth_to_pass(e, tau, beta) if with_needs else math.inf
        needs = None if math.isinf(factor) else max(1, math.ceil(e.n_candidate * (factor - 1)))
        more = f"about {needs} more candidate answers" if needs is not None else "a better estimate"
        reason = (
            f"{e.described}: cannot tell yet whether within {_fmt(e.kind, margin)} (needs {more})"
        )
    return MetricVerdict(
        e.metric,
        outcome,
        scaled(shown),
        shown_bound(low),
        shown_bound(high),
        margin,
        e.n_primary,
        e.n_candidate,
        alpha,
        reason,
        needs=needs,
    )


def _guarded(
    metric: str,
    margin: float,
    n_primary: int,
    n_candidate: int,
    alpha: float,
    estimate: float | None = None,
) -> MetricVerdict:
    """The fail verdict of a rate's exact guard."""
    return MetricVerdict(
        metric,
        Outcome.FAIL,
        estimate,
        None,
        None,
        margin,
        n_primary,
        n_candidate,
        alpha,
        f"worse beyond {margin:.4g} by an exact test ({n_candidate} candidate, {n_primary} "
        f"primary observations; alpha {alpha * _GUARD_SHARE:.2g})",
        needs=None,
    )


def _growth_to_pass(e: _Evidence, tau: float, beta: float) -> float:
    """By how much the evidence must grow (k times the samples, of the same quality) for the
    pass bound to be within the margin; `math.inf` when growing cannot get it there."""

    def passes(k: float) -> bool:
        estimate, se = e.at(k)
        # The bound is the estimate plus a width >= 0, so an estimate beyond the margin cannot
        # pass: no bound to compute. A candidate worse than the margin but not yet failed takes
        # the doubling all the way to its limit, on every look, and this saves each step's solve.
        return estimate <= e.margin and bounds(estimate, se, tau, beta)[1] <= e.margin

    high = 2.0
    while not passes(high):
        high *= 2
        if high > 1e9:
            return math.inf
    low = high / 2
    for _ in range(12):  # to 0.02 % of k: `needs` is an estimate, not a promise
        mid = (low + high) / 2
        if passes(mid):
            high = mid
        else:
            low = mid
    return high


def _fmt(kind: str, value: float) -> str:
    if kind == "log":
        return f"x{value:.3f}"
    return f"{value:.4g}"


def _sorted(
    values: Sequence[float], units: Sequence[int] | None
) -> tuple[list[float], list[int] | None]:
    """`values` sorted, and their units (parallel) in the same order."""
    if units is None:
        return sorted(values), None
    order = sorted(range(len(values)), key=values.__getitem__)
    return [values[i] for i in order], [units[i] for i in order]


def _failures(tally: Tally) -> Tally:
    passed, total = tally
    return total - passed, total


def _units(
    primary: ArmWindow, candidate: ArmWindow, key: str, *, failures: bool = False
) -> tuple[UnitTallies | None, UnitTallies | None]:
    """Both arms' per-unit breakdowns of a tally (`ArmWindow.units`), as bad events: a check's
    (passed, total) per unit becomes (failed, total)."""

    def one(window: ArmWindow) -> UnitTallies | None:
        per_unit = window.units.get(key)
        if per_unit is None or not failures:
            return per_unit
        return tuple((n - k, n) for k, n in per_unit)

    return one(primary), one(candidate)


def judge(
    primary: ArmWindow,
    candidate: ArmWindow,
    thresholds: Thresholds,
    *,
    sequences: int = 1,
    with_needs: bool = True,
    min_adaptation: float | None = None,
    budget: float = 1.0,
) -> list[MetricVerdict]:
    """Judge `candidate` against `primary` over the same evidence (since a step began, or a rule
    epoch), as often as the caller likes.

    Which metrics are judged follows from what the windows hold: the error rate when either arm
    has requests; each rule check either arm reports; corrections, severe findings, latency,
    TTFT and cost when either arm has any; agreement when the candidate has pairs *and* the
    primary has a noise floor (without one, disagreement cannot be told from noise: the caller
    warns); the LLM-judge score when the candidate has judged pairs; `human_preference` when
    blind review is judged (`preferences` is not None: none yet is inconclusive);
    `rule_adaptation` when either arm has scored rule-flip probes (`adaptation`), and then, with
    `min_adaptation`, the candidate's adaptation against that floor
    (`rule_adaptation:min_adaptation`). All of them, and the `sequences` (steps, rule epochs)
    the caller judges apart, share the false-rollback budget equally. Verdicts come in a fixed
    order, checks by name; windows with nothing in them give no verdicts at all.
    `with_needs=False` leaves `needs` of inconclusive verdicts unknown (None), for callers that
    only want the decisions (the simulation): it is the costliest part of a look.
    `budget`: the share of `false_rollback_rate` this call may spend (0 < budget <= 1), when the
    caller splits one rollout's budget over several calls (traffic, rule epochs, probes,
    reviews: `proxy.rollout.budget`).
    Raises ValueError for `sequences` below 1 or `budget` outside (0, 1]."""
    if sequences < 1:
        raise ValueError(f"sequences must be >= 1, got {sequences}")
    if not 0.0 < budget <= 1.0:
        raise ValueError(f"budget must be in (0, 1], got {budget}")
    th = thresholds
    plan: list[Callable[[], _Evidence | _Few]] = []
    if primary.requests or candidate.requests:
        plan.append(
            lambda: _rate(
                "error_rate",
                (primary.errors, primary.requests),
                (candidate.errors, candidate.requests),
                th.error_rate_increase,
                th,
                units=_units(primary, candidate, "errors"),
            )
        )
    for name in sorted(primary.checks.keys() | candidate.checks.keys()):
        p_check, c_check = primary.checks.get(name, (0, 0)), candidate.checks.get(name, (0, 0))
        plan.append(
            partial(
                _rate,
                f"check_pass_rate:{name}",
                _failures(p_check),
                _failures(c_check),
                th.check_pass_rate_drop,
                th,
                units=_units(primary, candidate, f"checks:{name}", failures=True),
            )
        )
    if primary.corrections[1] or candidate.corrections[1]:
        plan.append(
            lambda: _rate(
                "correction_rate",
                primary.corrections,
                candidate.corrections,
                th.correction_rate_increase,
                th,
                units=_units(primary, candidate, "corrections"),
            )
        )
    if primary.findings[1] or candidate.findings[1]:
        plan.append(
            lambda: _rate(
                "findings",
                primary.findings,
                candidate.findings,
                th.finding_rate_increase,
                th,
                units=_units(primary, candidate, "findings"),
            )
        )
    if candidate.agreement[1] and primary.noise[1]:
        plan.append(
            lambda: _rate(
                "disagreement",
                primary.noise,
                candidate.agreement,
                th.disagreement_increase,
                th,
                units=(primary.units.get("noise"), candidate.units.get("agreement")),
            )
        )
    for prefix, series in (("latency", "latencies_s"), ("ttft", "ttfts_s")):
        p_series, c_series = getattr(primary, series), getattr(candidate, series)
        if p_series or c_series:
            (p_sorted, p_units), (c_sorted, c_units) = (
                _sorted(p_series, primary.sample_units.get(series)),
                _sorted(c_series, candidate.sample_units.get(series)),
            )
            p_totals = None if p_units is None else Counter(p_units)
            c_totals = None if c_units is None else Counter(c_units)
            for q in (0.5, 0.95):
                plan.append(
                    partial(
                        _quantile,
                        f"{prefix}_p{round(q * 100)}",
                        p_sorted,
                        c_sorted,
                        q,
                        th,
                        p_units,
                        c_units,
                        p_totals,
                        c_totals,
                    )
                )
    if primary.costs_usd or candidate.costs_usd:
        plan.append(
            lambda: _cost(
                primary.costs_usd,
                candidate.costs_usd,
                th,
                primary.sample_units.get("costs_usd"),
                candidate.sample_units.get("costs_usd"),
            )
        )
    if candidate.judge_deltas:
        plan.append(
            lambda: _score(candidate.judge_deltas, th, candidate.sample_units.get("judge_deltas"))
        )
    preferences = candidate.preferences
    if preferences is not None:
        plan.append(lambda: _preference(preferences, th, candidate.sample_units.get("preferences")))
    p_adapt, c_adapt = primary.adaptation or (0, 0), candidate.adaptation or (0, 0)
    if p_adapt[1] or c_adapt[1]:
        plan.append(
            lambda: _rate(
                "rule_adaptation",
                p_adapt,
                c_adapt,
                th.rule_adaptation_drop,
                th,
                min_samples=th.min_samples_probes,
                units=_units(primary, candidate, "adaptation"),
            )
        )
        if min_adaptation is not None:
            plan.append(
                partial(_floor, c_adapt, min_adaptation, th, candidate.units.get("adaptation"))
            )

    if not plan:  # empty windows: nothing to judge, which holds the rollout
        return []
    alpha = th.false_rollback_rate * budget / (len(plan) * sequences)
    return [_verdict(run(), th, alpha, with_needs) for run in plan]
