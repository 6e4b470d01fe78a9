"""The statistical judge: each metric passes on equal arms, fails on a clear regression and is
inconclusive on too few samples, saying what it needs; A/A evidence looked at after every new
sample almost never fails; margins that make sense at low rates; determinism."""

from __future__ import annotations

import math
import random

import pytest
from pydantic import ValidationError

from analyzers.judge_stats import judge
from analyzers.verdicts import ArmWindow, MetricVerdict, Outcome, Thresholds

TH = Thresholds(error_rate_increase=0.02, rate_margin_relative=0.25)
"""The margins most tests here were written for (absolute ones that rule at these rates); the
defaults' own promises are tested with `Thresholds()` below."""


def _lognormal(seed: int, n: int, median: float = 0.8, sigma: float = 0.5) -> tuple[float, ...]:
    rng = random.Random(seed)
    return tuple(median * math.exp(sigma * rng.gauss(0.0, 1.0)) for _ in range(n))


def _arm(
    seed: int,
    n: int = 2000,
    errors: float = 0.02,
    check_pass: float = 0.98,
    corrected: float = 0.05,
    disagree: float = 0.10,
    sigma: float = 0.5,
    median: float = 0.8,
    cost: float = 0.002,
) -> ArmWindow:
    """An arm of n requests with the given rates (exact counts, no sampling noise on rates)."""
    samples = _lognormal(seed, n, median, sigma)
    return ArmWindow(
        requests=n,
        errors=round(n * errors),
        latencies_s=samples,
        ttfts_s=tuple(v / 4 for v in samples),
        costs_usd=tuple(cost * (0.5 + v) for v in _lognormal(seed + 1, n)),
        checks={"json_schema": (round(n * check_pass), n)},
        corrections=(round(n * corrected), n),
        agreement=(round(n * disagree), n),
        noise=(round(n * disagree), n),
    )


def _by_metric(verdicts: list[MetricVerdict]) -> dict[str, MetricVerdict]:
    return {v.metric: v for v in verdicts}


ALL_METRICS = {
    "error_rate",
    "check_pass_rate:json_schema",
    "correction_rate",
    "disagreement",
    "latency_p50",
    "latency_p95",
    "ttft_p50",
    "ttft_p95",
    "cost_per_request",
}


def test_equal_arms_pass_every_metric() -> None:
    verdicts = _by_metric(judge(_arm(1), _arm(2), TH))
    assert set(verdicts) == ALL_METRICS
    for verdict in verdicts.values():
        assert verdict.outcome is Outcome.PASS, verdict
        assert verdict.n_primary == verdict.n_candidate == 2000


@pytest.mark.parametrize(
    ("metric", "candidate"),
    [
        ("error_rate", _arm(2, errors=0.10)),
        ("check_pass_rate:json_schema", _arm(2, check_pass=0.80)),
        ("correction_rate", _arm(2, corrected=0.15)),
        ("disagreement", _arm(2, disagree=0.30)),
        ("latency_p50", _arm(2, median=1.6)),
        ("ttft_p50", _arm(2, median=1.6)),
        ("latency_p95", _arm(2, sigma=0.75)),
        ("ttft_p95", _arm(2, sigma=0.75)),
        ("cost_per_request", _arm(2, cost=0.003)),
    ],
)
def test_a_clear_regression_fails_its_metric(metric: str, candidate: ArmWindow) -> None:
    verdict = _by_metric(judge(_arm(1), candidate, TH))[metric]
    assert verdict.outcome is Outcome.FAIL, verdict
    assert verdict.estimate is not None and verdict.estimate > verdict.threshold
    assert verdict.reason


def test_a_heavier_tail_under_the_same_median_fails_p95_but_not_p50() -> None:
    verdicts = _by_metric(judge(_arm(1), _arm(2, sigma=0.75), TH))
    assert verdicts["latency_p95"].outcome is Outcome.FAIL
    assert verdicts["latency_p50"].outcome is not Outcome.FAIL


@pytest.mark.parametrize("metric", sorted(ALL_METRICS))
def test_too_few_samples_is_inconclusive_never_fail(metric: str) -> None:
    # Ten requests each, the candidate awful on every metric.
    bad = _arm(2, n=10, errors=0.9, check_pass=0.1, corrected=0.9, disagree=0.9, median=8.0)
    verdict = _by_metric(judge(_arm(1, n=10), bad, TH))[metric]
    assert verdict.outcome is Outcome.INCONCLUSIVE
    assert "too few samples" in verdict.reason


