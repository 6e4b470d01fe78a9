"""Sizing a rollout before it starts: can the configured steps pass at the route's recent traffic,
how long each step takes, and what to change if they cannot (pure: a traffic profile in, a plan out;
`mirrorgate rollout plan` and `GET /admin/rollouts/{route}/plan`).

The plan asks the judge itself (`analyzers.judge_stats.judge`). For each step it builds the arms a
candidate *as good as the primary* would give at that step's share — the primary's own recent
errors, latencies, costs and check pass rates, spread evenly over the step's canary and baseline
answers — and finds the fewest canary answers at which every metric passes. At the route's rate
that is a time; a step lasts at least `step_interval_s`. Evidence is judged per step, so every step
needs its own answers: the first (smallest) step usually decides.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from analyzers.judge_stats import judge
from analyzers.verdicts import ArmWindow, Outcome, Tally, Thresholds
from proxy.config import CanarySpec, ProbesSpec

PRIMARY_CAP = 20
"""The baseline arm of a planned step holds at most this many answers per canary answer."""

HORIZON_S = 24 * 3600.0
"""A step that would need longer than this is reported as not passing."""


@dataclass(frozen=True, slots=True)
class TrafficProfile:
    """What the route's primary served recently."""

    rate_per_s: float
    """Requests per second over the profile's period."""
    requests: int
    """Answers the distributions below were taken from (the latest, at most 20,000)."""
    errors: int
    latencies_s: tuple[float, ...] = ()
    ttfts_s: tuple[float, ...] = ()
    costs_usd: tuple[float, ...] = ()
    checks: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """Per check of the route's rule: (passed, total)."""


@dataclass(frozen=True, slots=True)
class StepPlan:
    weight: float
    canary_per_s: float
    needs: Mapping[str, int | None]
    """Per metric: canary answers needed to pass (None: not within the horizon)."""
    duration_s: float | None
    """How long the step takes (at least `step_interval_s`); None: does not pass."""
    holding: str | None
    """The metric that takes longest."""


@dataclass(frozen=True, slots=True)
class RolloutPlan:
    route: str
    rate_per_s: float
    steps: tuple[StepPlan, ...]
    total_s: float | None
    """Until promotion; None when some step cannot pass."""
    advice: tuple[str, ...]


def _spread(values: Sequence[float], n: int) -> tuple[float, ...]:
    """`n` values with the distribution of sorted `values` (evenly spaced quantiles)."""
    if not values or n <= 0:
        return ()
    size = len(values)
    return tuple(values[min(size - 1, int((i + 0.5) * size / n))] for i in range(n))


_Arms = tuple[ArmWindow, ArmWindow, dict[str, Tally], dict[str, Tally]]
"""(primary, candidate, primary's check tallies, candidate's)."""


def _arms(profile: TrafficProfile, n_canary: int, weight: float) -> _Arms:
    # The baseline's answers over the same time, at most PRIMARY_CAP times the canary's: beyond
    # that its share of the spread is below 5 % and the plan would only grow slower.
    ratio = (100 - weight) / weight if weight < 100 else 1.0
    n_primary = max(1, round(n_canary * min(ratio, PRIMARY_CAP)))
    share = profile.errors / profile.requests if profile.requests else 0.0
    lat, ttft, cost = (sorted(v) for v in (profile.latencies_s, profile.ttfts_s, profile.costs_usd))

    def arm(n: int) -> ArmWindow:
        return ArmWindow(
            requests=n,
            errors=round(n * share),
            latencies_s=_spread(lat, n),
            ttfts_s=_spread(ttft, round(n * len(ttft) / max(1, len(lat)))) if lat else (),
            costs_usd=_spread(cost, round(n * len(cost) / max(1, profile.requests))),
        )

    def checks(n: int) -> dict[str, Tally]:
        return {name: (round(n * p / t), n) for name, (p, t) in profile.checks.items() if t}

    primary, candidate = arm(n_primary), arm(n_canary)
    return primary, candidate, checks(n_primary), checks(n_canary)


def _passes(
    profile: TrafficProfile,
    n: int,
    weight: float,
    th: Thresholds,
    metrics: set[str],
    sequences: int,
) -> dict[str, bool]:
    primary, candidate, p_checks, c_checks = _arms(profile, n, weight)
    # Only outcomes are wanted here: the plan finds the answers needed by searching itself.
    verdicts = judge(primary, candidate, th, sequences=sequences, with_needs=False)
    if p_checks:
        verdicts += judge(
            ArmWindow(0, 0, checks=p_checks),
            ArmWindow(0, 0, checks=c_checks),
            th,
            sequences=sequences,
            with_needs=False,
        )
    return {
        v.metric: v.outcome is Outcome.PASS
        for v in verdicts
        if v.metric.partition(":")[0] in metrics
    }


