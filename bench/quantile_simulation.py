"""The judge's sample metrics (latency and TTFT p50/p95, cost per request, LLM-judge score) on
sticky traffic: do their standard errors, false fails and false passes hold when requests come in
users and tenants, with ties, at small and large steps? Virtual clock, no sleeping.

    .venv/bin/python bench/quantile_simulation.py [--runs 200] [--seed 1] [--workers 1]
        [--study steps|defaults|all] [--populations requests,users,tenants] [--steps 10,50]
        [--rollout-runs 40] [--rollout-population requests|users|tenants]

Traffic. Requests arrive as a Poisson process at the route's rate; each comes from a unit of one
of three populations, and every request of a unit goes to the arm its unit was assigned to (the
canary with probability w, the step's weight), as the gateway's sticky key does:

- `requests`: every request a unit of its own (independent samples);
- `users`: 5,000 users, activity lognormal (sigma 1.5), one batch user with 5 % of the traffic;
- `tenants`: 200 tenants, activity lognormal (sigma 2).

A unit has its own effect on the log of each of its latencies, TTFTs and costs (normal, sigma 0.3)
and on its judge scores (normal, sigma 0.5 points): a tenant's requests resemble each other.
Latency is lognormal around that (median 2 s, sigma 0.5), TTFT too (median 0.4 s, sigma 0.6), cost
per request lognormal (median $0.002, sigma 0.4); 20 % of the primary arm's requests are shadowed
and judged, each delta normal (sigma 1.5 points) rounded to half points, as judges score. `--ties`
scenarios also round latencies to 1 s and TTFTs to 0.1 s.

A candidate **at the margin** is, on every metric at once, exactly as much worse as the defaults
tolerate: its latencies and TTFTs pass through a monotone map that multiplies the population's
p50 by `latency_p50_ratio` and its p95 by `latency_p95_ratio` (log-linear in between and beyond:
quantiles commute with a monotone map, so the population's quantiles are exactly at the margins);
its costs are multiplied by `cost_ratio`, its judge deltas lowered by `judge_score_drop`.
An A/A candidate is the primary.

The `steps` study holds one step (10 % or 50 %) for 20 minutes and judges it as the controller does
(`judge` on both arms' evidence since the step began, with `sample_units`, `sequences` = 2): a look
every `interval_s` (5 s) whose evidence has grown by 5 % since the last judged look (consecutive
looks in between differ by a handful of samples), `failure_limit` (2) consecutive failing looks
fail a metric. It counts, per metric, the runs in which the metric ever failed (A/A: false fails;
measured at `false_rollback_rate` 0.2 so that a rate near alpha can be seen at all, and at the
default) and in which it ever passed (at the margin: false passes, promised <= 1 -
pass_confidence = 5 %), and compares at the last look the standard error the judge used
(`log_quantile`, `unit_mean`) with the spread of the estimates over runs.

The `defaults` study runs whole default rollouts (steps 10, 50; step_interval_s 60; `max_hold_s`
3600) of a candidate with +30 % latency p95 (median unchanged) at 2, 20 and 200 req/s, with the
judge's traffic metrics (latency, TTFT, cost), until rolled back, promoted or 2 h: the share never
promoted, rolled back within the first hour, and A/A rollouts (rolled back, time to promotion).
Each arm keeps a uniform sample of at most 20,000 of its step's samples (a reservoir over the
whole step, as the issue's fix of the 20,000-sample cap proposes; not the store's newest 20,000).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analyzers.judge_stats import judge, log_quantile, unit_mean
from analyzers.verdicts import ArmWindow, Outcome, Thresholds

J = TypeVar("J")
R = TypeVar("R")
DEFAULTS = Thresholds()
LATENCY_MEDIAN_S, LATENCY_SIGMA = 2.0, 0.5
TTFT_MEDIAN_S, TTFT_SIGMA = 0.4, 0.6
COST_MEDIAN_USD, COST_SIGMA = 0.002, 0.4
UNIT_SIGMA, UNIT_SCORE_SIGMA = 0.3, 0.5
SCORE_SIGMA = 1.5
JUDGED = 0.2
INTERVAL_S, FAILURE_LIMIT, STEP_S, MAX_HOLD_S = 5.0, 2, 60.0, 3600.0
GROWTH = 1.05
CAP = 20_000
METRICS = ("latency_p50", "latency_p95", "ttft_p50", "ttft_p95", "cost_per_request", "judge_score")
COMMAND = ".venv/bin/python bench/quantile_simulation.py"


@dataclass(frozen=True)
class Population:
    """Who sends the requests: None for independent requests, else activity weights."""

    name: str
    weights: tuple[float, ...] | None


def population(name: str, rng: random.Random) -> Population:
    if name == "requests":
        return Population(name, None)
    if name == "users":
        weights = [rng.lognormvariate(0.0, 1.5) for _ in range(4_999)]
        batch = 0.05 / 0.95 * math.fsum(weights)  # one batch user with 5 % of the traffic
        return Population(name, (*weights, batch))
    if name == "tenants":
        return Population(name, tuple(rng.lognormvariate(0.0, 2.0) for _ in range(200)))
    raise ValueError(name)


@dataclass(frozen=True)
class Candidate:
    """How the candidate differs from the primary."""

    p50: float = 1.0
    p95: float = 1.0
    cost: float = 1.0
    score_drop: float = 0.0
    ties: bool = False


AT_MARGIN = Candidate(
    DEFAULTS.latency_p50_ratio,
    DEFAULTS.latency_p95_ratio,
    DEFAULTS.cost_ratio,
    DEFAULTS.judge_score_drop,
)
SLOW_TAIL = Candidate(p95=1.3)


def _population_quantiles(median: float, sigma: float) -> tuple[float, float]:
    """p50 and p95 of median·exp(u + sigma·e), u ~ N(0, UNIT_SIGMA) per unit: the mixture over
    units of any activity is lognormal with sigma √(sigma² + UNIT_SIGMA²) in expectation."""
    total = math.hypot(sigma, UNIT_SIGMA)
    return median, median * math.exp(total * statistics.NormalDist().inv_cdf(0.95))


def _mapped(x: float, q50: float, q95: float, r50: float, r95: float) -> float:
    """x through the monotone map taking q50 to r50·q50 and q95 to r95·q95."""
    if r50 == r95 == 1.0:
        return x
    position = max((math.log(x) - math.log(q50)) / (math.log(q95) - math.log(q50)), 0.0)
    return x * math.exp(math.log(r50) + position * (math.log(r95) - math.log(r50)))


@dataclass
class Arm:
    """One arm's evidence since the step began, with each sample's unit."""

    latencies: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    costs: list[float] = field(default_factory=list)
    units: list[int] = field(default_factory=list)
    deltas: list[float] = field(default_factory=list)
    delta_units: list[int] = field(default_factory=list)
    cap: int | None = None
    """Keep at most this many samples, a uniform sample of the whole step (reservoir)."""
    seen: int = 0

    def add(self, rng: random.Random, latency: float, ttft: float, cost: float, unit: int) -> None:
        self.seen += 1
        if self.cap is None or len(self.latencies) < self.cap:
            self.latencies.append(latency)
            self.ttfts.append(ttft)
            self.costs.append(cost)
            self.units.append(unit)
            return
        slot = rng.randrange(self.seen)
        if slot < self.cap:
            self.latencies[slot], self.ttfts[slot] = latency, ttft
            self.costs[slot], self.units[slot] = cost, unit

    def window(self, with_units: bool, judged: bool = True) -> ArmWindow:
        units = tuple(self.units)
        sample_units = (
            {"latencies_s": units, "ttfts_s": units, "costs_usd": units} if with_units else {}
        )
        if with_units and judged:
            sample_units["judge_deltas"] = tuple(self.delta_units)
        return ArmWindow(
            0,
            0,
            tuple(self.latencies),
            tuple(self.ttfts),
            tuple(self.costs),
            judge_deltas=tuple(self.deltas) if judged else (),
            sample_units=sample_units,
        )


class Traffic:
    """Requests of a population, each to its unit's arm."""

    def __init__(self, pop: Population, rng: random.Random, candidate: Candidate) -> None:
        self.pop, self.rng, self.candidate = pop, rng, candidate
        count = len(pop.weights) if pop.weights else 0
        self.effects = [
            (rng.gauss(0, UNIT_SIGMA), rng.gauss(0, UNIT_SIGMA), rng.gauss(0, UNIT_SIGMA))
            for _ in range(count)
        ]
        self.score_effects = [rng.gauss(0, UNIT_SCORE_SIGMA) for _ in range(count)]
        self.draw = [rng.random() for _ in range(count)]
        if pop.weights:
            total = math.fsum(pop.weights)
            running, self.cumulative = 0.0, []
            for w in pop.weights:
                running += w / total
                self.cumulative.append(running)
        self.next_unit = count
        self.lat_q = _population_quantiles(LATENCY_MEDIAN_S, LATENCY_SIGMA)
        self.ttft_q = _population_quantiles(TTFT_MEDIAN_S, TTFT_SIGMA)

    def serve(self, seconds: float, rate: float, weight: float, arms: tuple[Arm, Arm]) -> None:
        rng, cand = self.rng, self.candidate
        n = _poisson(rng, rate * seconds)
        if not n:
            return
        if self.pop.weights:
            units = rng.choices(range(len(self.pop.weights)), cum_weights=self.cumulative, k=n)
        else:
            units = list(range(self.next_unit, self.next_unit + n))
            self.next_unit += n
        for unit in units:
            if self.pop.weights:
                u_lat, u_ttft, u_cost = self.effects[unit]
                u_score, on_canary = self.score_effects[unit], self.draw[unit] < weight
            else:
                u_lat = rng.gauss(0, UNIT_SIGMA)
                u_ttft, u_cost = rng.gauss(0, UNIT_SIGMA), rng.gauss(0, UNIT_SIGMA)
                u_score, on_canary = rng.gauss(0, UNIT_SCORE_SIGMA), rng.random() < weight
            latency = LATENCY_MEDIAN_S * math.exp(u_lat + LATENCY_SIGMA * rng.gauss(0, 1))
            ttft = TTFT_MEDIAN_S * math.exp(u_ttft + TTFT_SIGMA * rng.gauss(0, 1))
            cost = COST_MEDIAN_USD * math.exp(u_cost + COST_SIGMA * rng.gauss(0, 1))
            arm = arms[1] if on_canary else arms[0]
            if on_canary:
                latency = _mapped(latency, *self.lat_q, cand.p50, cand.p95)
                ttft = _mapped(ttft, *self.ttft_q, cand.p50, cand.p95)
                cost *= cand.cost
            if cand.ties:
                latency, ttft = float(round(latency)), round(ttft, 1)
            arm.add(rng, latency, ttft, cost, unit)
            if not on_canary and rng.random() < JUDGED:
                delta = -cand.score_drop + u_score + SCORE_SIGMA * rng.gauss(0, 1)
                arms[1].deltas.append(round(delta * 2) / 2)
                arms[1].delta_units.append(unit)


