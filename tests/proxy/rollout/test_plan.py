"""The rollout planner: at a route's recent traffic, how long each step takes, which metric holds
it, and what to change when the steps cannot pass; its answers agree with the judge."""

from __future__ import annotations

import math
import random

from analyzers.judge_stats import judge
from analyzers.verdicts import ArmWindow, Outcome
from proxy.config import CanarySpec, ProbesSpec
from proxy.rollout.plan import TrafficProfile, plan_rollout


def profile(rate: float, n: int = 4000, errors: float = 0.01) -> TrafficProfile:
    rng = random.Random(1)
    latencies = tuple(0.8 * math.exp(0.5 * rng.gauss(0, 1)) for _ in range(n))
    return TrafficProfile(rate, n, round(n * errors), latencies, checks={"c": (n * 49 // 50, n)})


def test_each_step_needs_its_own_answers_so_the_smallest_step_takes_longest() -> None:
    canary = CanarySpec(model="cand", steps=[10, 25, 50, 100], step_interval_s=60)
    plan = plan_rollout("bot", profile(2.0), canary)
    assert [s.weight for s in plan.steps] == [10, 25, 50]  # 100 is promotion, never judged
    least = [s.least_s for s in plan.steps]
    assert all(d is not None for d in least)
    assert least[0] > least[1] > least[2] >= 60  # type: ignore[operator]
    first = plan.steps[0]
    assert first.holding in first.needs
    # The least time = the answers the slowest metric needs at the step's canary rate.
    assert first.least_s == first.needs[first.holding] / first.canary_per_s  # type: ignore[index,operator]
    # The forecast: a median beyond the noise-free time and a p90 beyond the median, per step
    # and for the whole rollout.
    for step in plan.steps:
        assert step.least_s <= step.duration_s <= step.duration_p90_s  # type: ignore[operator]
    # The median is at least the time without noise (one metric far slower than the others
    # crosses near it); the p90 lies beyond.
    assert sum(least) <= plan.total_s < plan.total_p90_s  # type: ignore[arg-type,operator]


def test_the_needed_answers_are_where_the_judge_starts_to_pass() -> None:
    canary = CanarySpec(model="cand", steps=[50], analysis={"metrics": ["error_rate"]})
    (step,) = plan_rollout("bot", profile(10.0), canary).steps
    n = step.needs["error_rate"]
    assert n is not None

    def outcome(k: int) -> Outcome:
        (verdict,) = judge(
            ArmWindow(k, round(k * 0.01)),
            ArmWindow(k, round(k * 0.01)),
            canary.analysis.thresholds.model_copy(update={"min_samples_rate": 50}),
            sequences=1,
        )
        return verdict.outcome

    assert outcome(n) is Outcome.PASS
    assert outcome(int(n * 0.9)) is not Outcome.PASS


def test_a_tiny_first_step_at_low_traffic_is_called_out_with_advice() -> None:
    canary = CanarySpec(model="cand", steps=[1, 50, 100], max_hold_s=3600)
    plan = plan_rollout("bot", profile(1.0), canary)
    assert plan.steps[0].duration_s is None or plan.steps[0].duration_s > 3600
    assert any("1% step" in a and "larger share" in a for a in plan.advice)


def test_no_traffic_gives_no_plan_but_says_why() -> None:
    plan = plan_rollout("bot", TrafficProfile(0.0, 0, 0), CanarySpec(model="cand"))
    assert plan.total_s is None
    assert plan.advice == (
        "no recent traffic on the route's primary: nothing to size the rollout on",
    )


def _probes(**fields: object) -> ProbesSpec:
    spec = {
        "parameter": r"w=(?P<value>\d+)",
        "values": [150],
        "expect": [{"name": "x", "type": "json"}],
    }
    return ProbesSpec.model_validate(spec | fields)


def test_a_probed_rule_gates_the_first_step_and_a_slow_probe_rate_holds_it() -> None:
    # The old two-point error margin: with the default half point the error rate needs hours at
    # this rate, and no probe rate could be the slowest part of the step.
    canary = CanarySpec.model_validate(
        {"model": "cand", "steps": [10, 50], "step_interval_s": 60,
         "analysis": {"thresholds": {"error_rate_increase": 0.02, "rate_margin_relative": 0.25}}}
    )  # fmt: skip
    plain = plan_rollout("bot", profile(2.0), canary)
    probed = plan_rollout("bot", profile(2.0), canary, probes=_probes())
    first, second = probed.steps
    assert first.needs["rule_adaptation"] is not None and "rule_adaptation" not in second.needs
    # At 0.0556 probes/s the probes come before the traffic metrics can pass: what holds the
    # step is still what holds it without probes.
    assert first.holding == plain.steps[0].holding != "rule_adaptation"
    slow = plan_rollout("bot", profile(2.0), canary, probes=_probes(sample=0.01))
    assert slow.steps[0].holding == "rule_adaptation"  # 0.02 probes/s
    assert slow.steps[0].least_s == slow.steps[0].needs["rule_adaptation"] / 0.02  # type: ignore[operator]
    assert slow.total_s > plain.total_s  # type: ignore[operator]
    (line,) = [a for a in probed.advice if a.startswith("rule_adaptation")]
    # 2 req/s x 0.05 = 0.1/s, capped by max_per_hour 200 at 0.0556/s: 30 probes in 9 min
    assert "30 rule-flip probes" in line and "0.0556 probes/s" in line and "about 9 min" in line
    faster = plan_rollout("bot", profile(2.0), canary, probes=_probes(max_per_hour=100_000))
    assert "about 5 min" in faster.advice[-1]  # 30 / 0.1 s


def test_rule_adaptation_not_judged_gives_no_probe_advice() -> None:
    canary = CanarySpec.model_validate({"model": "cand", "analysis": {"metrics": ["error_rate"]}})
    plan = plan_rollout("bot", profile(2.0), canary, probes=_probes())
    assert not [a for a in plan.advice if a.startswith("rule_adaptation")]
    none_sampled = plan_rollout(
        "bot", profile(2.0), CanarySpec(model="c"), probes=_probes(sample=0)
    )
    assert "none are sampled" in none_sampled.advice[-1]


def test_a_step_with_no_metric_of_the_profile_lasts_its_interval() -> None:
    # Only disagreement is judged, and the profile holds no pairs: nothing to wait for.
    canary = CanarySpec.model_validate(
        {"model": "cand", "steps": [50], "step_interval_s": 60,
         "analysis": {"metrics": ["disagreement"]}}
    )  # fmt: skip
    (step,) = plan_rollout("bot", profile(2.0), canary).steps
    assert step.needs == {} and step.least_s == 60
    assert step.duration_s is not None and step.duration_s >= 60


def test_a_planned_arm_holds_as_many_samples_as_the_judges_windows() -> None:
    from proxy.rollout.evidence import SAMPLES_PER_ARM
    from proxy.rollout.plan import SAMPLES_CAP

    assert SAMPLES_CAP == SAMPLES_PER_ARM
