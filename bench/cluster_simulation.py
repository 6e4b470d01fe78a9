"""The rollout judge's rates on traffic whose requests come from sticky users and tenants, on a
virtual clock (no sleeping): false rollbacks, standard errors, and both sides of the rate tests
at the margin, through `analyzers.judge_stats.judge` on windows that carry `ArmWindow.units`.

    .venv/bin/python bench/cluster_simulation.py [--rates 2,20,200] [--aa-runs 100]
        [--se-runs 200] [--margin-runs 400] [--goal-runs 40] [--workers 2] [--seed 1]
        [--only aa,se,margin,goals]

Shapes of traffic (each a fixed population for the whole run of the script, seeded; every
rollout draws its own sticky assignment and its own arrivals):
- `tenants`: 200 tenants, activity lognormal (sigma 2);
- `users`: 5,000 users, activity lognormal (sigma 1.5), plus one batch user sending 5 % of all
  requests;
- `independent`: a key per request (no sticky unit).
Every unit has its own error rate, Beta-distributed around 1 % with concentration 10 (so some
tenants see far more errors than others: their requests are correlated evidence). A rollout
assigns each unit to the canary when its uniform hash is below the step's weight (the gateway's
sticky hash: a unit on the canary at 10 % stays on it at 50 %).

The controller is the gateway's: a look every `interval_s` at the evidence since the step began
(error rate only, judged with the false-rollback level of a default look: the budget split over
the four traffic metrics and the steps), `failure_limit` consecutive failing looks roll back, a
look where it passes advances the step once it has lasted `step_interval_s`; the default steps.
All settings are the config's defaults (`proxy.config.RouteSpec`).

Sections (`--only`):
- `aa`: A/A rollouts per shape and route rate until promoted or 2 h: the share rolled back (goal
  ≤ 1 %), with and without the units given to the judge;
- `se`: one 10 % step of 30 minutes at 20 req/s, A/A: the judge's standard error of the
  difference (at the observed rates, with the units' design effect) against the standard
  deviation of the estimate over rollouts (goal 0.8-1.25), and the same per request;
- `margin`: per rate metric (its usual base rate and default margin), a candidate exactly at the
  margin on independent requests (discrete data, few events), looked at every 5 s for 2 h of a
  10 % and a 50 % step at 2 req/s and 20 req/s: the share that ever passes (goal ≤ 5 %), and the
  share that ever fails a look (goal ≤ the metric's alpha), and the old judge's numbers for the
  error rate at its old margin (1 % -> 3 %, 2 points);
- `goals`: the defaults against a doubled error rate (1 % -> 2 %) at 2, 20 and 200 req/s, on
  independent requests and on tenants: rolled back, held past `max_hold_s`, or promoted (goal:
  never promoted in ≥ 95 %, rolled back within the first hour at 200 req/s), and A/A.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analyzers import judge_stats
from analyzers.judge_stats import judge
from analyzers.verdicts import ArmWindow, Outcome, Thresholds
from proxy.config import RouteSpec

BASE_ERROR = 0.01
CONCENTRATION = 10.0
TRAFFIC_METRICS = 4
"""error rate, latency p50 and p95, cost: what a default look at plain traffic judges."""
HORIZON_S = 2 * 3600.0
COMMAND = ".venv/bin/python bench/cluster_simulation.py"

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Shape:
    """Who sends the traffic."""

    name: str
    units: int
    """Sticky units; 0: a key per request."""
    sigma: float = 0.0
    """Lognormal sigma of the units' activity."""
    batch_share: float = 0.0
    """One more unit sending this share of all requests."""


SHAPES = {
    "tenants": Shape("tenants", 200, 2.0),
    "users": Shape("users", 5000, 1.5, 0.05),
    "independent": Shape("independent", 0),
}