def _poisson(rng: random.Random, lam: float) -> int:
    if lam < 30:
        limit, k, product = math.exp(-lam), 0, rng.random()
        while product > limit:
            k += 1
            product *= rng.random()
        return k
    return max(0, round(rng.gauss(lam, math.sqrt(lam))))


@dataclass(frozen=True)
class StepJob:
    population: str
    weight: float
    rate: float
    candidate: Candidate
    thresholds: Thresholds
    with_units: bool
    seed: int
    horizon_s: float = 20 * 60.0


@dataclass(frozen=True)
class StepResult:
    failed: frozenset[str]
    passed: frozenset[str]
    estimates: dict[str, tuple[float, float]]
    """At the last look, per metric: (estimate, the standard error the judge read)."""
    canary: int


def _last_look(
    primary: ArmWindow, candidate: ArmWindow, with_units: bool
) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    for prefix, series in (("latency", "latencies_s"), ("ttft", "ttfts_s")):
        sides = []
        for arm in (primary, candidate):
            values = getattr(arm, series)
            units: Sequence[int] | None = arm.sample_units.get(series) if with_units else None
            if units is not None:
                order = sorted(range(len(values)), key=values.__getitem__)
                values, units = [values[i] for i in order], [units[i] for i in order]
            else:
                values = sorted(values)
            sides.append({q: log_quantile(values, q, units) for q in (0.5, 0.95)})
        for q in (0.5, 0.95):
            of_p, of_c = sides[0][q], sides[1][q]
            if of_p and of_c:
                out[f"{prefix}_p{round(q * 100)}"] = (
                    of_c[0] - of_p[0],
                    math.hypot(of_p[1], of_c[1]),
                )
    means = []
    for arm in (primary, candidate):
        centre, variance, _ = unit_mean(arm.costs_usd, arm.sample_units.get("costs_usd"))
        means.append((centre, variance))
    (m_p, v_p), (m_c, v_c) = means
    out["cost_per_request"] = (math.log(m_c / m_p), math.sqrt(v_p / m_p**2 + v_c / m_c**2))
    if candidate.judge_deltas:
        centre, variance, _ = unit_mean(
            candidate.judge_deltas, candidate.sample_units.get("judge_deltas")
        )
        out["judge_score"] = (-centre, math.sqrt(variance))
    return out


