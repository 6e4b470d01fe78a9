"""The judge's sample metrics (latency and TTFT quantiles, cost, judge scores, preferences): their
variances over the sticky unit, bounds that ties and small samples cannot make zero-width, and both
sides of the promise at the margin and in A/A, on fixed seeds."""

from __future__ import annotations

import math
import random

import pytest

from analyzers.judge_stats import cdf_spread, judge, log_quantile, unit_mean
from analyzers.verdicts import ArmWindow, MetricVerdict, Outcome, Thresholds

TH = Thresholds()
Z95 = 1.6448536269514722


def _by_metric(verdicts: list[MetricVerdict]) -> dict[str, MetricVerdict]:
    return {v.metric: v for v in verdicts}


def _tail_at(ratio: float) -> float:
    """The sigma of a lognormal with median 1 whose p95 is `ratio` times that of sigma 0.5."""
    return 0.5 + math.log(ratio) / Z95


def test_without_a_breakdown_the_results_are_those_of_independent_samples() -> None:
    rng = random.Random(1)
    values = sorted(rng.lognormvariate(0.0, 0.5) for _ in range(2000))
    one_each = list(range(len(values)))
    for q in (0.5, 0.95):
        plain, per_unit = log_quantile(values, q), log_quantile(values, q, one_each)
        assert plain is not None and per_unit is not None
        assert per_unit[0] == plain[0]
        assert per_unit[1] == pytest.approx(plain[1], rel=0.05)
        assert cdf_spread(values, q, math.exp(plain[0])) == pytest.approx(
            math.sqrt(q * (1 - q) / len(values))
        )
    centre, variance, units = unit_mean(values)
    assert (centre, units) == (pytest.approx(sum(values) / 2000), 2000)
    assert unit_mean(values, one_each)[1] == pytest.approx(variance)
    # through the judge: one unit per sample says what no breakdown says
    p, c = tuple(values[::2]), tuple(values[1::2])
    plain_v = judge(ArmWindow(0, 0, p, costs_usd=p), ArmWindow(0, 0, c, costs_usd=c), TH)
    keyed = {"latencies_s": tuple(range(1000)), "costs_usd": tuple(range(1000))}
    keyed_v = judge(
        ArmWindow(0, 0, p, costs_usd=p, sample_units=keyed),
        ArmWindow(0, 0, c, costs_usd=c, sample_units=keyed),
        TH,
    )
    for a, b in zip(plain_v, keyed_v, strict=True):
        assert (a.metric, a.outcome, a.estimate) == (b.metric, b.outcome, b.estimate)
        assert a.high == pytest.approx(b.high, rel=0.02)


def _tenants(rng: random.Random, count: int, n: int) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """n latencies of `count` tenants of lognormal activity (sigma 2), each with its own effect."""
    weights = [rng.lognormvariate(0.0, 2.0) for _ in range(count)]
    effects = [rng.gauss(0.0, 0.3) for _ in range(count)]
    units = rng.choices(range(count), weights=weights, k=n)
    return tuple(math.exp(effects[u] + 0.5 * rng.gauss(0.0, 1.0)) for u in units), tuple(units)


def test_tenants_widen_a_quantiles_spread_and_their_a_a_seldom_fails() -> None:
    """A/A with 40 tenants per arm: judged over tenants, the p50 and p95 fail within their alpha
    (a loose budget, so that alpha can be seen in 200 runs); judged as if every request were
    independent, several times as often."""
    rng = random.Random(7)
    loose = TH.model_copy(update={"false_rollback_rate": 0.2})
    runs, keyed_fails, plain_fails = 200, 0, 0
    for _ in range(runs):
        (p, pu), (c, cu) = _tenants(rng, 40, 800), _tenants(rng, 40, 800)
        keyed = judge(
            ArmWindow(0, 0, p, sample_units={"latencies_s": pu}),
            ArmWindow(0, 0, c, sample_units={"latencies_s": cu}),
            loose,
            with_needs=False,
        )
        plain = judge(ArmWindow(0, 0, p), ArmWindow(0, 0, c), loose, with_needs=False)
        keyed_fails += sum(v.outcome is Outcome.FAIL for v in keyed)
        plain_fails += sum(v.outcome is Outcome.FAIL for v in plain)
    alpha = loose.false_rollback_rate / 2
    assert keyed_fails / (2 * runs) <= alpha
    assert plain_fails > 3 * keyed_fails + 10


