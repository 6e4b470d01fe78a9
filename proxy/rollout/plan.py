"""Sizing a rollout before it starts: can the configured steps pass at the route's recent traffic,
how long each step takes, and what to change if they cannot (pure: a traffic profile in, a plan out;
`mirrorgate rollout plan` and `GET /admin/rollouts/{route}/plan`).

The plan asks the judge itself (`analyzers.judge_stats.judge`). For each step it builds the arms a
candidate *as good as the primary* would give at that step's share — the primary's own recent
errors, latencies, costs and check pass rates, spread evenly over the step's canary and baseline
answers — and finds the fewest canary answers at which every metric passes. At the route's rate
that is a time; a step lasts at least `step_interval_s`. Evidence is judged per step, so every step
needs its own answers: the first (smallest) step usually decides. `rule_adaptation` is a gating
metric too: its rule-flip probes come at their own rate (`probe_rate`) and count from the
rollout's start, so the first step waits for them as well.

Those needs are the least a rollout takes (evidence without sampling noise). The forecast — a
median and a 90th percentile — simulates each step `FORECAST_RUNS` times on a virtual clock
(`forecast.py`): each metric's estimate wanders around the profile's value as a random walk in
the number of answers (its standard error read off the judge's own bounds), the step passes at
the first look where every metric's bound is within its margin at once, answers and probes arrive
as Poisson processes, and looks come every `analysis.interval_s`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from analyzers.judge_stats import judge
from analyzers.verdicts import ArmWindow, MetricVerdict, Outcome, Tally, Thresholds
from proxy.config import CanarySpec, ProbesSpec

from .budget import RolloutBudget, rollout_budget
from .forecast import Channel, MetricCurve, quantile, sigma_for, simulate_step

PRIMARY_CAP = 20
"""The baseline arm of a planned step holds at most this many answers per canary answer."""

SAMPLES_CAP = 20_000
"""A planned arm holds at most this many latency, TTFT and cost samples, as the judge's windows
do (`proxy.rollout.evidence.SAMPLES_PER_ARM`; a test keeps them equal): a look of the plan costs
what a look of the judge does, and a metric the judge cannot pass on that many samples is not
planned to pass either."""

HORIZON_S = 24 * 3600.0
"""A step that would need longer than this is reported as not passing."""
FORECAST_RUNS = 200
"""Simulated runs of each step behind the forecast's median and 90th percentile."""
FORECAST_SEED = 1
"""The forecast's fixed seed: the same profile gives the same forecast."""


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
    span_s: float | None = None
    """The span `rate_per_s` was measured over: from the oldest exchange of the period asked
    for (a young gateway has less than that) to now; None when not known."""
    probes: Tally | None = None
    """The baseline model's rule-flip probes of the route's rule over the period: (not followed,
    scored); None when not read (a baseline that follows every probe is assumed)."""


@dataclass(frozen=True, slots=True)
class StepPlan:
    weight: float
    canary_per_s: float
    needs: Mapping[str, int | None]
    """Per metric: canary answers needed to pass without sampling noise (None: not within the
    horizon); `rule_adaptation`: rule-flip probes per model, since the rollout started."""
    duration_s: float | None
    """The forecast's median of how long the step takes (at least `step_interval_s`); None:
    does not pass."""
    holding: str | None
    """The metric that takes longest."""
    duration_p90_s: float | None = None
    """The forecast's 90th percentile of the step's time; None: does not pass."""
    least_s: float | None = None
    """The time without sampling noise: the least the step takes."""


@dataclass(frozen=True, slots=True)
class RolloutPlan:
    route: str
    rate_per_s: float
    steps: tuple[StepPlan, ...]
    total_s: float | None
    """The median time until promotion; None when some step cannot pass."""
    advice: tuple[str, ...]
    total_p90_s: float | None = None
    """The 90th percentile of the time until promotion; None when some step cannot pass."""
    probe_per_s: float = 0.0
    """Rule-flip probes per second per model when `rule_adaptation` gates the rollout, else 0."""
    not_forecast: tuple[str, ...] = ()
    """Gating metrics the profile holds no evidence of (corrections, findings, judge scores,
    disagreement, human preference): the forecast cannot say how long they take."""


def _spread(values: Sequence[float], n: int) -> tuple[float, ...]:
    """`n` values with the distribution of sorted `values` (evenly spaced quantiles)."""
    if not values or n <= 0:
        return ()
    size = len(values)
    return tuple(values[min(size - 1, int((i + 0.5) * size / n))] for i in range(n))