@dataclass(frozen=True)
class Population:
    """A shape drawn: each unit's share of the traffic and its error rate."""

    cumulative: tuple[float, ...]
    rates: tuple[float, ...]

    @classmethod
    def draw(cls, shape: Shape, seed: int, base: float = BASE_ERROR) -> Population:
        rng = random.Random(seed)
        weights = [math.exp(shape.sigma * rng.gauss(0.0, 1.0)) for _ in range(shape.units)]
        total = sum(weights)
        shares = [w / total * (1 - shape.batch_share) for w in weights]
        if shape.batch_share:
            shares.append(shape.batch_share)
        a, b = base * CONCENTRATION, (1 - base) * CONCENTRATION
        rates = [rng.betavariate(a, b) for _ in shares]
        # rescale so the traffic-weighted error rate is the base exactly: the population's A/A
        # candidate and the margins are about the rate the route really has
        mean = sum(s * r for s, r in zip(shares, rates, strict=True))
        rates = [min(1.0, r * base / mean) for r in rates]
        cumulative, running = [], 0.0
        for s in shares:
            running += s
            cumulative.append(running)
        return cls(tuple(cumulative), tuple(rates))


@dataclass(frozen=True)
class Settings:
    """The controller's settings (the config's defaults unless given)."""

    steps: tuple[int, ...]
    step_interval_s: float
    max_hold_s: float
    interval_s: float
    failure_limit: int
    thresholds: Thresholds

    @classmethod
    def defaults(cls, **thresholds: float) -> Settings:
        spec = RouteSpec.model_validate(
            {"primary": "p", "canary": {"model": "c", "analysis": {"thresholds": thresholds}}}
        ).canary
        assert spec is not None
        analysis = spec.analysis
        th = analysis.thresholds
        if "min_samples_rate" not in th.model_fields_set:
            th = th.model_copy(update={"min_samples_rate": analysis.min_samples})
        return cls(
            tuple(s for s in spec.steps if s < 100),
            spec.step_interval_s,
            float(spec.max_hold_s or math.inf),
            analysis.interval_s,
            analysis.failure_limit,
            th,
        )


def _poisson(rng: random.Random, lam: float) -> int:
    if lam <= 0:
        return 0
    if lam < 30:
        limit, k, product = math.exp(-lam), 0, rng.random()
        while product > limit:
            k += 1
            product *= rng.random()
        return k
    return max(0, round(rng.gauss(lam, math.sqrt(lam))))


class _Arm:
    """One arm's per-unit (errors, requests) since the step began."""

    def __init__(self) -> None:
        self.tallies: dict[int, list[int]] = {}
        self.requests = 0
        self.errors = 0

    def add(self, unit: int | None, error: bool) -> None:
        if unit is None:  # a key per request: no breakdown to keep
            self.requests += 1
            self.errors += error
            return
        tally = self.tallies.get(unit)
        if tally is None:
            tally = self.tallies[unit] = [0, 0]
        tally[1] += 1
        tally[0] += error
        self.requests += 1
        self.errors += error

    def window(self, with_units: bool) -> ArmWindow:
        if not with_units or not self.tallies:
            return ArmWindow(self.requests, self.errors)
        per_unit = tuple((k, n) for k, n in self.tallies.values())
        return ArmWindow(self.requests, self.errors, units={"errors": per_unit})


@dataclass(frozen=True)
class Rollout:
    """One simulated rollout's question."""

    shape: str
    rate: float
    shift: float = 0.0
    """Added to every unit's error rate on the canary (0: A/A)."""
    factor: float = 1.0
    """Every unit's error rate on the canary multiplied by this."""
    with_units: bool = True
    horizon_s: float = HORIZON_S
    seed: int = 0


@dataclass(frozen=True)
class Ended:
    """How it ended: seconds from the start, None for not within the horizon."""

    rolled_back_s: float | None
    promoted_s: float | None
    held_s: float | None
    """When a step had first held past `max_hold_s`."""


_POPULATIONS: dict[str, Population] = {}


def _population(shape: str, seed: int) -> Population:
    key = f"{shape}:{seed}"
    if key not in _POPULATIONS:
        _POPULATIONS[key] = Population.draw(SHAPES[shape], seed)
    return _POPULATIONS[key]


