"""Does the rollout forecast hold, and does one rollout stay within one false-rollback budget?

    .venv/bin/python bench/forecast_simulation.py [--rates 2,5,20] [--runs 200] [--seed 1]
        [--probes] [--aa-runs 0] [--horizon-h 3]

Simulated on a virtual clock (no sleeping), with the controller's semantics and its budget split
(`proxy.rollout.budget`): every `interval_s` the judge looks at the traffic metrics (error rate,
latency p50/p95, cost) since the step began, at the rule check over its epoch (one epoch, since
the rollout started), and — with `--probes` — at `rule_adaptation` on both models' rule-flip
probes since the rollout started (per model `min(rate * sample, max_per_hour / 3600)` probes/s, at
the defaults: sample 0.05, max_per_hour 200). `failure_limit` consecutive failing looks roll
back; a look where every verdict passes after `step_interval_s` advances; the last step promotes.
Inconclusive holds, and a gating metric without evidence (no probe yet) holds.

Traffic: Poisson arrivals per arm (primary R·(1 - w), canary R·w); latency lognormal (median
0.8 s, sigma 0.5), 1 % errors, a rule check passing 98 %, cost lognormal (median $0.002, sigma
0.4); probes followed by both models 99 % of the time. The candidate is identical to the primary.

Forecast scenario (per rate): the plan (`proxy.rollout.plan.plan_rollout`) on a profile of
20,000 answers of the same distributions, against `--runs` simulated rollouts: the median time
to promotion against the forecast's median (goal: within ±25 %) and the share of runs promoted
by the forecast's p90 (goal: ≥ 90 %).

A/A scenario (`--aa-runs N`, per rate): N rollouts with probes **and** blind reviews on (reviews
at one per 10 s, each preferring either answer a third of the time and tying a third), until
promoted or the horizon: the share rolled back (goal: ≤ 1 % per rollout; the budget's union bound
makes it at most `false_rollback_rate`).

Settings not on the command line are the config's defaults (read from `proxy.config`).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analyzers.judge_stats import judge
from analyzers.verdicts import ArmWindow, Outcome
from proxy.config import CanarySpec, ProbesSpec
from proxy.rollout.budget import rollout_budget
from proxy.rollout.plan import TrafficProfile, plan_rollout, probe_rate

LATENCY_MEDIAN_S, LATENCY_SIGMA = 0.8, 0.5
COST_MEDIAN_USD, COST_SIGMA = 0.002, 0.4
ERROR_RATE, CHECK_PASS, PROBE_FOLLOWS = 0.01, 0.98, 0.99
REVIEWS_PER_S = 0.1
PROFILE_ANSWERS = 20_000
COMMAND = ".venv/bin/python bench/forecast_simulation.py"


def _probes_spec() -> ProbesSpec:
    return ProbesSpec.model_validate(
        {
            "parameter": r"w=(?P<value>\d+)",
            "values": [150],
            "expect": [{"name": "follows", "type": "regex", "pattern": "{value}"}],
        }
    )


def canary_spec(
    probes: bool, reviews: bool, thresholds: Mapping[str, float] | None = None
) -> CanarySpec:
    """The route's canary at the defaults, or with `thresholds` set (a faster rollout, for the
    fast test of the forecast's calibration)."""
    metrics = ["error_rate", "latency_p50", "latency_p95", "cost_per_request", "check_pass_rate"]
    metrics += ["rule_adaptation"] * probes + ["human_preference"] * reviews
    analysis: dict[str, object] = {"metrics": metrics}
    if thresholds:
        analysis["thresholds"] = dict(thresholds)
    return CanarySpec.model_validate({"model": "candidate", "analysis": analysis})


def _poisson(rng: random.Random, lam: float) -> int:
    if lam <= 0:
        return 0
    if lam > 50:  # the normal approximation, ample for arrivals per look
        return max(0, round(rng.gauss(lam, math.sqrt(lam))))
    limit, k, product = math.exp(-lam), 0, rng.random()
    while product > limit:
        k += 1
        product *= rng.random()
    return k


def _lognormal(rng: random.Random, median: float, sigma: float, n: int) -> list[float]:
    return [rng.lognormvariate(math.log(median), sigma) for _ in range(n)]