def test_a_p95_at_the_margin_at_a_ten_percent_step_seldom_passes() -> None:
    """The candidate's p95 exactly at the default margin, its median unchanged; a tenth of the
    traffic against nine tenths, looked at from 30 candidate answers up to 600: the share of runs
    that ever pass stays within 1 - pass_confidence (it was 14 %)."""
    rng = random.Random(11)
    sigma = _tail_at(TH.latency_p95_ratio)
    runs, passed = 100, 0
    for _ in range(runs):
        primary: list[float] = []
        candidate: list[float] = []
        size = 30
        while size <= 600:
            primary += [rng.lognormvariate(0.0, 0.5) for _ in range(9 * size - len(primary))]
            candidate += [rng.lognormvariate(0.0, sigma) for _ in range(size - len(candidate))]
            verdicts = _by_metric(
                judge(
                    ArmWindow(0, 0, tuple(primary)),
                    ArmWindow(0, 0, tuple(candidate)),
                    TH,
                    with_needs=False,
                )
            )
            if verdicts["latency_p95"].outcome is Outcome.PASS:
                passed += 1
                break
            size = math.ceil(size * 1.4)
    assert passed / runs <= 1 - TH.pass_confidence


def test_a_p95_at_the_margin_does_not_fail_an_a_a_within_its_first_answers() -> None:
    """A/A at a tenth of the traffic, looked at from 30 to 300 candidate answers, at a loose
    budget: p95's fail side stays within its alpha (it crossed at 9x alpha in the first
    hundred answers with a slope read one standard deviation from the quantile)."""
    rng = random.Random(12)
    loose = TH.model_copy(update={"false_rollback_rate": 0.2})
    alpha = loose.false_rollback_rate / 2
    runs, failed = 200, 0
    for _ in range(runs):
        primary: list[float] = []
        candidate: list[float] = []
        for size in (30, 40, 55, 75, 100, 140, 200):
            primary += [rng.lognormvariate(0.0, 0.5) for _ in range(9 * size - len(primary))]
            candidate += [rng.lognormvariate(0.0, 0.5) for _ in range(size - len(candidate))]
            verdicts = _by_metric(
                judge(
                    ArmWindow(0, 0, tuple(primary)),
                    ArmWindow(0, 0, tuple(candidate)),
                    loose,
                    with_needs=False,
                )
            )
            if verdicts["latency_p95"].outcome is Outcome.FAIL:
                failed += 1
                break
    assert failed / runs <= alpha


def test_a_fifty_percent_slower_median_in_whole_seconds_does_not_pass_at_thirty() -> None:
    """Latencies recorded in whole seconds: primary median 0.8 s, the candidate's 1.2 s. Both p50s
    are 1 s, a run of ties: the bound must not be zero-width (it passed at n = 30), nor fail."""
    for seed in range(20):
        rng = random.Random(seed)
        primary = tuple(float(round(rng.lognormvariate(math.log(0.8), 0.5))) for _ in range(30))
        candidate = tuple(float(round(rng.lognormvariate(math.log(1.2), 0.5))) for _ in range(30))
        verdicts = _by_metric(judge(ArmWindow(0, 0, primary), ArmWindow(0, 0, candidate), TH))
        assert verdicts["latency_p50"].outcome is Outcome.INCONCLUSIVE, verdicts["latency_p50"]
        assert verdicts["latency_p95"].outcome is Outcome.INCONCLUSIVE


def test_ties_widen_a_bound_to_the_next_recorded_value() -> None:
    primary = tuple(float(v) for v in [0.5] * 30 + [1] * 200 + [2] * 40)
    verdict = _by_metric(judge(ArmWindow(0, 0, primary), ArmWindow(0, 0, primary), TH))[
        "latency_p50"
    ]
    assert verdict.estimate == 1.0
    assert verdict.high is not None and verdict.high >= 1.2  # at least halfway to 2 s or 0.5 s
    assert verdict.outcome is Outcome.INCONCLUSIVE


def test_a_p95_of_thirty_answers_has_no_upper_bound() -> None:
    rng = random.Random(3)
    primary = tuple(rng.lognormvariate(0.0, 0.5) for _ in range(3000))
    candidate = tuple(rng.lognormvariate(0.0, 0.5) for _ in range(30))
    verdict = _by_metric(judge(ArmWindow(0, 0, primary), ArmWindow(0, 0, candidate), TH))[
        "latency_p95"
    ]
    assert verdict.high is None and verdict.outcome is Outcome.INCONCLUSIVE