def rollout(job: Rollout, settings: Settings, population_seed: int = 1) -> Ended:
    """One rollout with the controller's semantics (see the module's docstring)."""
    shape = SHAPES[job.shape]
    rng = random.Random(job.seed)
    th, steps = settings.thresholds, settings.steps
    sequences = len(steps) * TRAFFIC_METRICS
    population = _population(job.shape, population_seed) if shape.units else None
    hashes = [rng.random() for _ in population.rates] if population else []
    step, step_started, streak, now = 0, 0.0, 0, 0.0
    held_s: float | None = None
    primary, candidate = _Arm(), _Arm()
    while now + settings.interval_s <= job.horizon_s:
        weight = steps[step] / 100
        arrivals = _poisson(rng, job.rate * settings.interval_s)
        if population is None:
            for _ in range(arrivals):
                canary = rng.random() < weight
                p = BASE_ERROR * job.factor + job.shift if canary else BASE_ERROR
                (candidate if canary else primary).add(None, rng.random() < p)
        else:
            units = rng.choices(
                range(len(population.rates)), cum_weights=population.cumulative, k=arrivals
            )
            for unit in units:
                p = population.rates[unit]
                if hashes[unit] < weight:
                    candidate.add(unit, rng.random() < min(1.0, p * job.factor + job.shift))
                else:
                    primary.add(unit, rng.random() < p)
        now += settings.interval_s
        (verdict,) = judge(
            primary.window(job.with_units),
            candidate.window(job.with_units),
            th,
            sequences=sequences,
            with_needs=False,
        )
        if verdict.outcome is Outcome.FAIL:
            streak += 1
            if streak >= settings.failure_limit:
                return Ended(now, None, held_s)
            continue
        streak = 0
        if held_s is None and now - step_started > settings.max_hold_s:
            held_s = now
        if verdict.outcome is Outcome.PASS and now - step_started >= settings.step_interval_s:
            step += 1
            if step == len(steps):
                return Ended(None, now, held_s)
            step_started = now
            primary, candidate = _Arm(), _Arm()
    return Ended(None, None, held_s)


# --- the SE: one step's window, reported against the spread over rollouts -----------------------


def snapshot(
    shape: str, rate: float, weight: float, seconds: float, seed: int
) -> tuple[float, ...]:
    """(estimate, se with units, se per request) of one A/A window of `seconds` at `weight`."""
    population = _population(shape, 1)
    rng = random.Random(seed)
    hashes = [rng.random() for _ in population.rates]
    primary, candidate = _Arm(), _Arm()
    n = _poisson(rng, rate * seconds)
    for unit in rng.choices(range(len(population.rates)), cum_weights=population.cumulative, k=n):
        arm = candidate if hashes[unit] < weight else primary
        arm.add(unit, rng.random() < population.rates[unit])
    return (
        candidate.errors / candidate.requests - primary.errors / primary.requests,
        observed_se(primary, candidate, True),
        observed_se(primary, candidate, False),
    )


def observed_se(primary: _Arm, candidate: _Arm, with_units: bool) -> float:
    """The judge's standard error of the difference at the observed rates (its design effects
    from the units when given)."""
    arms = []
    for arm in (primary, candidate):
        per_unit = tuple((k, n) for k, n in arm.tallies.values()) if with_units else None
        arms.append((judge_stats._clusters(per_unit, arm.errors, arm.requests), arm))
    icc = judge_stats._icc([(c, a.errors, a.requests) for c, a in arms])
    variance = 0.0
    for clusters, arm in arms:
        p = arm.errors / arm.requests
        effect = judge_stats._design_effect(arm.requests, clusters, icc)
        effect *= judge_stats._few_units_factor(arm.requests, clusters)
        variance += judge_stats._rate_variance(p, arm.requests, effect)
    return math.sqrt(variance)


# --- both sides at the margin, per rate metric ----------------------------------------------------