def run_step(job: StepJob) -> StepResult:
    rng = random.Random(job.seed)
    traffic = Traffic(population(job.population, rng), rng, job.candidate)
    arms = (Arm(), Arm())
    failed: set[str] = set()
    passed: set[str] = set()
    streak: dict[str, int] = {}
    now, judged_at = 0.0, 0
    primary = candidate = ArmWindow(0, 0)
    while now < job.horizon_s:
        traffic.serve(INTERVAL_S, job.rate, job.weight, arms)
        now += INTERVAL_S
        size = len(arms[1].latencies)
        if size < judged_at * GROWTH and size - judged_at < 5 and now < job.horizon_s:
            continue
        judged_at = size
        primary, candidate = arms[0].window(job.with_units), arms[1].window(job.with_units)
        for v in judge(primary, candidate, job.thresholds, sequences=2, with_needs=False):
            if v.outcome is Outcome.PASS:
                passed.add(v.metric)
            if v.outcome is Outcome.FAIL:
                streak[v.metric] = streak.get(v.metric, 0) + 1
                if streak[v.metric] >= FAILURE_LIMIT:
                    failed.add(v.metric)
            else:
                streak[v.metric] = 0
    return StepResult(
        frozenset(failed),
        frozenset(passed),
        _last_look(primary, candidate, job.with_units),
        len(arms[1].latencies),
    )