@dataclass
class _Arm:
    requests: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    costs: list[float] = field(default_factory=list)
    passed: int = 0
    checked: int = 0
    probes: int = 0
    stuck: int = 0

    def serve(self, rng: random.Random, expected: float) -> None:
        n = _poisson(rng, expected)
        self.requests += n
        self.errors += sum(rng.random() < ERROR_RATE for _ in range(n))
        self.latencies.extend(
            rng.lognormvariate(math.log(LATENCY_MEDIAN_S), LATENCY_SIGMA) for _ in range(n)
        )
        self.costs.extend(
            rng.lognormvariate(math.log(COST_MEDIAN_USD), COST_SIGMA) for _ in range(n)
        )
        self.passed += sum(rng.random() < CHECK_PASS for _ in range(n))
        self.checked += n

    def probe(self, rng: random.Random, expected: float) -> None:
        n = _poisson(rng, expected)
        self.probes += n
        self.stuck += sum(rng.random() >= PROBE_FOLLOWS for _ in range(n))

    def new_step(self) -> None:
        self.requests, self.errors, self.latencies, self.costs = 0, 0, [], []

    def traffic(self) -> ArmWindow:
        return ArmWindow(
            self.requests, self.errors, tuple(sorted(self.latencies)), costs_usd=tuple(self.costs)
        )


@dataclass(frozen=True)
class Run:
    promoted_s: float | None
    rolled_back: bool


def simulate(
    rate: float,
    seed: int,
    probes: bool,
    reviews: bool,
    horizon_s: float,
    thresholds: Mapping[str, float] | None = None,
) -> Run:
    """One rollout of an identical candidate at `rate` req/s, as the controller judges it."""
    rng = random.Random(seed)
    canary = canary_spec(probes, reviews, thresholds)
    analysis = canary.analysis
    th = analysis.thresholds.model_copy(update={"min_samples_rate": analysis.min_samples})
    steps = [w for w in canary.steps if w < 100]
    budget = rollout_budget(checks=True, probes=probes, reviews=reviews)
    per_probe_s = probe_rate(rate, _probes_spec()) if probes else 0.0
    primary, candidate = _Arm(), _Arm()
    preferences: list[float] = []
    step, step_started, now, streak = 0, 0.0, 0.0, 0
    interval = analysis.interval_s
    while now + interval <= horizon_s:
        weight = steps[step] / 100
        primary.serve(rng, rate * (1 - weight) * interval)
        candidate.serve(rng, rate * weight * interval)
        if probes:
            primary.probe(rng, per_probe_s * interval)
            candidate.probe(rng, per_probe_s * interval)
        if reviews:
            for _ in range(_poisson(rng, REVIEWS_PER_S * interval)):
                preferences.append(rng.choice((0.0, 0.5, 1.0)))
        now += interval
        verdicts = judge(
            primary.traffic(),
            candidate.traffic(),
            th,
            sequences=len(canary.steps),
            with_needs=False,
            budget=budget.traffic,
        )
        verdicts += judge(
            ArmWindow(0, 0, checks={"c": (primary.passed, primary.checked)}),
            ArmWindow(0, 0, checks={"c": (candidate.passed, candidate.checked)}),
            th, with_needs=False, budget=budget.epoch(1),
        )  # fmt: skip
        held = False
        if probes:
            adaptation = judge(
                ArmWindow(0, 0, adaptation=(primary.stuck, primary.probes)),
                ArmWindow(0, 0, adaptation=(candidate.stuck, candidate.probes)),
                th, with_needs=False, budget=budget.probes,
            )  # fmt: skip
            held = not adaptation  # no probe yet: the gating metric holds
            verdicts += adaptation
        if reviews:
            verdicts += judge(
                ArmWindow(0, 0), ArmWindow(0, 0, preferences=tuple(preferences)), th,
                with_needs=False, budget=budget.reviews,
            )  # fmt: skip
        gating = set(analysis.metrics)
        verdicts = [v for v in verdicts if v.metric.partition(":")[0] in gating]
        if any(v.outcome is Outcome.FAIL for v in verdicts):
            streak += 1
            if streak >= analysis.failure_limit:
                return Run(None, True)
            continue
        streak = 0
        passing = not held and all(v.outcome is Outcome.PASS for v in verdicts)
        if passing and now - step_started >= canary.step_interval_s:
            step += 1
            if step == len(steps):
                return Run(now, False)
            step_started = now
            primary.new_step()
            candidate.new_step()
    return Run(None, False)