def _needed(
    profile: TrafficProfile,
    weight: float,
    th: Thresholds,
    metrics: set[str],
    sequences: int,
    most: int,
) -> dict[str, int | None]:
    """Per metric, the fewest canary answers at which it passes (None: not by `most`): doubling
    from a handful, then bisecting each metric to 1 %."""
    found: dict[str, int | None] = {}
    low, n = 1, 16
    pending: set[str] | None = None
    while True:
        passing = _passes(profile, min(n, most), weight, th, metrics, sequences)
        if pending is None:
            pending = set(passing)
        for name in [m for m in pending if passing.get(m, False)]:
            found[name] = _bisect(profile, weight, th, metrics, sequences, name, low, min(n, most))
            pending.discard(name)
        if not pending or n >= most:
            break
        low, n = n, n * 2
    found.update(dict.fromkeys(pending, None))
    return found


def _bisect(
    profile: TrafficProfile,
    weight: float,
    th: Thresholds,
    metrics: set[str],
    sequences: int,
    name: str,
    low: int,
    high: int,
) -> int:
    while high - low > max(1, low // 100):  # to 1 %: a plan, not a promise
        mid = (low + high) // 2
        if _passes(profile, mid, weight, th, metrics, sequences).get(name, False):
            high = mid
        else:
            low = mid
    return high


def plan_rollout(
    route: str,
    profile: TrafficProfile,
    canary: CanarySpec,
    *,
    horizon_s: float = HORIZON_S,
    probes: ProbesSpec | None = None,
) -> RolloutPlan:
    """The plan of `canary`'s steps at `profile`'s traffic (see the module's docstring).
    `probes`: the route's rule's, when `rule_adaptation` is judged; the steps do not wait for it
    (its probes are counted since the rollout started, across steps), an advice line says how
    long it needs."""
    analysis = canary.analysis
    th = analysis.thresholds
    if "min_samples_rate" not in th.model_fields_set:
        th = th.model_copy(update={"min_samples_rate": analysis.min_samples})
    metrics = set(analysis.metrics)
    sequences = len(canary.steps)
    judged = [w for w in canary.steps if w < 100] or canary.steps[:1]
    steps: list[StepPlan] = []
    for weight in judged:
        canary_per_s = profile.rate_per_s * weight / 100
        most = max(2, math.floor(canary_per_s * horizon_s))
        if profile.requests == 0 or canary_per_s <= 0:
            steps.append(StepPlan(weight, canary_per_s, {}, None, None))
            continue
        needs = _needed(profile, weight, th, metrics, sequences, most)
        missing = [m for m, n in needs.items() if n is None]
        if missing:
            steps.append(StepPlan(weight, canary_per_s, needs, None, missing[0]))
            continue
        longest = max(needs.items(), key=lambda kv: kv[1] or 0, default=(None, 0))
        duration = max(canary.step_interval_s, (longest[1] or 0) / canary_per_s)
        steps.append(StepPlan(weight, canary_per_s, needs, duration, longest[0]))
    total = (
        None
        if any(s.duration_s is None for s in steps)
        else sum(s.duration_s or 0.0 for s in steps)
    )
    advice = _advice(profile, canary, steps)
    if probes is not None and "rule_adaptation" in metrics:
        advice += (_probe_advice(profile.rate_per_s, probes, th),)
    return RolloutPlan(route, profile.rate_per_s, tuple(steps), total, advice)


def probe_rate(rate_per_s: float, probes: ProbesSpec) -> float:
    """Rule-flip probes per second each target gets at `rate_per_s` requests of the rule."""
    return min(rate_per_s * probes.sample, probes.max_per_hour / 3600)


def _probe_advice(rate_per_s: float, probes: ProbesSpec, th: Thresholds) -> str:
    per_s = probe_rate(rate_per_s, probes)
    need = th.min_samples_probes
    if per_s <= 0:
        return (
            f"rule_adaptation needs {need} rule-flip probes per model and none are sampled at "
            "this traffic: it holds until they come (raise probes.sample)"
        )
    return (
        f"rule_adaptation needs at least {need} rule-flip probes per model since the rollout "
        f"started: at {per_s:.3g} probes/s per target (sample {probes.sample:g}, max_per_hour "
        f"{probes.max_per_hour}) about {need / per_s / 60:.0f} min"
    )


def _advice(
    profile: TrafficProfile, canary: CanarySpec, steps: Sequence[StepPlan]
) -> tuple[str, ...]:
    advice: list[str] = []
    if profile.requests == 0:
        return ("no recent traffic on the route's primary: nothing to size the rollout on",)
    for step in steps:
        if step.duration_s is None:
            advice.append(
                f"the {step.weight:g}% step cannot pass {step.holding or 'its metrics'} within "
                f"{HORIZON_S / 3600:g} h at {step.canary_per_s:.3g} canary answers/s: start at a "
                "larger share, or widen that metric's margin"
            )
        elif canary.max_hold_s is not None and step.duration_s > canary.max_hold_s:
            advice.append(
                f"the {step.weight:g}% step needs about {step.duration_s / 60:.0f} min "
                f"({step.holding}), beyond max_hold_s ({canary.max_hold_s:g}s): it would warn; "
                "start at a larger share or raise max_hold_s"
            )
    if steps and steps[0].duration_s is not None and len(steps) > 1:
        first = steps[0]
        if first.duration_s and first.duration_s > 4 * sum(s.duration_s or 0 for s in steps[1:]):
            advice.append(
                f"the first step ({first.weight:g}%) takes most of the time; each step is judged "
                "on its own answers, so a larger first share shortens the rollout the most"
            )
    return tuple(advice)