_Arms = tuple[ArmWindow, ArmWindow, dict[str, Tally], dict[str, Tally]]
"""(primary, candidate, primary's check tallies, candidate's)."""


def _sorted(profile: TrafficProfile) -> TrafficProfile:
    return replace(
        profile,
        latencies_s=tuple(sorted(profile.latencies_s)),
        ttfts_s=tuple(sorted(profile.ttfts_s)),
        costs_usd=tuple(sorted(profile.costs_usd)),
    )


def _arms(profile: TrafficProfile, n_canary: int, weight: float) -> _Arms:
    # The baseline's answers over the same time, at most PRIMARY_CAP times the canary's: beyond
    # that its share of the spread is below 5 % and the plan would only grow slower.
    ratio = (100 - weight) / weight if weight < 100 else 1.0
    n_primary = max(1, round(n_canary * min(ratio, PRIMARY_CAP)))
    share = profile.errors / profile.requests if profile.requests else 0.0
    # The profile's samples are sorted once per plan (`_sorted`), not on every look.
    lat, ttft, cost = profile.latencies_s, profile.ttfts_s, profile.costs_usd

    def arm(n: int) -> ArmWindow:
        sampled = min(n, SAMPLES_CAP)
        return ArmWindow(
            requests=n,
            errors=round(n * share),
            latencies_s=_spread(lat, sampled),
            ttfts_s=_spread(ttft, round(sampled * len(ttft) / max(1, len(lat)))) if lat else (),
            costs_usd=_spread(cost, round(sampled * len(cost) / max(1, profile.requests))),
        )

    def checks(n: int) -> dict[str, Tally]:
        return {name: (round(n * p / t), n) for name, (p, t) in profile.checks.items() if t}

    primary, candidate = arm(n_primary), arm(n_canary)
    return primary, candidate, checks(n_primary), checks(n_canary)


@dataclass(frozen=True, slots=True)
class _Judging:
    """How the controller judges the rollout: its thresholds, gating metrics and budget."""

    th: Thresholds
    metrics: frozenset[str]
    sequences: int
    budget: RolloutBudget
    min_adaptation: float | None = None


_Look = Callable[[int], dict[str, MetricVerdict]]
"""n → the verdicts, per gating metric, on n answers (or probes) of a noise-free step."""


def _looks(profile: TrafficProfile, weight: float, judging: _Judging) -> _Look:
    def look(n: int) -> dict[str, MetricVerdict]:
        primary, candidate, p_checks, c_checks = _arms(profile, n, weight)
        th, budget = judging.th, judging.budget
        # Only outcomes are wanted: the plan finds the answers needed by searching itself.
        verdicts = judge(
            primary,
            candidate,
            th,
            sequences=judging.sequences,
            with_needs=False,
            budget=budget.traffic,
        )
        if p_checks and budget.epochs > 0:
            verdicts += judge(
                ArmWindow(0, 0, checks=p_checks),
                ArmWindow(0, 0, checks=c_checks),
                th,
                with_needs=False,
                budget=budget.epoch(1),
            )
        return {v.metric: v for v in verdicts if _family(v.metric) in judging.metrics}

    return look


def _probe_looks(profile: TrafficProfile, judging: _Judging) -> _Look:
    """`rule_adaptation` (and its floor) on n probes per model, both following as the baseline
    did over the profile's period."""
    stuck, scored = profile.probes or (0, 0)
    share = stuck / scored if scored else 0.0

    def look(n: int) -> dict[str, MetricVerdict]:
        tally = (round(n * share), n)
        verdicts = judge(
            ArmWindow(0, 0, adaptation=tally),
            ArmWindow(0, 0, adaptation=tally),
            judging.th,
            with_needs=False,
            min_adaptation=judging.min_adaptation,
            budget=judging.budget.probes,
        )
        return {v.metric: v for v in verdicts}

    return look


def _family(metric: str) -> str:
    return metric.partition(":")[0]