@dataclass(frozen=True)
class RolloutJob:
    rate: float
    candidate: Candidate
    thresholds: Thresholds
    seed: int
    population: str = "requests"
    horizon_s: float = 2 * 3600.0


@dataclass(frozen=True)
class RolloutResult:
    promoted_s: float | None
    rolled_back_s: float | None


def run_rollout(job: RolloutJob) -> RolloutResult:
    """A default rollout (steps 10, 50) with the traffic metrics."""
    rng = random.Random(job.seed)
    traffic = Traffic(population(job.population, rng), rng, job.candidate)
    steps = (0.1, 0.5)
    step, step_started, now, streak, judged_at = 0, 0.0, 0.0, 0, 0
    arms = (Arm(cap=CAP), Arm(cap=CAP))
    while now < job.horizon_s:
        traffic.serve(INTERVAL_S, job.rate, steps[step], arms)
        now += INTERVAL_S
        size = arms[1].seen
        if size < judged_at * GROWTH and size - judged_at < 5 and now - step_started >= STEP_S:
            continue
        judged_at = size
        primary, candidate = arms[0].window(True, False), arms[1].window(True, False)
        verdicts = judge(primary, candidate, job.thresholds, sequences=2, with_needs=False)
        if any(v.outcome is Outcome.FAIL for v in verdicts):
            streak += 1
            if streak >= FAILURE_LIMIT:
                return RolloutResult(None, now)
            continue
        streak = 0
        if all(v.outcome is Outcome.PASS for v in verdicts) and now - step_started >= STEP_S:
            step += 1
            if step == len(steps):
                return RolloutResult(now, None)
            step_started, judged_at, arms = now, 0, (Arm(cap=CAP), Arm(cap=CAP))
    return RolloutResult(None, None)