@dataclass(frozen=True)
class MarginCase:
    """A rate metric at its usual base rate and default margin."""

    metric: str
    base: float
    margin_key: str


MARGIN_CASES = (
    MarginCase("error_rate", 0.01, "error_rate_increase"),
    MarginCase("check_pass_rate (98 % passing)", 0.02, "check_pass_rate_drop"),
    MarginCase("correction_rate", 0.05, "correction_rate_increase"),
    MarginCase("findings", 0.03, "finding_rate_increase"),
    MarginCase("disagreement (noise 10 %)", 0.10, "disagreement_increase"),
    MarginCase("rule_adaptation (5 % stuck)", 0.05, "rule_adaptation_drop"),
)


def margin_of(case: MarginCase, th: Thresholds) -> float:
    """The metric's margin on a primary at its base rate (as `_rate` computes it)."""
    floor = float(getattr(th, case.margin_key))
    return judge_stats._Boundary(floor, th.rate_margin_relative).margin(case.base)


def at_margin(
    base: float,
    margin: float,
    rate: float,
    weight: float,
    th: Thresholds,
    settings: Settings,
    seed: int,
    horizon_s: float = HORIZON_S,
    candidate_shift: float | None = None,
) -> tuple[bool, bool, bool]:
    """(ever passed, ever failed a look, rolled back) of one step at `weight` for a candidate at
    base + margin (or + `candidate_shift`), looked at every interval until the horizon."""
    rng = random.Random(seed)
    shift = margin if candidate_shift is None else candidate_shift
    k_p = n_p = k_c = n_c = 0
    passed = failed = False
    streak, now = 0, 0.0
    sequences = len(settings.steps) * TRAFFIC_METRICS
    while now + settings.interval_s <= horizon_s:
        now += settings.interval_s
        for _ in range(_poisson(rng, rate * settings.interval_s)):
            if rng.random() < weight:
                n_c += 1
                k_c += rng.random() < base + shift
            else:
                n_p += 1
                k_p += rng.random() < base
        (verdict,) = judge(
            ArmWindow(n_p, k_p), ArmWindow(n_c, k_c), th, sequences=sequences, with_needs=False
        )
        if verdict.outcome is Outcome.PASS:
            passed = True
        if verdict.outcome is Outcome.FAIL:
            failed = True
            streak += 1
            if streak >= settings.failure_limit:
                return passed, failed, True
        else:
            streak = 0
    return passed, failed, False


# --- running and tables ---------------------------------------------------------------------


def _map(fn: Callable[[T], R], jobs: Sequence[T], workers: int) -> list[R]:
    if workers <= 1:
        return [fn(job) for job in jobs]
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(fn, jobs, chunksize=1))


def _rollout_job(args: tuple[Rollout, Settings]) -> Ended:
    return rollout(*args)


def _snapshot_job(args: tuple[str, float, float, float, int]) -> tuple[float, ...]:
    return snapshot(*args)


def _margin_job(args: tuple) -> tuple[bool, bool, bool]:  # type: ignore[type-arg]
    return at_margin(*args)


