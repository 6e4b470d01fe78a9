"""The statistical judge of a canary: candidate against primary in the same window, per metric
(pure: two `ArmWindow`s in, `MetricVerdict`s out; no clock, no I/O).

Every metric is tested in the bad direction against a tolerated margin, so a candidate that is
slightly but really different is not rolled back, and only evidence fails it:

- **fail** when the regression is beyond its threshold at this look's level (`alpha` of the
  verdict: the false-rollback budget split over metrics and spent over looks, see
  `analyzers.sequential`);
- **pass** when the one-sided `pass_confidence` bound of the regression is within it;
- **inconclusive** otherwise, and always when either arm has fewer than the minimum samples:
  too little traffic holds a rollout, it never fails it.

The tests, per metric:

- Rates (error rate, each rule check's failure rate, correction rate, and candidate-primary
  disagreement against the primary-primary noise floor): the difference of two proportions
  with Newcombe's hybrid score interval (from `analyzers.summary`), one-sided at the look's level:
  fail when its lower bound exceeds the margin.
- Latency and time to first token, p50: the Mann-Whitney U test (candidate slower) **and** the
  order-statistic bound of the ratio of medians beyond `latency_p50_ratio`; both must agree.
- p95: the tail judged on the tail. The share of candidate samples above the primary's p95
  (about 5% when the arms match) is compared with the primary's own share by the same
  Newcombe test — the primary's binomial spread stands in for the sampling error of its p95
  (Bahadur's representation) — and fails only when significantly above **and** the ratio of
  p95s exceeds `latency_p95_ratio`. Mann-Whitney alone misses a tail that grows under an
  unchanged median (kayenta#780).
- Cost per request: H0 mean_c <= bound · mean_p, by a z test on mean_c - bound · mean_p with
  unpooled variances; the ratio's interval by the delta method.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from analyzers.ranktest import mann_whitney, quantile_bounds
from analyzers.sequential import look_alpha, z_for
from analyzers.summary import Rate, mean, newcombe_difference, percentile, wilson_interval
from analyzers.verdicts import ArmWindow, MetricVerdict, Outcome, Tally, Thresholds


@dataclass(frozen=True, slots=True)
class _Levels:
    """The two critical values of one look."""

    alpha: float
    """One-sided fail level of each metric at this look."""
    z_fail: float
    z_pass: float


def _rate(events: int, n: int, z: float) -> Rate:
    low, high = wilson_interval(events, n, z)
    return Rate(events, n, events / n, low, high)


def _inconclusive_few(
    metric: str, threshold: float, n_p: int, n_c: int, need: int, alpha: float
) -> MetricVerdict:
    return MetricVerdict(
        metric,
        Outcome.INCONCLUSIVE,
        None,
        None,
        None,
        threshold,
        n_p,
        n_c,
        alpha,
        f"too few samples: {n_p} primary, {n_c} candidate, need {need} each",
    )


def _judge_rate(
    metric: str, primary: Tally, candidate: Tally, margin: float, th: Thresholds, lv: _Levels
) -> MetricVerdict:
    """`primary` and `candidate` count bad events (errors, failed checks...) out of n."""
    (k_p, n_p), (k_c, n_c) = primary, candidate
    if min(n_p, n_c) < th.min_samples_rate:
        return _inconclusive_few(metric, margin, n_p, n_c, th.min_samples_rate, lv.alpha)
    shown = newcombe_difference(_rate(k_c, n_c, lv.z_pass), _rate(k_p, n_p, lv.z_pass))
    tested = newcombe_difference(_rate(k_c, n_c, lv.z_fail), _rate(k_p, n_p, lv.z_fail))
    rates = f"{k_c}/{n_c} vs {k_p}/{n_p}"
    if tested.low > margin:
        outcome = Outcome.FAIL
        reason = (
            f"{rates}: worse by more than {margin:g} (bound {tested.low:.4f}, alpha {lv.alpha:.2g})"
        )
    elif shown.high <= margin:
        outcome = Outcome.PASS
        reason = f"{rates}: within {margin:g} (bound {shown.high:.4f})"
    else:
        outcome = Outcome.INCONCLUSIVE
        reason = f"{rates}: cannot tell yet whether within {margin:g}"
    return MetricVerdict(
        metric, outcome, shown.value, shown.low, shown.high, margin, n_p, n_c, lv.alpha, reason
    )


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _quantile_ratio_bounds(
    primary: Sequence[float], candidate: Sequence[float], q: float, z: float
) -> tuple[float, float]:
    """Bounds of candidate q-quantile / primary q-quantile, each bound one-sided at the level
    of z for each arm (so at most twice that level for the ratio, by the union bound)."""
    c_low, c_high = quantile_bounds(candidate, q, z)
    p_low, p_high = quantile_bounds(primary, q, z)
    low = c_low / p_high if c_low > 0 and math.isfinite(p_high) else 0.0
    high = c_high / p_low if p_low > 0 and math.isfinite(c_high) else math.inf
    return low, high


def _judge_p50(
    metric: str, primary: list[float], candidate: list[float], th: Thresholds, lv: _Levels
) -> MetricVerdict:
    bound, n_p, n_c = th.latency_p50_ratio, len(primary), len(candidate)
    if min(n_p, n_c) < th.min_samples_latency:
        return _inconclusive_few(metric, bound, n_p, n_c, th.min_samples_latency, lv.alpha)
    p50_p, p50_c = percentile(primary, 0.5), percentile(candidate, 0.5)
    assert p50_p is not None and p50_c is not None  # both arms have samples (checked above)
    if p50_p <= 0:
        return MetricVerdict(
            metric,
            Outcome.INCONCLUSIVE,
            None,
            None,
            None,
            bound,
            n_p,
            n_c,
            lv.alpha,
            "primary median is 0: no ratio",
        )
    ratio = p50_c / p50_p
    low, high = _quantile_ratio_bounds(primary, candidate, 0.5, lv.z_pass)
    # Each arm's bound at alpha/2, so the ratio's bound holds at alpha.
    tested_low, _ = _quantile_ratio_bounds(primary, candidate, 0.5, z_for(lv.alpha / 2))
    rank = mann_whitney(primary, candidate)
    medians = f"p50 {p50_c:.4g}s vs {p50_p:.4g}s (x{ratio:.3f})"
    if rank.p_value <= lv.alpha and tested_low > bound:
        outcome = Outcome.FAIL
        reason = (
            f"{medians}: slower beyond x{bound:g} "
            f"(Mann-Whitney p {rank.p_value:.2g}, ratio bound {tested_low:.3f})"
        )
    elif high <= bound:
        outcome = Outcome.PASS
        reason = f"{medians}: within x{bound:g} (bound {high:.3f})"
    else:
        outcome = Outcome.INCONCLUSIVE
        reason = (
            f"{medians}: cannot tell yet whether within x{bound:g} "
            f"(Mann-Whitney p {rank.p_value:.2g})"
        )
    return MetricVerdict(
        metric, outcome, ratio, _finite(low), _finite(high), bound, n_p, n_c, lv.alpha, reason
    )


def _judge_p95(
    metric: str, primary: list[float], candidate: list[float], th: Thresholds, lv: _Levels
) -> MetricVerdict:
    bound, n_p, n_c = th.latency_p95_ratio, len(primary), len(candidate)
    if min(n_p, n_c) < th.min_samples_latency:
        return _inconclusive_few(metric, bound, n_p, n_c, th.min_samples_latency, lv.alpha)
    p95_p, p95_c = percentile(primary, 0.95), percentile(candidate, 0.95)
    assert p95_p is not None and p95_c is not None  # both arms have samples (checked above)
    if p95_p <= 0:
        return MetricVerdict(
            metric,
            Outcome.INCONCLUSIVE,
            None,
            None,
            None,
            bound,
            n_p,
            n_c,
            lv.alpha,
            "primary p95 is 0: no ratio",
        )
    ratio = p95_c / p95_p
    above_c = n_c - bisect_right(candidate, p95_p)
    above_p = n_p - bisect_right(primary, p95_p)
    share = newcombe_difference(_rate(above_c, n_c, lv.z_fail), _rate(above_p, n_p, lv.z_fail))
    low, high = _quantile_ratio_bounds(primary, candidate, 0.95, lv.z_pass)
    tails = (
        f"p95 {p95_c:.4g}s vs {p95_p:.4g}s (x{ratio:.3f}), "
        f"{above_c / n_c:.1%} of candidate above primary p95"
    )
    if share.low > 0 and ratio > bound:
        outcome = Outcome.FAIL
        reason = f"{tails}: tail heavier beyond x{bound:g} (alpha {lv.alpha:.2g})"
    elif high <= bound:
        outcome = Outcome.PASS
        reason = f"{tails}: within x{bound:g} (bound {high:.3f})"
    else:
        outcome = Outcome.INCONCLUSIVE
        reason = f"{tails}: cannot tell yet whether within x{bound:g}"
    return MetricVerdict(
        metric, outcome, ratio, _finite(low), _finite(high), bound, n_p, n_c, lv.alpha, reason
    )


def _variance(values: Sequence[float], centre: float) -> float:
    return math.fsum((v - centre) ** 2 for v in values) / (len(values) - 1)


def _judge_cost(
    primary: Sequence[float], candidate: Sequence[float], th: Thresholds, lv: _Levels
) -> MetricVerdict:
    metric, bound, n_p, n_c = "cost_per_request", th.cost_ratio, len(primary), len(candidate)
    if min(n_p, n_c) < th.min_samples_latency:
        return _inconclusive_few(metric, bound, n_p, n_c, th.min_samples_latency, lv.alpha)
    mean_p, mean_c = mean(primary), mean(candidate)
    assert mean_p is not None and mean_c is not None  # both arms have samples (checked above)
    if mean_p <= 0:
        return MetricVerdict(
            metric,
            Outcome.INCONCLUSIVE,
            None,
            None,
            None,
            bound,
            n_p,
            n_c,
            lv.alpha,
            "primary costs nothing: no ratio",
        )
    var_p, var_c = _variance(primary, mean_p) / n_p, _variance(candidate, mean_c) / n_c
    ratio = mean_c / mean_p
    excess = mean_c - bound * mean_p
    se = math.sqrt(var_c + bound * bound * var_p)
    significant = excess > 0 if se == 0 else excess / se >= lv.z_fail
    spread = ratio * math.sqrt(var_c / mean_c**2 + var_p / mean_p**2) if mean_c > 0 else 0.0
    low, high = max(0.0, ratio - lv.z_pass * spread), ratio + lv.z_pass * spread
    means = f"mean ${mean_c:.4g} vs ${mean_p:.4g} (x{ratio:.3f})"
    if significant:
        outcome, reason = Outcome.FAIL, f"{means}: dearer beyond x{bound:g} (alpha {lv.alpha:.2g})"
    elif high <= bound:
        outcome, reason = Outcome.PASS, f"{means}: within x{bound:g} (bound {high:.3f})"
    else:
        outcome, reason = (
            Outcome.INCONCLUSIVE,
            f"{means}: cannot tell yet whether within x{bound:g}",
        )
    return MetricVerdict(metric, outcome, ratio, low, high, bound, n_p, n_c, lv.alpha, reason)


def _failures(tally: Tally) -> Tally:
    passed, total = tally
    return total - passed, total


def judge(
    primary: ArmWindow, candidate: ArmWindow, thresholds: Thresholds, look: int
) -> list[MetricVerdict]:
    """Judge `candidate` against `primary` over the same window, at the `look`-th analysis
    (1-based) of this rollout — or of this rule epoch, when the windows hold one epoch's checks.

    Which metrics are judged follows from what the windows hold: the error rate when either arm
    has requests; each rule check either arm reports; corrections, agreement (when the candidate
    has pairs; its noise floor from the primary), latency, TTFT and cost when either arm has any.
    All of them share the look's budget equally (Bonferroni). Verdicts come in a fixed order,
    checks by name. Windows with nothing in them give no verdicts at all.
    Raises ValueError for a look below 1."""
    if look < 1:
        raise ValueError(f"look is 1-based, got {look}")
    th = thresholds
    plan: list[Callable[[_Levels], MetricVerdict]] = []
    if primary.requests or candidate.requests:
        plan.append(
            partial(
                _judge_rate,
                "error_rate",
                (primary.errors, primary.requests),
                (candidate.errors, candidate.requests),
                th.error_rate_increase,
                th,
            )
        )
    for name in sorted(primary.checks.keys() | candidate.checks.keys()):
        p_check, c_check = primary.checks.get(name, (0, 0)), candidate.checks.get(name, (0, 0))
        plan.append(
            partial(
                _judge_rate,
                f"check_pass_rate:{name}",
                _failures(p_check),
                _failures(c_check),
                th.check_pass_rate_drop,
                th,
            )
        )
    if primary.corrections[1] or candidate.corrections[1]:
        plan.append(
            partial(
                _judge_rate,
                "correction_rate",
                primary.corrections,
                candidate.corrections,
                th.correction_rate_increase,
                th,
            )
        )
    if candidate.agreement[1]:
        plan.append(
            partial(
                _judge_rate,
                "disagreement",
                primary.noise,
                candidate.agreement,
                th.disagreement_increase,
                th,
            )
        )
    for prefix, p_samples, c_samples in (
        ("latency", primary.latencies_s, candidate.latencies_s),
        ("ttft", primary.ttfts_s, candidate.ttfts_s),
    ):
        if p_samples or c_samples:
            p_sorted, c_sorted = sorted(p_samples), sorted(c_samples)
            plan.append(partial(_judge_p50, f"{prefix}_p50", p_sorted, c_sorted, th))
            plan.append(partial(_judge_p95, f"{prefix}_p95", p_sorted, c_sorted, th))
    if primary.costs_usd or candidate.costs_usd:
        plan.append(partial(_judge_cost, primary.costs_usd, candidate.costs_usd, th))

    if not plan:  # empty windows: nothing to judge, which holds the rollout
        return []
    alpha = look_alpha(look, th.false_rollback_rate, th.spending_scale_looks, metrics=len(plan))
    levels = _Levels(alpha, z_for(alpha), z_for(1.0 - th.pass_confidence))
    return [run(levels) for run in plan]