def _map(fn: Callable[[J], R], jobs: Sequence[J], workers: int) -> list[R]:
    """`fn` over `jobs`, on a pool of `workers` processes (in this process for 1)."""
    if workers <= 1:
        return [fn(job) for job in jobs]
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(fn, jobs, chunksize=4))


STEP_RATES = {0.1: 5.0, 0.5: 2.0}
"""Route rate per step weight in the steps study: 600 (10 %) and 1,200 (50 %) canary answers in
20 minutes, the small samples where a bound is most easily wrong."""


def steps_study(
    runs: int,
    seed: int,
    workers: int,
    pops: Sequence[str] = ("requests", "users", "tenants"),
    weights: Sequence[float] = (0.1, 0.5),
) -> str:
    loose = DEFAULTS.model_copy(update={"false_rollback_rate": 0.2})
    configs: list[tuple[str, float, str, Candidate, Thresholds, bool]] = []
    for pop in pops:
        for ties in (False, True) if pop == "requests" else (False,):
            for weight in weights:
                configs.append((pop, weight, "A/A at 0.2", Candidate(ties=ties), loose, ties))
                configs.append((pop, weight, "margin", _with_ties(AT_MARGIN, ties), DEFAULTS, ties))
    jobs = [
        StepJob(pop, weight, STEP_RATES[weight], cand, th, True, seed * 1_000_003 + c * 10_007 + i)
        for c, (pop, weight, _, cand, th, _) in enumerate(configs)
        for i in range(runs)
    ]
    done = _map(run_step, jobs, workers)
    alpha_loose = loose.false_rollback_rate / (len(METRICS) * 2)
    out = [
        f"{runs} runs per row, seed {seed}; 20 min at one step, looks every {INTERVAL_S:g} s; "
        f"A/A at false_rollback_rate 0.2: alpha per metric {alpha_loose:.4f} "
        "(6 metrics x 2 steps); "
        "at the margin: share of runs in which the metric ever passed (promised <= 5 %).",
        "",
        "| population | ties | step | scenario | canary answers, median | "
        + " | ".join(METRICS)
        + " |",
        "|---|---|---|---|---|" + "---|" * len(METRICS),
    ]
    calibration: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for c, (pop, weight, scenario, _cand, _th, ties) in enumerate(configs):
        results = done[c * runs : (c + 1) * runs]
        cells = []
        for metric in METRICS:
            if scenario.startswith("A/A"):
                count = sum(metric in r.failed for r in results)
            else:
                count = sum(metric in r.passed for r in results)
            cells.append(f"{count / runs:.1%}")
        canary = statistics.median(r.canary for r in results)
        out.append(
            f"| {pop} | {'yes' if ties else 'no'} | {weight:.0%} | "
            f"{'A/A: failed' if scenario.startswith('A/A') else 'margin: passed'} | "
            f"{canary:.0f} | " + " | ".join(cells) + " |"
        )
        if scenario.startswith("A/A") and not ties and weight == 0.5:
            for r in results:
                for metric, pair in r.estimates.items():
                    calibration.setdefault((pop, metric), []).append(pair)
    out += [
        "",
        "Standard error at the last look (50 % step, A/A, no ties): the root mean square of the "
        "standard error the judge used over the standard deviation of the estimates across runs "
        "(goal 0.8-1.25):",
        "",
        "| population | " + " | ".join(METRICS) + " |",
        "|---|" + "---|" * len(METRICS),
    ]
    for pop in pops:
        cells = []
        for metric in METRICS:
            pairs = calibration.get((pop, metric), [])
            if len(pairs) < 3:
                cells.append("-")
                continue
            spread = statistics.stdev(e for e, _ in pairs)
            reported = math.sqrt(statistics.fmean(s * s for _, s in pairs))
            cells.append(f"{reported / spread:.2f}" if spread > 0 else "-")
        out.append(f"| {pop} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def _with_ties(candidate: Candidate, ties: bool) -> Candidate:
    return Candidate(candidate.p50, candidate.p95, candidate.cost, candidate.score_drop, ties)


def _minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f} min"