def test_empty_windows_give_no_verdicts() -> None:
    # A look at a route with no traffic yet in the window (or none recorded yet, after a store
    # outage): nothing to judge, nothing that could fail.
    assert judge(ArmWindow(0, 0), ArmWindow(0, 0), TH) == []
    with pytest.raises(ValueError, match="sequences"):
        judge(ArmWindow(0, 0), ArmWindow(0, 0), TH, sequences=0)


def test_a_small_real_difference_within_the_margin_does_not_fail() -> None:
    # Error rate 2% -> 2.5% on 20,000 requests: real, but within the 1-point margin.
    primary = ArmWindow(requests=20_000, errors=400)
    candidate = ArmWindow(requests=20_000, errors=500)
    (verdict,) = judge(primary, candidate, TH)
    assert verdict.outcome is Outcome.PASS
    assert verdict.estimate == pytest.approx(0.005)


def test_a_real_regression_fails_only_as_evidence_accumulates_and_never_on_aa() -> None:
    # One rollout step, looked at after every 20 new candidate answers: the A/A candidate never
    # fails (the bounds hold at every look), the broken one (check pass 0.98 -> 0.80) fails
    # once enough answers came in -- not at the first looks, and not much later than it must.
    rng = random.Random(7)
    for broken, expect_fail in ((False, False), (True, True)):
        p_pass = c_pass = n_c = 0
        failed_at = None
        for look in range(1, 31):
            for _ in range(20):
                n_c += 1
                c_pass += rng.random() < (0.80 if broken else 0.98)
            p_pass = round(n_c * 19 * 0.98)
            verdict = judge(
                ArmWindow(0, 0, checks={"c": (p_pass, n_c * 19)}),
                ArmWindow(0, 0, checks={"c": (c_pass, n_c)}),
                TH,
                sequences=5,
            )[0]
            if verdict.outcome is Outcome.FAIL:
                failed_at = failed_at or look
        assert (failed_at is not None) is expect_fail
        if expect_fail:
            assert failed_at is not None and 3 <= failed_at <= 15


def test_the_false_rollback_budget_holds_over_many_looks() -> None:
    # 300 A/A rollouts of a rate metric looked at 25 times each as evidence grows: the share
    # that ever fails stays within the budget (0.01 over the call's metrics and sequences).
    rng = random.Random(11)
    th = Thresholds(error_rate_increase=0.0, rate_margin_relative=0.0)
    ever_failed = 0
    for _ in range(300):
        errors_p = errors_c = n = 0
        for _look in range(25):
            for _ in range(80):
                n += 1
                errors_p += rng.random() < 0.05
                errors_c += rng.random() < 0.05
            (verdict,) = judge(ArmWindow(n, errors_p), ArmWindow(n, errors_c), th)
            if verdict.outcome is Outcome.FAIL:
                ever_failed += 1
                break
    assert ever_failed <= 6  # 0.01 of 300 is 3; the bound is conservative, so usually 0


def test_budget_is_split_over_metrics_and_sequences() -> None:
    one = judge(ArmWindow(100, 1), ArmWindow(100, 1), TH)[0]
    split = judge(ArmWindow(100, 1), ArmWindow(100, 1), TH, sequences=4)[0]
    assert one.alpha == pytest.approx(TH.false_rollback_rate)
    assert split.alpha == pytest.approx(TH.false_rollback_rate / 4)
    several = judge(_arm(1), _arm(2), TH)
    assert all(v.alpha == pytest.approx(0.01 / len(several)) for v in several)