def _share(count: int, total: int) -> str:
    return f"{count}/{total} ({count / total:.1%})"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def aa_table(
    rates: Sequence[float], runs: int, workers: int, seed: int, users_runs: int | None = None
) -> list[str]:
    settings = Settings.defaults()
    jobs, keys = [], []
    counts = {"tenants": runs, "users": runs if users_runs is None else users_runs}
    for shape in ("tenants", "users", "independent"):
        for rate in rates:
            for with_units in (True, False) if shape != "independent" else (True,):
                for i in range(counts.get(shape, runs)):
                    s = seed * 10_000_000 + round(rate) * 10_000 + i
                    jobs.append((Rollout(shape, rate, with_units=with_units, seed=s), settings))
                    keys.append((shape, rate, with_units))
    done = _map(_rollout_job, jobs, workers)
    out = [
        f"A/A rollouts, {runs} per cell ({counts['users']} for users), each until promoted or "
        f"{_duration(HORIZON_S)}: rolled "
        "back (false rollbacks; goal ≤ 1 %), with the units given to the judge and, for "
        "comparison, per request:",
        "",
        "| shape | route rate | rolled back, units | rolled back, per request | promoted, units |",
        "|---|---|---|---|---|",
    ]
    for shape in ("tenants", "users", "independent"):
        for rate in rates:
            keyed = [e for k, e in zip(keys, done, strict=True) if k == (shape, rate, True)]
            plain = [e for k, e in zip(keys, done, strict=True) if k == (shape, rate, False)]
            back = sum(e.rolled_back_s is not None for e in keyed)
            promoted = sum(e.promoted_s is not None for e in keyed)
            plain_cell = (
                _share(sum(e.rolled_back_s is not None for e in plain), len(plain))
                if plain
                else "(the same)"
            )
            out.append(
                f"| {shape} | {rate:g}/s | {_share(back, len(keyed))} | {plain_cell} "
                f"| {_share(promoted, len(keyed))} |"
            )
    return out


def se_table(runs: int, workers: int, seed: int) -> list[str]:
    out = [
        f"A/A, one step of 30 min at 20 req/s, {runs} rollouts per cell: the judge's standard "
        "error of the difference (mean over rollouts) against the standard deviation of the "
        "estimate over them (goal 0.8-1.25):",
        "",
        "| shape | step | sd of estimate | SE, units: mean (ratio) "
        "| SE per request: mean (ratio) |",
        "|---|---|---|---|---|",
    ]
    for shape in ("tenants", "users"):
        for weight in (0.1, 0.5):
            jobs = [(shape, 20.0, weight, 1800.0, seed * 1_000_000 + i) for i in range(runs)]
            done = _map(_snapshot_job, jobs, workers)
            sd = statistics.stdev(d[0] for d in done)
            units = statistics.fmean(d[1] for d in done)
            plain = statistics.fmean(d[2] for d in done)
            out.append(
                f"| {shape} | {weight:.0%} | {sd:.5f} | {units:.5f} ({units / sd:.2f}) "
                f"| {plain:.5f} ({plain / sd:.2f}) |"
            )
    return out


def margin_table(runs: int, workers: int, seed: int, only: str | None = None) -> list[str]:
    settings = Settings.defaults()
    th = settings.thresholds
    alpha = th.false_rollback_rate / (len(settings.steps) * TRAFFIC_METRICS)
    out = [
        f"A candidate exactly at the margin, independent requests, {runs} steps per cell, looked "
        f"at every {settings.interval_s:g} s for {_duration(HORIZON_S)}: ever passed (goal "
        f"≤ {1 - th.pass_confidence:.0%}) / ever failed a look (goal ≤ alpha {alpha:.2g}):",
        "",
        "| metric | base | margin | 2/s, 10 % | 2/s, 50 % | 20/s, 10 % | 20/s, 50 % |",
        "|---|---|---|---|---|---|---|",
    ]
    cases: list[tuple[str, float, float, Thresholds, float | None]] = [
        (c.metric, c.base, margin_of(c, th), th, None) for c in MARGIN_CASES
    ]
    old = th.model_copy(update={"error_rate_increase": 0.02, "rate_margin_relative": 0.25})
    cases.append(("error_rate, margin of 2 points (the old default)", 0.01, 0.02, old, None))
    floors = {c.metric: getattr(th, c.margin_key) for c in MARGIN_CASES}
    if only:
        cases = [c for c in cases if any(c[0].startswith(p) for p in only.split(","))]
    for name, base, margin, given, shift in cases:
        thresholds = given
        if name in floors:  # the metric's own absolute margin, judged as the error rate is
            thresholds = given.model_copy(update={"error_rate_increase": floors[name]})
        cells = []
        for rate in (2.0, 20.0):
            for weight in (0.1, 0.5):
                jobs = [
                    (base, margin, rate, weight, thresholds, settings,
                     seed * 1_000_000 + round(base * 1e4) * 100 + i, HORIZON_S, shift)
                    for i in range(runs)
                ]  # fmt: skip
                done = _map(_margin_job, jobs, workers)
                passed = sum(d[0] for d in done)
                failed = sum(d[1] for d in done)
                cells.append(f"{passed / runs:.1%} / {failed / runs:.2%}")
        out.append(f"| {name} | {base:.0%} | {margin:.3g} | " + " | ".join(cells) + " |")
    return out


