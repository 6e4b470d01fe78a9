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
  share of rule-flip probes not followed — `rule_adaptation`): the
  difference of the two proportions, its standard error by Agresti & Caffo (one event and one
  non-event added to each arm, so zero events still have a spread). The margin is the absolute
  one or, if larger, `rate_margin_relative` of the primary's rate.
- Latency and time to first token, p50 and p95: the log of the ratio of the two quantiles; each
  arm's standard error from the order statistics one standard deviation either side of the
  quantile's rank (the binomial method, no distributional assumption). The margin is the log of
  the ratio bound, or of (primary + `latency_min_increase_s`) / primary if that is larger.
- Cost per request: the log of the ratio of means, its standard error by the delta method.
- LLM-judge score: the mean over judged pairs of primary score minus candidate score (paired).
- Blind human preference (`human_preference`): per reviewed pair of the candidate against the
  primary, 1 when the reviewer preferred the candidate's answer, 0 the primary's, ½ a tie; the
  estimate is ½ minus the candidate's mean (so a regression is positive), with one preference
  each way added (as Agresti & Caffo do for rates: a run of ties still has a spread) and the
  standard error of that mean. The margin is `human_preference_drop`; fewer than
  `min_samples_reviews` reviews are inconclusive (they hold, never fail).
- The adaptation floor (`rule_adaptation:min_adaptation`, when the rule sets
  `probes.min_adaptation`): one arm only, the floor minus the candidate's adaptation rate, i.e.
  its not-followed share (one event and one non-event added) minus 1 - floor, with the binomial
  standard error, bounded by the same confidence sequence around a margin of 0 (mixing scale
  `_FLOOR_TAU`). It fails when the adaptation's upper bound at `alpha` is below the floor, and
  passes when its lower bound at `pass_confidence` is above it.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from analyzers.sequential import bounds
from analyzers.summary import mean, percentile
from analyzers.verdicts import ArmWindow, MetricVerdict, Outcome, Tally, Thresholds

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


def _agresti_caffo(events: float, n: float) -> tuple[float, float]:
    """(adjusted proportion, its variance)."""
    adjusted = (events + 1) / (n + 2)
    return adjusted, adjusted * (1 - adjusted) / (n + 2)


def _rate(
    metric: str,
    primary: Tally,
    candidate: Tally,
    margin: float,
    th: Thresholds,
    min_samples: int | None = None,
) -> _Evidence | _Few:
    """`primary` and `candidate` count bad events (errors, failed checks...) out of n; fewer
    than `min_samples` (default `min_samples_rate`) in either arm is too few."""
    (k_p, n_p), (k_c, n_c) = primary, candidate
    margin = max(margin, th.rate_margin_relative * (k_p / n_p if n_p else 0.0))
    least = th.min_samples_rate if min_samples is None else min_samples
    if min(n_p, n_c) < least:
        return _Few(metric, margin, n_p, n_c, least)

    def grown(k: float) -> tuple[float, float]:
        p_c, var_c = _agresti_caffo(k_c * k, n_c * k)
        p_p, var_p = _agresti_caffo(k_p * k, n_p * k)
        return p_c - p_p, math.sqrt(var_c + var_p)

    estimate, se = grown(1.0)
    return _Evidence(
        metric,
        "rate",
        estimate,
        se,
        margin,
        n_p,
        n_c,
        f"{k_c}/{n_c} vs {k_p}/{n_p}",
        shown=k_c / n_c - k_p / n_p,
        grown=grown,
    )


def log_quantile(values: Sequence[float], q: float) -> tuple[float, float] | None:
    """(log of the q-quantile, its standard error) of sorted positive-or-zero `values`, or None
    when the quantile is 0 (no ratio)."""
    n = len(values)
    point = percentile(values, q)
    assert point is not None  # the caller checked the sample count
    if point <= 0:
        return None
    spread = math.sqrt(n * q * (1 - q))
    low = values[max(0, math.floor(n * q - spread) - 1)]
    high = values[min(n - 1, math.ceil(n * q + spread) - 1)]
    floor = point * 1e-3  # a zero lower order statistic must not make the spread infinite
    se = (math.log(max(high, floor)) - math.log(max(low, floor))) / 2
    return math.log(point), se


def _quantile(
    metric: str, primary: list[float], candidate: list[float], q: float, th: Thresholds
) -> _Evidence | _Few:
    ratio = th.latency_p50_ratio if q == 0.5 else th.latency_p95_ratio
    n_p, n_c = len(primary), len(candidate)
    if min(n_p, n_c) < th.min_samples_latency:
        return _Few(metric, ratio, n_p, n_c, th.min_samples_latency)
    of_primary, of_candidate = log_quantile(primary, q), log_quantile(candidate, q)
    if of_primary is None or of_candidate is None:
        return _Few(metric, ratio, n_p, n_c, 0, "a quantile is 0: no ratio")
    p_value, c_value = math.exp(of_primary[0]), math.exp(of_candidate[0])
    margin = max(math.log(ratio), math.log((p_value + th.latency_min_increase_s) / p_value))
    return _Evidence(
        metric,
        "log",
        of_candidate[0] - of_primary[0],
        math.hypot(of_primary[1], of_candidate[1]),
        margin,
        n_p,
        n_c,
        f"p{round(q * 100)} {c_value:.4g}s vs {p_value:.4g}s",
    )