def test_an_unsettled_metric_says_how_many_more_answers_it_needs() -> None:
    # 60 canary answers without an error: not enough to show the 2-point margin yet.
    primary, candidate = ArmWindow(1200, 12), ArmWindow(60, 0)
    (verdict,) = judge(primary, candidate, TH)
    assert verdict.outcome is Outcome.INCONCLUSIVE
    assert verdict.needs is not None and verdict.needs > 0
    assert f"about {verdict.needs} more" in verdict.reason
    # With that many more answers of the same quality it passes; with a tenth fewer, not yet.
    n = 60 + verdict.needs
    (later,) = judge(ArmWindow(n * 20, n // 5), ArmWindow(n, 0), TH)
    assert later.outcome is Outcome.PASS and later.needs == 0
    m = 60 + verdict.needs * 9 // 10
    (sooner,) = judge(ArmWindow(m * 20, m // 5), ArmWindow(m, 0), TH)
    assert sooner.outcome is Outcome.INCONCLUSIVE


def test_a_candidate_beyond_its_margin_needs_nothing_more_to_be_failed_later() -> None:
    # Estimated 4 points worse, not yet significant: more of the same cannot make it pass.
    (verdict,) = judge(ArmWindow(2000, 20), ArmWindow(50, 3), TH)
    assert verdict.outcome is Outcome.INCONCLUSIVE
    assert verdict.needs is None and "a better estimate" in verdict.reason


def test_a_fail_has_no_needs_and_a_pass_needs_nothing() -> None:
    verdicts = _by_metric(judge(_arm(1), _arm(2, errors=0.10), TH))
    assert verdicts["error_rate"].outcome is Outcome.FAIL and verdicts["error_rate"].needs is None
    assert verdicts["latency_p50"].outcome is Outcome.PASS and verdicts["latency_p50"].needs == 0


def test_rate_margins_grow_with_the_primarys_rate() -> None:
    # A 20% error rate on the primary: the margin is 25% of it (5 points), not the 2 absolute.
    (verdict,) = judge(ArmWindow(20_000, 4000), ArmWindow(20_000, 4600), TH)
    assert verdict.threshold == pytest.approx(0.05)
    assert verdict.outcome is Outcome.PASS  # +3 points: within 5
    (low,) = judge(ArmWindow(20_000, 100), ArmWindow(20_000, 700), TH)
    assert low.threshold == pytest.approx(0.02)
    assert low.outcome is Outcome.FAIL  # +3 points on a 0.5% base: beyond 2


def test_fast_endpoints_are_not_failed_for_a_millisecond() -> None:
    # p50 4 ms -> 6 ms: x1.5, beyond the x1.2 ratio, but within the 50 ms absolute floor.
    fast = tuple(0.004 + i * 1e-6 for i in range(500))
    slower = tuple(0.006 + i * 1e-6 for i in range(500))
    verdicts = _by_metric(judge(ArmWindow(500, 0, slower), ArmWindow(500, 0, fast), TH))
    assert verdicts["latency_p50"].outcome is not Outcome.FAIL
    verdicts = _by_metric(
        judge(
            ArmWindow(500, 0, fast),
            ArmWindow(500, 0, slower),
            TH.model_copy(update={"latency_min_increase_s": 0.0}),
        )
    )
    assert verdicts["latency_p50"].outcome is Outcome.FAIL


def test_disagreement_without_a_noise_floor_is_left_out() -> None:
    # The canary is shadowed but the route asks the primary twice never: no floor, no verdict
    # (a verdict would be inconclusive forever and hold the rollout).
    primary = ArmWindow(500, 5)
    candidate = ArmWindow(500, 5, agreement=(40, 500))
    assert "disagreement" not in _by_metric(judge(primary, candidate, TH))


def test_llm_judge_scores_are_judged_as_paired_differences() -> None:
    rng = random.Random(3)
    equal = tuple(rng.gauss(0.0, 1.0) for _ in range(400))
    worse = tuple(rng.gauss(-1.5, 1.0) for _ in range(400))
    ok = _by_metric(judge(ArmWindow(0, 0), ArmWindow(0, 0, judge_deltas=equal), TH))
    bad = _by_metric(judge(ArmWindow(0, 0), ArmWindow(0, 0, judge_deltas=worse), TH))
    few = _by_metric(judge(ArmWindow(0, 0), ArmWindow(0, 0, judge_deltas=worse[:10]), TH))
    assert ok["judge_score"].outcome is Outcome.PASS
    assert bad["judge_score"].outcome is Outcome.FAIL
    assert bad["judge_score"].estimate == pytest.approx(1.5, abs=0.2)
    assert few["judge_score"].outcome is Outcome.INCONCLUSIVE


def test_severe_findings_are_a_rate() -> None:
    primary = ArmWindow(2000, 0, findings=(20, 2000))
    same = ArmWindow(2000, 0, findings=(22, 2000))
    worse = ArmWindow(2000, 0, findings=(400, 2000))
    assert _by_metric(judge(primary, same, TH))["findings"].outcome is Outcome.PASS
    assert _by_metric(judge(primary, worse, TH))["findings"].outcome is Outcome.FAIL


def test_the_judge_is_deterministic() -> None:
    first = judge(_arm(1), _arm(2, sigma=0.7), TH)
    second = judge(_arm(1), _arm(2, sigma=0.7), TH)
    assert first == second


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="requests/errors"):
        ArmWindow(requests=5, errors=6)
    with pytest.raises(ValueError, match=r"checks\.c"):
        ArmWindow(requests=5, errors=0, checks={"c": (6, 5)})
    with pytest.raises(ValueError, match="sequences"):
        judge(ArmWindow(10, 0), ArmWindow(10, 0), TH, sequences=0)
    with pytest.raises(ValidationError, match="spending_scale_looks was removed"):
        Thresholds.model_validate({"spending_scale_looks": 180})
    with pytest.raises(ValidationError, match="error_rate_increase"):
        Thresholds(error_rate_increase=-0.1)
    with pytest.raises(ValidationError):
        Thresholds.model_validate({"no_such_key": 1})


def test_a_units_breakdown_must_add_up_to_its_tally_and_name_a_series() -> None:
    window = ArmWindow(
        3,
        1,
        latencies_s=(0.1, 0.2, 0.3),
        checks={"c": (2, 3)},
        units={"errors": ((1, 2), (0, 1)), "checks:c": ((1, 2), (1, 1))},
        sample_units={"latencies_s": (0, 0, 1)},
    )
    assert window.units["errors"] == ((1, 2), (0, 1))
    with pytest.raises(ValueError, match=r"units\.errors: per-unit tallies add up to 1/2"):
        ArmWindow(3, 1, units={"errors": ((1, 1), (0, 1))})
    with pytest.raises(ValueError, match=r"units\.checks:d: no such tally"):
        ArmWindow(3, 1, units={"checks:d": ((0, 1),)})
    with pytest.raises(ValueError, match=r"units\.bogus: no such tally"):
        ArmWindow(3, 1, units={"bogus": ()})
    with pytest.raises(ValueError, match=r"sample_units\.latencies_s: 2 units for 1 samples"):
        ArmWindow(3, 1, latencies_s=(0.1,), sample_units={"latencies_s": (0, 1)})
    with pytest.raises(ValueError, match=r"sample_units\.preferences: 1 units for 0 samples"):
        ArmWindow(3, 1, sample_units={"preferences": (0,)})


# rule_adaptation: rule-flip probes not followed, candidate against primary, and the floor


def _probed(not_followed: int, probes: int) -> ArmWindow:
    return ArmWindow(0, 0, adaptation=(not_followed, probes))


def test_a_memoriser_fails_rule_adaptation() -> None:
    verdicts = _by_metric(judge(_probed(2, 60), _probed(58, 60), Thresholds()))
    assert set(verdicts) == {"rule_adaptation"}
    verdict = verdicts["rule_adaptation"]
    assert verdict.outcome is Outcome.FAIL
    assert verdict.estimate == pytest.approx(56 / 60)
    assert (verdict.n_primary, verdict.n_candidate) == (60, 60)


def test_a_follower_passes_rule_adaptation() -> None:
    verdict = _by_metric(judge(_probed(4, 400), _probed(5, 400), Thresholds()))["rule_adaptation"]
    assert verdict.outcome is Outcome.PASS
    assert verdict.high is not None and verdict.high <= verdict.threshold


def test_too_few_probes_hold_and_never_fail() -> None:
    # 12 of 29 not followed: bad, but not so bad that the exact guard can tell on 29 probes
    verdict = _by_metric(judge(_probed(0, 29), _probed(12, 29), Thresholds()))["rule_adaptation"]
    assert verdict.outcome is Outcome.INCONCLUSIVE
    assert verdict.needs == 1
    # its own minimum, not the traffic rates' one
    fewer = Thresholds(min_samples_probes=10)
    assert "too few" not in judge(_probed(0, 29), _probed(12, 29), fewer)[0].reason


def test_no_probes_no_verdict() -> None:
    assert judge(_probed(0, 0), _probed(0, 0), Thresholds()) == []
    assert judge(ArmWindow(0, 0), ArmWindow(0, 0), Thresholds(), min_adaptation=0.8) == []


def test_min_adaptation_fails_a_candidate_surely_below_it_even_when_the_primary_is_no_better() -> (
    None
):
    # both arms follow 60%: equal, so the comparison passes or holds, but 60% < 90% fails
    verdicts = _by_metric(
        judge(_probed(160, 400), _probed(160, 400), Thresholds(), min_adaptation=0.9)
    )
    floor = verdicts["rule_adaptation:min_adaptation"]
    assert floor.outcome is Outcome.FAIL
    assert floor.estimate == pytest.approx(0.3)  # the floor minus the candidate's adaptation
    assert verdicts["rule_adaptation"].outcome is not Outcome.FAIL


def test_min_adaptation_passes_when_the_lower_bound_is_above_it() -> None:
    floor = _by_metric(judge(_probed(2, 200), _probed(2, 200), Thresholds(), min_adaptation=0.8))[
        "rule_adaptation:min_adaptation"
    ]
    assert floor.outcome is Outcome.PASS
    assert floor.high is not None and floor.high <= 0.0


def test_min_adaptation_near_the_candidates_rate_holds() -> None:
    floor = _by_metric(judge(_probed(60, 300), _probed(60, 300), Thresholds(), min_adaptation=0.8))[
        "rule_adaptation:min_adaptation"
    ]
    assert floor.outcome is Outcome.INCONCLUSIVE


def test_min_adaptation_is_anytime_valid_for_a_candidate_at_the_floor() -> None:
    # a candidate exactly at the floor, looked at every 10 probes up to 500: rarely ever failed
    rng = random.Random(13)
    th, runs, failed = Thresholds(), 200, 0
    for _ in range(runs):
        stuck = 0
        for n in range(1, 501):
            stuck += rng.random() >= 0.8
            if n % 10 == 0 and n >= th.min_samples_probes:
                verdict = judge(
                    _probed(0, n), _probed(stuck, n), th, min_adaptation=0.8, with_needs=False
                )[1]
                if verdict.outcome is Outcome.FAIL:
                    failed += 1
                    break
    assert failed / runs <= th.false_rollback_rate * 2 + 0.01


def test_bad_adaptation_tallies_are_refused() -> None:
    with pytest.raises(ValueError, match="adaptation"):
        ArmWindow(0, 0, adaptation=(5, 3))


# --- human_preference: blind reviews of the candidate against the primary ------------------------


def _reviewed(wins: int, ties: int, losses: int) -> ArmWindow:
    """A candidate window of blind reviews: preferred, tied, and the primary preferred."""
    return ArmWindow(0, 0, preferences=(1.0,) * wins + (0.5,) * ties + (0.0,) * losses)


def test_a_candidate_people_prefer_less_fails_human_preference() -> None:
    verdict = _by_metric(judge(ArmWindow(0, 0), _reviewed(20, 10, 90), TH))["human_preference"]
    assert verdict.outcome is Outcome.FAIL
    assert verdict.estimate == pytest.approx(0.5 - 25 / 120)
    assert "21% of 120 blind reviews" in verdict.reason


def test_a_candidate_people_prefer_as_often_passes_human_preference() -> None:
    verdict = _by_metric(judge(ArmWindow(0, 0), _reviewed(150, 100, 150), TH))["human_preference"]
    assert verdict.outcome is Outcome.PASS
    assert verdict.needs == 0


def test_few_reviews_hold_and_never_fail_even_when_all_prefer_the_primary() -> None:
    verdict = _by_metric(judge(ArmWindow(0, 0), _reviewed(0, 0, 19), TH))["human_preference"]
    assert verdict.outcome is Outcome.INCONCLUSIVE
    assert verdict.needs == 1
    assert "need 20" in verdict.reason


def test_all_ties_still_have_a_spread() -> None:
    ties = _by_metric(judge(ArmWindow(0, 0), _reviewed(0, 20, 0), TH))["human_preference"]
    assert ties.estimate == 0.0
    assert ties.low is not None and ties.high is not None and ties.low < 0 < ties.high
    assert ties.outcome is Outcome.PASS


def test_no_reviews_yet_hold_and_unjudged_review_gives_no_verdict() -> None:
    assert "human_preference" not in _by_metric(judge(ArmWindow(0, 0), ArmWindow(0, 0), TH))
    none_yet = judge(ArmWindow(0, 0), ArmWindow(0, 0, preferences=()), TH)
    assert [(v.metric, v.outcome, v.needs) for v in none_yet] == [
        ("human_preference", Outcome.INCONCLUSIVE, 20)
    ]


def test_preferences_are_0_half_or_1() -> None:
    with pytest.raises(ValueError, match="preferences"):
        ArmWindow(0, 0, preferences=(0.7,))


def test_equal_preference_looked_at_after_every_review_seldom_fails() -> None:
    """A/A: reviewers who cannot tell the answers apart (45% A, 10% tie, 45% B), looked at after
    every review up to 300: the share of runs that ever fail stays within the false-rollback
    budget."""
    rng = random.Random(16)
    runs, failed = 200, 0
    for _ in range(runs):
        values: list[float] = []
        for _ in range(300):
            draw = rng.random()
            values.append(1.0 if draw < 0.45 else 0.5 if draw < 0.55 else 0.0)
            if len(values) < TH.min_samples_reviews:
                continue
            (verdict,) = judge(
                ArmWindow(0, 0), ArmWindow(0, 0, preferences=tuple(values)), TH, with_needs=False
            )
            if verdict.outcome is Outcome.FAIL:
                failed += 1
                break
    assert failed / runs <= TH.false_rollback_rate


# --- rates: exact guard, capped margins, the null boundary, units of assignment -----------------


def test_a_canary_failing_every_request_rolls_back_before_the_minimum_sample() -> None:
    primary = ArmWindow(450, 5)
    for n in (15, 30, 49):
        (verdict,) = judge(primary, ArmWindow(n, n), TH, sequences=2)
        assert verdict.outcome is Outcome.FAIL, n
        assert "exact test" in verdict.reason
    # the same few requests with a plausible error rate hold, as before
    (few,) = judge(primary, ArmWindow(49, 2), TH, sequences=2)
    assert few.outcome is Outcome.INCONCLUSIVE and "too few samples" in few.reason
    # and nothing before either arm has a request to compare with
    assert judge(ArmWindow(0, 0), ArmWindow(49, 49), TH)[0].outcome is Outcome.INCONCLUSIVE


def test_a_dead_canary_beside_a_failing_primary_is_not_inconclusive_forever() -> None:
    # 0.8 + a relative margin of 0.2 or more would be 1: unreachable. The margin is capped at
    # half the distance to 1, so 100% against 80% fails once the evidence shows it.
    (verdict,) = judge(ArmWindow(2000, 1600), ArmWindow(400, 400), TH, sequences=2)
    assert verdict.threshold == pytest.approx(0.1)
    assert verdict.outcome is Outcome.FAIL
    (same,) = judge(ArmWindow(2000, 1600), ArmWindow(2000, 1600), TH)
    assert same.outcome is Outcome.PASS


def test_a_candidate_at_the_margin_that_saw_few_events_is_not_passed() -> None:
    # The margin is 2 points on a 1% primary: a candidate at 3% that happened to see 1 error in
    # 300 is judged with the spread a 3% rate has at the margin, not the spread of its 0.3%.
    th = TH.model_copy(update={"error_rate_increase": 0.02, "rate_margin_relative": 0.0})
    (verdict,) = judge(ArmWindow(2700, 27), ArmWindow(300, 1), th)
    assert verdict.outcome is Outcome.INCONCLUSIVE
    assert verdict.high is not None and verdict.high > 0.02


def _singletons(requests: int, errors: int) -> tuple[tuple[int, int], ...]:
    return tuple((1, 1) for _ in range(errors)) + tuple((0, 1) for _ in range(requests - errors))


def test_one_request_per_unit_changes_nothing() -> None:
    for p_arm, c_arm in (((2000, 20), (300, 4)), ((900, 9), (100, 0)), ((400, 40), (60, 20))):
        plain = judge(ArmWindow(*p_arm), ArmWindow(*c_arm), TH)
        keyed = judge(
            ArmWindow(*p_arm, units={"errors": _singletons(*p_arm)}),
            ArmWindow(*c_arm, units={"errors": _singletons(*c_arm)}),
            TH,
        )
        assert keyed == plain


def test_correlated_units_widen_a_rate_and_keep_a_composition_from_failing() -> None:
    # A/A over 60 users per arm: every user's requests share one rate (0.5% or 20%), and the
    # canary happened to get more of the error-prone users. Per request this looks like a
    # regression; per unit it is the traffic's composition, and the bound says so.
    def arm(bad_users: int, users: int, requests: int) -> ArmWindow:
        per_unit = tuple(
            (round(requests * (0.2 if i < bad_users else 0.005)), requests) for i in range(users)
        )
        return ArmWindow(
            sum(n for _, n in per_unit),
            sum(k for k, _ in per_unit),
            units={"errors": per_unit},
        )

    primary, candidate = arm(3, 60, 200), arm(15, 60, 200)
    plain = judge(ArmWindow(primary.requests, primary.errors), ArmWindow(candidate.requests,
                  candidate.errors), TH)[0]  # fmt: skip
    clustered = judge(primary, candidate, TH)[0]
    assert plain.outcome is Outcome.FAIL
    assert clustered.outcome is not Outcome.FAIL
    assert clustered.low is not None and plain.low is not None
    assert clustered.high is not None and plain.high is not None
    assert clustered.high - clustered.low > 3 * (plain.high - plain.low)
    # a check's breakdown counts passes; the judge turns it into failures per unit
    checked = judge(
        ArmWindow(0, 0, checks={"c": (primary.requests - primary.errors, primary.requests)},
                  units={"checks:c": tuple((n - k, n) for k, n in primary.units["errors"])}),
        ArmWindow(0, 0, checks={"c": (candidate.requests - candidate.errors, candidate.requests)},
                  units={"checks:c": tuple((n - k, n) for k, n in candidate.units["errors"])}),
        TH,
    )[0]  # fmt: skip
    assert checked.outcome is not Outcome.FAIL


def _step(
    rng: random.Random, base: float, shift: float, weight: float, looks: int, per_look: int
) -> list[Outcome]:
    """A step's outcomes at each look: the candidate's error rate base + shift, `per_look`
    requests of the route between looks, a share `weight` of them the canary's."""
    k_p = n_p = k_c = n_c = 0
    outcomes = []
    for _ in range(looks):
        for _ in range(per_look):
            if rng.random() < weight:
                n_c += 1
                k_c += rng.random() < base + shift
            else:
                n_p += 1
                k_p += rng.random() < base
        (verdict,) = judge(
            ArmWindow(n_p, k_p), ArmWindow(n_c, k_c), Thresholds(), sequences=8, with_needs=False
        )
        outcomes.append(verdict.outcome)
    return outcomes


def test_the_defaults_never_pass_a_doubled_error_rate_and_fail_it_with_evidence() -> None:
    # 1% -> 2% on a 10% step, looked at every 1,000 requests up to 150,000 (15,000 canary).
    rng = random.Random(21)
    runs = [_step(rng, 0.01, 0.01, 0.1, 150, 1000) for _ in range(20)]
    assert not any(Outcome.PASS in outcomes for outcomes in runs)
    # about half fail by then (12.5 min of a 10% step at 200 req/s); at 60,000 nearly all do
    assert sum(outcomes[-1] is Outcome.FAIL for outcomes in runs) >= 8


def test_a_rate_at_its_margin_passes_at_most_5_percent_at_small_and_large_steps() -> None:
    # The worst case of the old judge: a 50% step, where the primary's rate (and so a relative
    # margin) is as noisy as the candidate's; and the 10% step with few canary events.
    rng = random.Random(22)
    for weight in (0.5, 0.1):
        runs = [_step(rng, 0.01, 0.005, weight, 30, 600) for _ in range(100)]
        passed = sum(Outcome.PASS in outcomes for outcomes in runs)
        failed = sum(Outcome.FAIL in outcomes for outcomes in runs)
        assert passed <= 7, weight  # 5% of 100; the plug-in relative margin passed 14% at 50%
        assert failed <= 1, weight  # the fail level is 0.00125 a step