def test_equal_judge_scores_and_equal_costs_are_not_known_exactly() -> None:
    scores = _by_metric(judge(ArmWindow(0, 0), ArmWindow(0, 0, judge_deltas=(0.0,) * 30), TH))
    assert scores["judge_score"].outcome is Outcome.INCONCLUSIVE
    assert scores["judge_score"].high is not None and scores["judge_score"].high > 0.5
    same = ArmWindow(0, 0, costs_usd=(0.002,) * 30)
    costs = _by_metric(judge(same, same, TH))["cost_per_request"]
    assert costs.low is not None and costs.high is not None and costs.low < 1.0 < costs.high


def test_judge_scores_of_one_heavy_user_count_as_one_user() -> None:
    """A tenth of the judged pairs are one user's, whose answers score 1 point worse: over users
    the mean is far less certain than over pairs. Half of them one user's: too few effective
    users to judge at all."""
    rng = random.Random(5)
    deltas = [rng.gauss(-1.0, 0.5) for _ in range(60)] + [rng.gauss(0.0, 0.5) for _ in range(540)]
    units = (0,) * 60 + tuple(range(1, 541))

    def judged(units: tuple[int, ...] | None) -> MetricVerdict:
        keyed = {"judge_deltas": units} if units else {}
        candidate = ArmWindow(0, 0, judge_deltas=tuple(deltas), sample_units=keyed)
        return _by_metric(judge(ArmWindow(0, 0), candidate, TH))["judge_score"]

    plain, keyed = judged(None), judged(units)
    assert plain.high is not None and plain.low is not None
    assert keyed.high is not None and keyed.low is not None
    assert keyed.high - keyed.low > 2 * (plain.high - plain.low)
    half = judged((0,) * 300 + tuple(range(1, 301)))
    assert half.outcome is Outcome.INCONCLUSIVE and "effective units" in half.reason


def test_preferences_of_one_reviewer_heavy_user_widen_the_bound() -> None:
    values = (1.0,) * 54 + (0.0,) * 26 + (0.5,) * 20
    units = (0,) * 24 + tuple(range(1, 77))
    plain = _by_metric(judge(ArmWindow(0, 0), ArmWindow(0, 0, preferences=values), TH))
    keyed = _by_metric(
        judge(
            ArmWindow(0, 0),
            ArmWindow(0, 0, preferences=values, sample_units={"preferences": units}),
            TH,
        )
    )
    assert plain["human_preference"].outcome is Outcome.PASS
    assert keyed["human_preference"].outcome is Outcome.INCONCLUSIVE


def test_a_single_unit_holds_every_sample_metric() -> None:
    """Every sample one tenant's: no spread over units can be estimated; nothing passes."""
    rng = random.Random(9)
    values = tuple(rng.lognormvariate(0.0, 0.5) for _ in range(400))
    one = (0,) * 400
    keyed = {k: one for k in ("latencies_s", "costs_usd", "judge_deltas", "preferences")}
    prefs = tuple(rng.choice((0.0, 0.5, 1.0)) for _ in range(400))
    window = ArmWindow(
        0, 0, values, costs_usd=values, judge_deltas=values, preferences=prefs, sample_units=keyed
    )
    verdicts = _by_metric(judge(ArmWindow(0, 0, values, costs_usd=values), window, TH))
    for metric in ("latency_p50", "latency_p95", "human_preference"):
        assert verdicts[metric].outcome is Outcome.INCONCLUSIVE, verdicts[metric]
    for metric in ("cost_per_request", "judge_score"):
        assert verdicts[metric].outcome is Outcome.INCONCLUSIVE, verdicts[metric]
        assert "effective units" in verdicts[metric].reason


def test_a_p95_inside_a_run_of_timeouts_is_bounded() -> None:
    # A tenth of the answers hit a 30 s timeout: the p95 lies in the run of the largest value.
    # Half a cell above it bounds it (the last answer alone would not), so the verdict has a
    # bound and says what more evidence would do; it does not hold as "unbounded" forever.
    rng = random.Random(7)

    def arm(n: int) -> ArmWindow:
        latencies = tuple(30.0 if rng.random() < 0.1 else rng.uniform(1.0, 20.0) for _ in range(n))
        return ArmWindow(n, 0, latencies_s=latencies)

    verdicts = {v.metric: v for v in judge(arm(4000), arm(4000), Thresholds())}
    p95 = verdicts["latency_p95"]
    assert p95.outcome is Outcome.INCONCLUSIVE
    assert p95.low is not None and p95.high is not None and p95.low < 1.0 < p95.high < 2.0