def _cost(primary: Sequence[float], candidate: Sequence[float], th: Thresholds) -> _Evidence | _Few:
    metric, n_p, n_c = "cost_per_request", len(primary), len(candidate)
    if min(n_p, n_c) < th.min_samples_latency:
        return _Few(metric, th.cost_ratio, n_p, n_c, th.min_samples_latency)
    mean_p, mean_c = mean(primary), mean(candidate)
    assert mean_p is not None and mean_c is not None  # both arms have samples (checked above)
    if mean_p <= 0 or mean_c <= 0:
        return _Few(metric, th.cost_ratio, n_p, n_c, 0, "an arm costs nothing: no ratio")
    rel_var = _variance(primary, mean_p) / (n_p * mean_p**2) + _variance(candidate, mean_c) / (
        n_c * mean_c**2
    )
    return _Evidence(
        metric,
        "log",
        math.log(mean_c / mean_p),
        math.sqrt(rel_var),
        math.log(th.cost_ratio),
        n_p,
        n_c,
        f"mean ${mean_c:.4g} vs ${mean_p:.4g}",
    )


def _score(deltas: Sequence[float], th: Thresholds) -> _Evidence | _Few:
    metric, n = "judge_score", len(deltas)
    if n < th.min_samples_latency:
        return _Few(metric, th.judge_score_drop, n, n, th.min_samples_latency)
    centre = mean(deltas)
    assert centre is not None
    return _Evidence(
        metric,
        "score",
        -centre,
        math.sqrt(_variance(deltas, centre) / n),
        th.judge_score_drop,
        n,
        n,
        f"candidate {centre:+.2f} points against the primary over {n} judged pairs",
    )


def _preference(preferences: Sequence[float], th: Thresholds) -> _Evidence | _Few:
    """The candidate's blind preferences against the primary (1, ½ or 0 each)."""
    metric, n = "human_preference", len(preferences)
    if n < th.min_samples_reviews:
        return _Few(metric, th.human_preference_drop, n, n, th.min_samples_reviews)
    total = math.fsum(preferences)
    squares = math.fsum(map(operator.mul, preferences, preferences))

    def grown(k: float) -> tuple[float, float]:
        # k times the reviews of the same quality, plus one preference each way (1 and 0)
        count, s1, s2 = k * n + 2, k * total + 1, k * squares + 1
        centre = s1 / count
        variance = max(s2 / count - centre * centre, 0.0) * count / (count - 1)
        return 0.5 - centre, math.sqrt(variance / count)

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


def _floor(candidate: Tally, floor: float, th: Thresholds) -> _Evidence | _Few:
    """The candidate's (not followed, probes) against the rule's `min_adaptation`."""
    metric = "rule_adaptation:min_adaptation"
    k, n = candidate
    if n < th.min_samples_probes:
        return _Few(metric, 0.0, n, n, th.min_samples_probes)

    def grown(factor: float) -> tuple[float, float]:
        adjusted, variance = _agresti_caffo(k * factor, n * factor)
        return adjusted - (1.0 - floor), math.sqrt(variance)

    estimate, se = grown(1.0)
    return _Evidence(
        metric,
        "rate",
        estimate,
        se,
        0.0,
        n,
        n,
        f"candidate follows {n - k}/{n} flipped rules against a floor of {floor:.0%}",
        shown=floor - (n - k) / n,
        grown=grown,
        tau=_FLOOR_TAU,
    )


def _variance(values: Sequence[float], centre: float) -> float:
    return math.fsum((v - centre) ** 2 for v in values) / (len(values) - 1)


def _verdict(
    evidence: _Evidence | _Few, th: Thresholds, alpha: float, with_needs: bool
) -> MetricVerdict:
    if isinstance(evidence, _Few):
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
    fail_low = bounds(e.estimate, e.se, tau, alpha)[0] if e.estimate > e.margin else -math.inf
    low, high = bounds(e.estimate, e.se, tau, beta)
    shown = e.shown if e.shown is not None else e.estimate

    def scaled(value: float) -> float:
        return math.exp(value) if e.kind == "log" else value

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
        scaled(low),
        scaled(high),
        margin,
        e.n_primary,
        e.n_candidate,
        alpha,
        reason,
        needs=needs,
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


def _failures(tally: Tally) -> Tally:
    passed, total = tally
    return total - passed, total


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
            )
        )
    if primary.findings[1] or candidate.findings[1]:
        plan.append(
            lambda: _rate(
                "findings", primary.findings, candidate.findings, th.finding_rate_increase, th
            )
        )
    if candidate.agreement[1] and primary.noise[1]:
        plan.append(
            lambda: _rate(
                "disagreement", primary.noise, candidate.agreement, th.disagreement_increase, th
            )
        )
    for prefix, p_samples, c_samples in (
        ("latency", primary.latencies_s, candidate.latencies_s),
        ("ttft", primary.ttfts_s, candidate.ttfts_s),
    ):
        if p_samples or c_samples:
            p_sorted, c_sorted = sorted(p_samples), sorted(c_samples)
            for q in (0.5, 0.95):
                plan.append(
                    partial(_quantile, f"{prefix}_p{round(q * 100)}", p_sorted, c_sorted, q, th)
                )
    if primary.costs_usd or candidate.costs_usd:
        plan.append(lambda: _cost(primary.costs_usd, candidate.costs_usd, th))
    if candidate.judge_deltas:
        plan.append(lambda: _score(candidate.judge_deltas, th))
    preferences = candidate.preferences
    if preferences is not None:
        plan.append(lambda: _preference(preferences, th))
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
            )
        )
        if min_adaptation is not None:
            plan.append(partial(_floor, c_adapt, min_adaptation, th))

    if not plan:  # empty windows: nothing to judge, which holds the rollout
        return []
    alpha = th.false_rollback_rate * budget / (len(plan) * sequences)
    return [_verdict(run(), th, alpha, with_needs) for run in plan]