def _needed(look: _Look, most: int) -> dict[str, int | None]:
    """Per metric, the fewest answers at which it passes (None: not by `most`): doubling from a
    handful, then bisecting each metric to 1 %."""
    found: dict[str, int | None] = {}
    low, n = 1, 16
    pending: set[str] | None = None
    while True:
        looked = look(min(n, most))
        if pending is None:
            pending = set(looked)
        for name in [m for m in pending if looked[m].outcome is Outcome.PASS]:
            found[name] = _bisect(look, name, low, min(n, most))
            pending.discard(name)
        if not pending or n >= most:
            break
        low, n = n, n * 2
    found.update(dict.fromkeys(pending, None))
    # By name: the forecast draws each metric's noise in this order, so the same profile gives
    # the same forecast in every process (a set's order is not).
    return dict(sorted(found.items()))


def _bisect(look: _Look, name: str, low: int, high: int) -> int:
    while high - low > max(1, low // 100):  # to 1 %: a plan, not a promise
        mid = (low + high) // 2
        verdict = look(mid).get(name)
        if verdict is not None and verdict.outcome is Outcome.PASS:
            high = mid
        else:
            low = mid
    return high


_LOG_METRICS = frozenset({"latency_p50", "latency_p95", "ttft_p50", "ttft_p95", "cost_per_request"})
"""Metrics judged on a log scale (shown as ratios)."""
_TAU_FLOORS = {"rate": 0.01, "log": 0.05, "score": 0.25}
"""The judge's mixing scale is the margin with these floors (`analyzers.judge_stats`)."""
_ADAPTATION_FLOOR_TAU = 0.1
"""…and the adaptation floor's own (`rule_adaptation:min_adaptation`)."""


def _curves(
    look: _Look,
    needs: Mapping[str, int | None],
    th: Thresholds,
    shares: Mapping[str, tuple[float, float]] | None = None,
) -> list[MetricCurve]:
    """Each metric's estimate and noise, read off its noise-free verdict where it first passes.
    `shares`: per rate metric, (its share of bad events, baseline answers per candidate answer),
    for the walk that counts events."""
    beta = 1.0 - th.pass_confidence
    curves: list[MetricCurve] = []
    by_need: dict[int, dict[str, MetricVerdict]] = {}
    for name, need in needs.items():
        if need is None:
            continue
        verdict = by_need.setdefault(need, look(need)).get(name)
        if verdict is None or verdict.low is None or verdict.high is None:
            continue
        kind = "log" if name in _LOG_METRICS else "score" if name == "judge_score" else "rate"
        low, high, margin = verdict.low, verdict.high, verdict.threshold
        if kind == "log":
            low, high, margin = math.log(low), math.log(high), math.log(margin)
        if name == "rule_adaptation:min_adaptation":
            tau = _ADAPTATION_FLOOR_TAU
        else:
            tau = max(margin, _TAU_FLOORS[kind])
        least = (
            th.min_samples_probes
            if name.startswith("rule_adaptation")
            else th.min_samples_latency
            if kind != "rate"
            else th.min_samples_rate
        )
        centre, width = (low + high) / 2, (high - low) / 2
        share, ratio = (shares or {}).get(name, (None, 1.0))
        curves.append(
            MetricCurve(
                name,
                centre,
                sigma_for(width, need, tau, beta),
                margin,
                tau,
                least,
                share=share,
                ratio=ratio,
            )
        )
    return curves


def _rate_shares(profile: TrafficProfile, weight: float) -> dict[str, tuple[float, float]]:
    """The error rate's and each check's share of bad events, with the planned arms' ratio."""
    ratio = min((100 - weight) / weight, PRIMARY_CAP) if weight < 100 else 1.0
    shares = {"error_rate": (profile.errors / profile.requests if profile.requests else 0.0, ratio)}
    for name, (passed, total) in profile.checks.items():
        if total:
            shares[f"check_pass_rate:{name}"] = (1 - passed / total, ratio)
    return shares


def plan_rollout(
    route: str,
    profile: TrafficProfile,
    canary: CanarySpec,
    *,
    horizon_s: float = HORIZON_S,
    probes: ProbesSpec | None = None,
    runs: int = FORECAST_RUNS,
) -> RolloutPlan:
    """The plan of `canary`'s steps at `profile`'s traffic (see the module's docstring).
    `probes`: the route's rule's, when `rule_adaptation` is judged: the first step waits for
    its probes too (they count since the rollout started, across steps)."""
    analysis = canary.analysis
    th = analysis.thresholds
    if "min_samples_rate" not in th.model_fields_set:
        th = th.model_copy(update={"min_samples_rate": analysis.min_samples})
    metrics = frozenset(analysis.metrics)
    probed = probes is not None and "rule_adaptation" in metrics
    profile = _sorted(profile)
    judging = _Judging(
        th,
        metrics,
        len(canary.steps),
        rollout_budget(
            checks=bool(profile.checks) and "check_pass_rate" in metrics,
            probes=probed,
            reviews="human_preference" in metrics,
        ),
        probes.min_adaptation if probes is not None else None,
    )
    beta = 1.0 - th.pass_confidence
    probe_channel: Channel | None = None
    probe_needs: dict[str, int | None] = {}
    if probed and probes is not None and profile.requests:
        per_s = probe_rate(profile.rate_per_s, probes)
        look = _probe_looks(profile, judging)
        probe_needs = _needed(look, max(2, math.floor(per_s * horizon_s)))
        if per_s > 0 and all(n is not None for n in probe_needs.values()):
            need = max((n or 0) for n in probe_needs.values())
            stuck, scored = profile.probes or (0, 0)
            shares = {"rule_adaptation": (stuck / scored if scored else 0.0, 1.0)}
            probe_channel = Channel(per_s, tuple(_curves(look, probe_needs, th, shares)), need)
        else:
            probe_needs = dict.fromkeys(probe_needs or ("rule_adaptation",))
    judged = [w for w in canary.steps if w < 100] or canary.steps[:1]
    steps: list[StepPlan] = []
    draws: list[list[float]] = []
    for index, weight in enumerate(judged):
        canary_per_s = profile.rate_per_s * weight / 100
        most = max(2, math.floor(canary_per_s * horizon_s))
        if profile.requests == 0 or canary_per_s <= 0:
            steps.append(StepPlan(weight, canary_per_s, {}, None, None))
            continue
        look = _looks(profile, weight, judging)
        needs = _needed(look, most)
        times = {m: None if n is None else n / canary_per_s for m, n in needs.items()}
        if index == 0 and probed:
            needs.update(probe_needs)
            per_s = probe_channel.rate_per_s if probe_channel is not None else 0.0
            times.update(
                {m: None if n is None or per_s <= 0 else n / per_s for m, n in probe_needs.items()}
            )
        missing = [m for m, t in times.items() if t is None]
        if missing:
            steps.append(StepPlan(weight, canary_per_s, needs, None, missing[0]))
            continue
        holding = max(times, key=lambda m: times[m] or 0.0, default=None)
        least = max([canary.step_interval_s, *((t or 0.0) for t in times.values())])
        traffic = {m: n for m, n in needs.items() if not m.startswith("rule_adaptation")}
        largest = max((n or 0 for n in traffic.values()), default=1)
        curves = _curves(look, traffic, th, _rate_shares(profile, weight))
        channels = [Channel(canary_per_s, tuple(curves), largest)]
        if index == 0 and probe_channel is not None:
            channels.append(probe_channel)
        drawn = simulate_step(
            channels,
            beta=beta,
            interval_s=analysis.interval_s,
            step_interval_s=canary.step_interval_s,
            runs=runs,
            seed=FORECAST_SEED + index,
        )
        draws.append(drawn)
        ordered = sorted(drawn)
        steps.append(
            StepPlan(
                weight,
                canary_per_s,
                needs,
                max(least, quantile(ordered, 0.5)),
                holding,
                duration_p90_s=max(least, quantile(ordered, 0.9)),
                least_s=least,
            )
        )
    total = total_p90 = None
    if steps and all(s.duration_s is not None for s in steps):
        totals = sorted(map(math.fsum, zip(*draws, strict=True)))
        least_total = sum(s.least_s or 0.0 for s in steps)
        total = max(least_total, quantile(totals, 0.5))
        total_p90 = max(least_total, quantile(totals, 0.9))
    advice = _advice(profile, canary, steps)
    if probes is not None and "rule_adaptation" in metrics:
        advice += (_probe_advice(profile.rate_per_s, probes, th),)
    not_forecast = tuple(m for m in ("human_preference",) if m in metrics)
    if not_forecast:
        advice += (
            "human_preference holds every step until enough blind reviews come in "
            f"({th.min_samples_reviews}): the forecast cannot know when people review",
        )
    return RolloutPlan(
        route,
        profile.rate_per_s,
        tuple(steps),
        total,
        advice,
        total_p90_s=total_p90,
        probe_per_s=probe_rate(profile.rate_per_s, probes) if probed and probes else 0.0,
        not_forecast=not_forecast,
    )


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