def defaults_study(runs: int, seed: int, workers: int, pop: str) -> str:
    rates = (2.0, 20.0, 200.0)
    plan = [
        (rate, name, cand)
        for rate in rates
        for name, cand in (("+30% p95", SLOW_TAIL), ("A/A", Candidate()))
    ]
    jobs = [
        RolloutJob(rate, cand, DEFAULTS, seed * 1_000_003 + p * 10_007 + i, pop)
        for p, (rate, _, cand) in enumerate(plan)
        for i in range(runs)
    ]
    done = _map(run_rollout, jobs, workers)
    out = [
        f"{runs} default rollouts per row ({pop}), seed {seed}, until rolled back, "
        "promoted or 2 h; thresholds "
        f"latency_p50_ratio {DEFAULTS.latency_p50_ratio}, latency_p95_ratio "
        f"{DEFAULTS.latency_p95_ratio}, latency_min_increase_s {DEFAULTS.latency_min_increase_s}:",
        "",
        "| route rate | candidate | promoted | rolled back | rolled back within 1 h | "
        "held past max_hold_s (1 h), not promoted | promoted, median time | "
        "rolled back, median time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p, (rate, name, _) in enumerate(plan):
        results = done[p * runs : (p + 1) * runs]
        promoted = [r.promoted_s for r in results if r.promoted_s is not None]
        back = [r.rolled_back_s for r in results if r.rolled_back_s is not None]
        held = sum(
            1
            for r in results
            if r.rolled_back_s is None
            and (r.promoted_s is None or r.promoted_s > MAX_HOLD_S)
            and r.promoted_s is None
        )
        out.append(
            f"| {rate:g} req/s | {name} | {len(promoted)}/{runs} | {len(back)}/{runs} | "
            f"{sum(t <= 3600 for t in back)}/{runs} | {held}/{runs} | "
            f"{_minutes(statistics.median(promoted) if promoted else None)} | "
            f"{_minutes(statistics.median(back) if back else None)} |"
        )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rollout-runs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--study", choices=("steps", "defaults", "all"), default="all")
    parser.add_argument("--populations", default="requests,users,tenants")
    parser.add_argument("--steps", default="10,50", help="step weights, percent")
    parser.add_argument(
        "--rollout-population", choices=("requests", "users", "tenants"), default="requests"
    )
    args = parser.parse_args(argv)
    if args.study in ("steps", "all"):
        pops = tuple(args.populations.split(","))
        weights = tuple(float(w) / 100 for w in args.steps.split(","))
        print(steps_study(args.runs, args.seed, args.workers, pops, weights))
        print()
    if args.study in ("defaults", "all"):
        print(defaults_study(args.rollout_runs, args.seed, args.workers, args.rollout_population))


if __name__ == "__main__":
    main()