def goals_table(rates: Sequence[float], runs: int, workers: int, seed: int) -> list[str]:
    settings = Settings.defaults()
    out = [
        f"The defaults against a doubled error rate (1 % -> 2 % on every unit), {runs} rollouts "
        f"per cell until rolled back, promoted or {_duration(HORIZON_S)}; `max_hold_s` "
        f"{settings.max_hold_s:g}: rolled back / held past max_hold_s (not rolled back) / "
        "promoted (goal: promoted in ≤ 5 %); time to rollback, median / p95:",
        "",
        "| shape | route rate | rolled back | held | promoted | rollback, median / p95 |",
        "|---|---|---|---|---|---|",
    ]
    for shape in ("independent", "tenants"):
        for rate in rates:
            jobs = [
                (Rollout(shape, rate, factor=2.0, seed=seed * 7_000_000 + round(rate) * 1000 + i),
                 settings)
                for i in range(runs)
            ]  # fmt: skip
            done = _map(_rollout_job, jobs, workers)
            back = sorted(e.rolled_back_s for e in done if e.rolled_back_s is not None)
            held = sum(e.rolled_back_s is None and e.held_s is not None for e in done)
            promoted = sum(e.promoted_s is not None for e in done)
            times = "-"
            if back:
                p95 = back[min(len(back) - 1, math.ceil(0.95 * len(back)) - 1)]
                times = f"{_duration(statistics.median(back))} / {_duration(p95)}"
                if len(back) < len(done):
                    times += f" (of {len(back)})"
            out.append(
                f"| {shape} | {rate:g}/s | {_share(len(back), runs)} | {_share(held, runs)} "
                f"| {_share(promoted, runs)} | {times} |"
            )
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rates", default="2,20,200")
    parser.add_argument("--aa-runs", type=int, default=100)
    parser.add_argument("--users-runs", type=int, help="A/A runs of the users shape")
    parser.add_argument("--se-runs", type=int, default=200)
    parser.add_argument("--margin-runs", type=int, default=400)
    parser.add_argument("--goal-runs", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", default="aa,se,margin,goals")
    parser.add_argument("--metrics", help="margin: only these rows (comma-separated prefixes)")
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    started = time.perf_counter()
    settings = Settings.defaults()
    print(
        f"Settings: steps {list(settings.steps)}, step_interval_s {settings.step_interval_s:g}, "
        f"interval_s {settings.interval_s:g}, failure_limit {settings.failure_limit}, "
        f"max_hold_s {settings.max_hold_s:g}, error_rate_increase "
        f"{settings.thresholds.error_rate_increase:g}, rate_margin_relative "
        f"{settings.thresholds.rate_margin_relative:g}; seed {args.seed}."
    )
    sections = args.only.split(",")
    for name in sections:
        print()
        if name == "aa":
            lines = aa_table(rates, args.aa_runs, args.workers, args.seed, args.users_runs)
        elif name == "se":
            lines = se_table(args.se_runs, args.workers, args.seed)
        elif name == "margin":
            lines = margin_table(args.margin_runs, args.workers, args.seed, args.metrics)
        elif name == "goals":
            lines = goals_table(rates, args.goal_runs, args.workers, args.seed)
        else:
            parser.error(f"--only: unknown section {name!r}")
        print("\n".join(lines), flush=True)
    print()
    print(f"Wall time {time.perf_counter() - started:.0f} s, {args.workers} workers.")


if __name__ == "__main__":
    main()