def profile(rate: float, probes: bool, seed: int) -> TrafficProfile:
    """What a plan reads of the route: the primary's recent answers, same distributions."""
    rng = random.Random(seed)
    n = PROFILE_ANSWERS
    latencies = tuple(
        rng.lognormvariate(math.log(LATENCY_MEDIAN_S), LATENCY_SIGMA) for _ in range(n)
    )
    costs = tuple(rng.lognormvariate(math.log(COST_MEDIAN_USD), COST_SIGMA) for _ in range(n))
    scored = 2000
    return TrafficProfile(
        rate_per_s=rate, requests=n, errors=round(n * ERROR_RATE), latencies_s=latencies,
        costs_usd=costs, checks={"c": (round(n * CHECK_PASS), n)}, span_s=3600.0,
        probes=(round(scored * (1 - PROBE_FOLLOWS)), scored) if probes else None,
    )  # fmt: skip


def _job(args: tuple[float, int, bool, bool, float]) -> Run:
    return simulate(*args)


def _minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f} min"


def forecast_table(
    rates: Sequence[float], runs: int, seed: int, probes: bool, horizon_s: float, workers: int
) -> list[str]:
    lines = [
        f"Forecast against {runs} simulated rollouts per rate (seed {seed}, probes "
        f"{'on' if probes else 'off'}, default steps and thresholds):",
        "",
        "| route rate | forecast median | forecast p90 | simulated median "
        "| median ÷ forecast | runs by p90 | not promoted |",
        "|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for rate in rates:
        plan = plan_rollout(
            "bench", profile(rate, probes, seed), canary_spec(probes, False),
            probes=_probes_spec() if probes else None,
        )  # fmt: skip
        jobs = [(rate, seed * 1_000_003 + i, probes, False, horizon_s) for i in range(runs)]
        with ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(_job, jobs, chunksize=4))
        times = [r.promoted_s for r in results]
        done = sorted(t for t in times if t is not None)
        median = statistics.median(done) if len(done) > runs / 2 else None
        p90 = plan.total_p90_s
        by_p90 = sum(1 for t in done if p90 is not None and t <= p90) / runs
        ratio = f"{median / plan.total_s:.2f}" if median and plan.total_s else "-"
        lines.append(
            f"| {rate:g}/s | {_minutes(plan.total_s)} | {_minutes(p90)} | {_minutes(median)} | "
            f"{ratio} | {by_p90:.0%} | {runs - len(done)} |"
        )
    return lines


def aa_table(
    rates: Sequence[float], runs: int, seed: int, horizon_s: float, workers: int
) -> list[str]:
    lines = [
        f"A/A rollouts with probes and reviews on, {runs} per rate (seed {seed}), until "
        f"promoted or {horizon_s / 3600:g} h:",
        "",
        "| route rate | rolled back | promoted |",
        "|---|---|---|",
    ]
    for rate in rates:
        jobs = [(rate, seed * 7_000_003 + i, True, True, horizon_s) for i in range(runs)]
        with ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(_job, jobs, chunksize=4))
        back = sum(r.rolled_back for r in results)
        promoted = sum(r.promoted_s is not None for r in results)
        lines.append(f"| {rate:g}/s | {back} of {runs} ({back / runs:.1%}) | {promoted} |")
        print(lines[-1], file=sys.stderr, flush=True)  # a long run shows its progress
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="2,5,20")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--aa-runs", type=int, default=0)
    parser.add_argument("--probes", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--horizon-h", type=float, default=3.0)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    horizon_s = args.horizon_h * 3600
    if args.runs:
        print(
            "\n".join(
                forecast_table(rates, args.runs, args.seed, args.probes, horizon_s, args.workers)
            )
        )
    if args.aa_runs:
        print()
        print("\n".join(aa_table(rates, args.aa_runs, args.seed, horizon_s, args.workers)))


if __name__ == "__main__":
    main()
