"""The experiment statistics on simulated experiments with a known truth (no I/O, no clock: the
pure `analyzers.experiments`, called look after look on accumulating units).

    .venv/bin/python bench/experiment_simulation.py                     # the README's tables
    .venv/bin/python bench/experiment_simulation.py --runs 200 --ttd-runs 10   # quicker
    .venv/bin/python bench/experiment_simulation.py --only coverage,aa,ttd,cost --workers 2 --seed 1

Three questions:

- **Coverage at every look.** `--runs` experiments per scenario, each grown to `--units` units
  per arm and looked at whenever an arm has grown by `--look-growth` (10 %) since the last look,
  from `MIN_UNITS` on: the share of experiments whose interval (`lift`, alpha 0.05, mde 0.03)
  held the true lift at *every* look, and the worst single look. Scenarios: completion rate
  0.60 vs 0.65 over operations (+5 points); the same over users, each with 1 + Poisson(2)
  operations and a completion propensity drawn from Beta (mean 0.60 or 0.65, concentration 4:
  users differ a lot, so their operations are far from independent); cost per operation over
  such users, per-call cost lognormal (median $0.002, sigma 0.4) times a per-user factor
  (lognormal, sigma 0.5), 1 + Binomial retries, the arm 40 % cheaper (a lift of -40 %); latency
  p50 and p95 over operations, lognormal (median 0.8 s, sigma 0.5), the arm 20 % slower.
- **A/A.** `--runs` experiments with identical arms, decided (`decide`, primary completion rate,
  guardrails error rate, correction rate and latency p95 as in the issue's example, mde 0.03)
  whenever an arm has grown by `--aa-look-growth` (20 %), to `--units` units per arm: the share
  that ever declared a winner (`ship`, or `worse`: control wins) and that ever stopped an arm.
- **Time to a decision.** +5 points of completion (0.60 -> 0.65), everything else equal, two
  arms at 50/50 over operations arriving as a Poisson process at 20 operations/minute, 2/s and
  200/s; the decision loop looks every `--interval-s` (5 s) but skips a look that would see
  less than 5 % more operations than the last (so times are exact to 5 %): the time to the
  first `ship`, and what `eta_s` predicted at the first look with 1,000 operations.

And the CPU one look costs (`decide` over three arms) at 1,000 to 100,000 operations per arm.

Three more on the traffic shapes of real teams (`--only clustered,srm,srm-power`):

- **Latency over clustered units.** Operations arrive one by one, each for a unit drawn by its
  activity; a unit's arm is fixed (50/50), and its operations share its latency factor. 200
  tenants (activity lognormal sigma 2, latency factor lognormal sigma 0.5), or 5,000 users
  (activity lognormal sigma 1.5, latency factor lognormal sigma 0.3) with one batch user
  carrying 5 % of all operations at twice the latency. Operations lognormal (median 0.8 s,
  sigma 0.5), the arm 20 % slower: the true lift of every quantile is +20 %. Looked at each
  time the operations grow by `--clustered-growth` (20 %) from the first moment both arms hold
  `MIN_UNITS` units, to `--tenant-operations` (10,000) or `--user-operations` (20,000): the
  share of experiments whose p50 and p95 intervals (`lift`, alpha 0.05) held +20 % at every
  look, the same with every operation taken as a unit of its own (what a per-request key
  assumes), and at the last look the reported standard error (root mean square over the runs)
  over the true spread of the estimates (their standard deviation over the runs).
- **Sample-ratio false flags.** `--srm-runs` correct 50/50 splits, looked at each time the
  units grow by 1 % from 20 to `--srm-units` (200,000): the share ever flagged by
  `sample_ratio_mismatch`, and by Pearson's chi-square at p < 0.001 on the same looks.
- **Time to flag.** One arm losing 5, 10 or 20 % of its units (a filter, a crash before the
  record is written), 50/50 and 50/25/25: the units seen when first flagged.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analyzers.experiments import (
    MIN_UNITS,
    SRM_ALPHA,
    Unit,
    Verdict,
    decide,
    lift,
    sample_ratio_mismatch,
)
from analyzers.unit_quantile import unit_quantile

COMMAND = ".venv/bin/python bench/experiment_simulation.py"
ALPHA = 0.05
MDE = 0.03
COMPLETION = 0.60
LIFT_POINTS = 0.05
COST_MEDIAN_USD = 0.002
COST_SIGMA = 0.4
USER_COST_SIGMA = 0.5
LATENCY_MEDIAN_S = 0.8
LATENCY_SIGMA = 0.5
RETRY = 0.1
ERRORS = 0.01
CORRECTIONS = 0.1
USER_OPERATIONS_MEAN = 2.0
"""Mean of the Poisson number of operations a user has beyond the first."""
CONCENTRATION = 4.0
GUARDRAILS = ("error_rate", "correction_rate", "latency_p95")
PREDICT_AT = 1000
"""Operations (both arms) at the look whose `eta_s` is compared with the real time: earlier
estimates of the lift are too noisy to predict from (they assume the estimate holds)."""
RATES = {"20 operations/min": 20 / 60, "2/s": 2.0, "200/s": 200.0}


# -- traffic ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Arm:
    """What one arm's operations are like."""

    completion: float = COMPLETION
    cost_factor: float = 1.0
    latency_factor: float = 1.0


def _poisson(rng: random.Random, mean: float) -> int:
    limit, k, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        k += 1
        product *= rng.random()
    return k


_LOG_COST_MEDIAN = math.log(COST_MEDIAN_USD)
_LOG_LATENCY_MEDIAN = math.log(LATENCY_MEDIAN_S)


def operation(rng: random.Random, name: str, arm: Arm) -> Unit:
    """One operation as a unit: its calls (a retry now and then), their errors, cost, latency,
    and its outcomes."""
    # The draws in a fixed order (a run is reproducible from its seed); lists rather than
    # generators, a simulation makes hundreds of thousands of these.
    calls = 1 + (rng.random() < RETRY)
    cost = sum([rng.lognormvariate(_LOG_COST_MEDIAN, COST_SIGMA) for _ in range(calls)])
    latency = arm.latency_factor * rng.lognormvariate(_LOG_LATENCY_MEDIAN, LATENCY_SIGMA)
    return Unit(
        name,
        operations=1,
        requests=calls,
        errors=sum([rng.random() < ERRORS for _ in range(calls)]),
        cost_usd=arm.cost_factor * cost,
        completed=int(rng.random() < arm.completion),
        outcomes=1,
        corrected=int(rng.random() < CORRECTIONS),
        corrected_known=1,
        latencies_s=(latency,),
    )


def user(rng: random.Random, name: str, arm: Arm) -> Unit:
    """One user as a unit: 1 + Poisson operations, all with the user's own completion
    propensity (Beta around the arm's rate) and cost factor."""
    count = 1 + _poisson(rng, USER_OPERATIONS_MEAN)
    a = arm.completion * CONCENTRATION
    propensity = rng.betavariate(a, CONCENTRATION - a)
    factor = rng.lognormvariate(0.0, USER_COST_SIGMA)
    calls = count + sum([rng.random() < RETRY for _ in range(count)])
    cost = sum([rng.lognormvariate(_LOG_COST_MEDIAN, COST_SIGMA) for _ in range(calls)])
    return Unit(
        name,
        operations=count,
        requests=calls,
        errors=0,
        cost_usd=arm.cost_factor * factor * cost,
        completed=sum([rng.random() < propensity for _ in range(count)]),
        outcomes=count,
    )


# -- coverage ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    metric: str
    make: Callable[[random.Random, str, Arm], Unit]
    control: Arm
    arm: Arm
    truth: float
    """The true lift, on the metric's scale (points as a share, or relative)."""


SCENARIOS = (
    Scenario(
        "completion +5 pts, operations", "completion_rate", operation,
        Arm(), Arm(completion=COMPLETION + LIFT_POINTS), LIFT_POINTS,
    ),
    Scenario(
        "completion +5 pts, users", "completion_rate", user,
        Arm(), Arm(completion=COMPLETION + LIFT_POINTS), LIFT_POINTS,
    ),
    Scenario(
        "cost/operation -40 %, users (delta method)", "cost_per_operation", user,
        Arm(), Arm(cost_factor=0.6), -0.4,
    ),
    Scenario(
        "latency p50 +20 %, operations", "latency_p50", operation,
        Arm(), Arm(latency_factor=1.2), 0.2,
    ),
    Scenario(
        "latency p95 +20 %, operations", "latency_p95", operation,
        Arm(), Arm(latency_factor=1.2), 0.2,
    ),
)  # fmt: skip


def looks(units: int, growth: float) -> list[int]:
    """The unit counts (per arm) at which an experiment is looked at: from `MIN_UNITS`, each
    `growth` times the last (at least one more), ending at `units`."""
    out, n = [], MIN_UNITS
    while n < units:
        out.append(n)
        n = max(n + 1, math.ceil(n * growth))
    out.append(units)
    return out


@dataclass(frozen=True, slots=True)
class CoverageRun:
    covered_always: bool
    misses: tuple[int, ...]
    """Indices of the looks whose interval missed the truth."""
    final_width: float


def coverage_run(scenario: Scenario, seed: str, units: int, growth: float) -> CoverageRun:
    rng = random.Random(seed)
    control = [scenario.make(rng, "control", scenario.control) for _ in range(units)]
    arm = [scenario.make(rng, "arm", scenario.arm) for _ in range(units)]
    misses, width = [], math.inf
    for i, n in enumerate(looks(units, growth)):
        result = lift(scenario.metric, control[:n], arm[:n], alpha=ALPHA, mde=MDE)
        assert result.low is not None and result.high is not None  # n >= MIN_UNITS
        if not result.low <= scenario.truth <= result.high:
            misses.append(i)
        width = result.high - result.low
    return CoverageRun(not misses, tuple(misses), width)


@dataclass(frozen=True, slots=True)
class Coverage:
    scenario: str
    runs: int
    covered_always: float
    worst_look: float
    looks: int
    final_width: float


def coverage(
    scenario: Scenario, runs: int, units: int, growth: float, seed: int, workers: int
) -> Coverage:
    seeds = [f"{seed}:{scenario.name}:{i}" for i in range(runs)]
    results = _map(coverage_run, [(scenario, s, units, growth) for s in seeds], workers)
    count = len(looks(units, growth))
    missed = [0] * count
    for r in results:
        for i in r.misses:
            missed[i] += 1
    return Coverage(
        scenario.name,
        runs,
        sum(r.covered_always for r in results) / runs,
        1 - max(missed) / runs,
        count,
        statistics.median(r.final_width for r in results),
    )


# -- A/A --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AaRun:
    winner: bool
    stopped: bool


def aa_run(seed: str, units: int, growth: float) -> AaRun:
    rng = random.Random(seed)
    control = [operation(rng, "control", Arm()) for _ in range(units)]
    other = [operation(rng, "b", Arm()) for _ in range(units)]
    winner = stopped = False
    for n in looks(units, growth):
        decision = decide(
            "completion_rate", GUARDRAILS, "control", {"control": control[:n], "b": other[:n]},
            mde=MDE, rate_per_s=None, alpha=ALPHA,
        ).arm("b")  # fmt: skip
        winner = winner or decision.verdict in (Verdict.SHIP, Verdict.WORSE)
        stopped = stopped or decision.verdict is Verdict.STOPPED
        if winner and stopped:
            break
    return AaRun(winner, stopped)


@dataclass(frozen=True, slots=True)
class AaResult:
    runs: int
    looks: int
    winners: int
    stopped: int


def aa(runs: int, units: int, growth: float, seed: int, workers: int) -> AaResult:
    seeds = [f"{seed}:aa:{i}" for i in range(runs)]
    results = _map(aa_run, [(s, units, growth) for s in seeds], workers)
    return AaResult(
        runs,
        len(looks(units, growth)),
        sum(r.winner for r in results),
        sum(r.stopped for r in results),
    )


# -- time to a decision -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TtdRun:
    decided_s: float | None
    verdict: str
    units: int
    """Operations in the experiment at the decision (or the horizon)."""
    predicted_s: float | None
    """eta_s at the first look with `PREDICT_AT` operations, plus the time of that look."""


def ttd_run(seed: str, rate_per_s: float, interval_s: float, horizon_s: float, arm: Arm) -> TtdRun:
    rng = random.Random(seed)
    units: dict[str, list[Unit]] = {"control": [], "b": []}
    arms = {"control": Arm(), "b": arm}
    clock, next_arrival, last_seen = 0.0, rng.expovariate(rate_per_s), 0
    predicted: float | None = None
    verdict = Verdict.INCONCLUSIVE
    while clock < horizon_s:
        clock += interval_s
        while next_arrival <= clock:
            name = "control" if rng.random() < 0.5 else "b"
            units[name].append(operation(rng, name, arms[name]))
            next_arrival += rng.expovariate(rate_per_s)
        seen = len(units["control"]) + len(units["b"])
        if seen < max(2 * MIN_UNITS, last_seen * 1.05):
            continue
        last_seen = seen
        observed_rate = seen / clock
        decision = decide(
            "completion_rate", GUARDRAILS, "control", units, mde=MDE,
            rate_per_s=observed_rate, alpha=ALPHA,
        ).arm("b")  # fmt: skip
        verdict = decision.verdict
        if predicted is None and seen >= PREDICT_AT and decision.eta_s is not None:
            predicted = clock + decision.eta_s
        if verdict is not Verdict.INCONCLUSIVE:
            return TtdRun(clock, verdict.value, seen, predicted)
    return TtdRun(None, verdict.value, len(units["control"]) + len(units["b"]), predicted)


@dataclass(frozen=True, slots=True)
class TtdResult:
    rate: str
    runs: int
    shipped: int
    other: int
    median_s: float | None
    p95_s: float | None
    median_units: float | None
    predicted_median_s: float | None


def time_to_decision(
    label: str,
    rate_per_s: float,
    runs: int,
    interval_s: float,
    horizon_s: float,
    seed: int,
    workers: int,
    arm: Arm | None = None,
) -> TtdResult:
    arm = arm or Arm(completion=COMPLETION + LIFT_POINTS)
    seeds = [f"{seed}:ttd:{label}:{i}" for i in range(runs)]
    results = _map(ttd_run, [(s, rate_per_s, interval_s, horizon_s, arm) for s in seeds], workers)
    shipped = [r for r in results if r.verdict == Verdict.SHIP]
    decided = [r.decided_s for r in shipped if r.decided_s is not None]
    predicted = [r.predicted_s for r in results if r.predicted_s is not None]
    return TtdResult(
        label,
        runs,
        len(shipped),
        sum(r.decided_s is not None and r.verdict != Verdict.SHIP for r in results),
        statistics.median(decided) if decided else None,
        _quantile(decided, 0.95) if decided else None,
        statistics.median(r.units for r in shipped) if shipped else None,
        statistics.median(predicted) if predicted else None,
    )


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


# -- the cost of a look -----------------------------------------------------------------------


def look_cost(units_per_arm: int, arms: int = 3, repeats: int = 3) -> float:
    """Seconds of CPU one `decide` takes over `arms` arms (control included) of
    `units_per_arm` operations each, the issue's guardrails: the best of `repeats`."""
    rng = random.Random(units_per_arm)
    units = {
        f"arm{i}": [operation(rng, f"arm{i}", Arm()) for _ in range(units_per_arm)]
        for i in range(arms)
    }
    best = math.inf
    for _ in range(repeats):
        started = time.process_time()
        decide("completion_rate", GUARDRAILS, "arm0", units, mde=MDE, rate_per_s=1.0)
        best = min(best, time.process_time() - started)
    return best


# -- latency over clustered units ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Population:
    """Units of one traffic shape: how active each is and how slow."""

    name: str
    units: int
    activity_sigma: float
    latency_sigma: float
    batch_share: float = 0.0
    """Share of all operations one batch unit carries (0: none)."""
    batch_latency: float = 1.0
    """The batch unit's latency factor."""


TENANTS = Population("200 tenants", 200, 2.0, 0.5)
USERS = Population("5,000 users, one batch user", 5000, 1.5, 0.3, 0.05, 2.0)
SLOWER = 1.2
QUANTILE_METRICS = ("latency_p50", "latency_p95")


@dataclass(frozen=True, slots=True)
class ClusteredRun:
    covered: tuple[bool, ...]
    """Per metric: the interval over units held the truth at every look."""
    covered_flat: tuple[bool, ...]
    """Per metric: the same with every operation a unit of its own."""
    centres: tuple[float, ...]
    """Per metric: the log-lift estimate at the last look."""
    ses: tuple[float, ...]
    """Per metric: its standard error over units at the last look (what the interval uses)."""
    ses_flat: tuple[float, ...]
    """Per metric: the standard error with every operation a unit of its own."""
    looks: int


def _log_lift_se(metric: str, control: list[Unit], arm: list[Unit]) -> tuple[float, float]:
    """(log lift, its standard error) as `lift` computes them, from `unit_quantile`."""
    q = 0.5 if metric == "latency_p50" else 0.95
    sides = [unit_quantile([u.latencies_s for u in us], q) for us in (control, arm)]
    c, a = sides
    assert c is not None and a is not None and c.log_se is not None and a.log_se is not None
    return math.log(a.value / c.value), math.hypot(c.log_se, a.log_se)


def clustered_run(population: Population, seed: str, total: int, growth: float) -> ClusteredRun:
    rng = random.Random(seed)
    n = population.units
    activity = [rng.lognormvariate(0.0, population.activity_sigma) for _ in range(n)]
    factor = [rng.lognormvariate(0.0, population.latency_sigma) for _ in range(n)]
    if population.batch_share:
        rest = math.fsum(activity[1:])
        activity[0] = rest * population.batch_share / (1 - population.batch_share)
        factor[0] = population.batch_latency
    in_arm = [rng.random() < 0.5 for _ in range(n)]
    drawn = rng.choices(range(n), weights=activity, k=total)
    latencies: dict[int, list[float]] = {}
    truth = SLOWER - 1
    count = len(QUANTILE_METRICS)
    held, held_flat = [True] * count, [True] * count
    looks, next_look = 0, 0
    sides: dict[bool, list[Unit]] = {}
    flat: dict[bool, list[Unit]] = {}
    for i, who in enumerate(drawn, 1):
        slower = SLOWER if in_arm[who] else 1.0
        value = factor[who] * slower * rng.lognormvariate(_LOG_LATENCY_MEDIAN, LATENCY_SIGMA)
        latencies.setdefault(who, []).append(value)
        if i < next_look and i < total:
            continue
        sides = {False: [], True: []}
        for unit, values in latencies.items():
            name = "arm" if in_arm[unit] else "control"
            sides[in_arm[unit]].append(
                Unit(name, len(values), len(values), 0, 0.0, latencies_s=tuple(values))
            )
        if min(len(sides[False]), len(sides[True])) < MIN_UNITS:
            next_look = math.ceil(i * 1.02)
            continue
        next_look = max(i + 1, math.ceil(i * growth))
        looks += 1
        flat = {
            side: [Unit(u.arm, 1, 1, 0, 0.0, latencies_s=(v,)) for u in us for v in u.latencies_s]
            for side, us in sides.items()
        }
        for m, metric in enumerate(QUANTILE_METRICS):
            result = lift(metric, sides[False], sides[True], alpha=ALPHA, mde=MDE)
            alone = lift(metric, flat[False], flat[True], alpha=ALPHA, mde=MDE)
            assert result.low is not None and result.high is not None
            assert alone.low is not None and alone.high is not None
            held[m] = held[m] and result.low <= truth <= result.high
            held_flat[m] = held_flat[m] and alone.low <= truth <= alone.high
    last = [_log_lift_se(m, sides[False], sides[True]) for m in QUANTILE_METRICS]
    last_flat = [_log_lift_se(m, flat[False], flat[True]) for m in QUANTILE_METRICS]
    return ClusteredRun(
        tuple(held),
        tuple(held_flat),
        tuple(c for c, _ in last),
        tuple(se for _, se in last),
        tuple(se for _, se in last_flat),
        looks,
    )


@dataclass(frozen=True, slots=True)
class ClusteredResult:
    population: str
    metric: str
    runs: int
    looks: float
    covered: float
    covered_flat: float
    se_ratio: float
    """The reported standard error (root mean square over the runs) over the standard deviation
    of the estimates."""
    se_ratio_flat: float


def _rms(values: Iterable[float]) -> float:
    squares = [v * v for v in values]
    return math.sqrt(math.fsum(squares) / len(squares))


def clustered(
    population: Population, runs: int, total: int, growth: float, seed: int, workers: int
) -> list[ClusteredResult]:
    seeds = [f"{seed}:clustered:{population.name}:{i}" for i in range(runs)]
    results = _map(clustered_run, [(population, s, total, growth) for s in seeds], workers)
    out = []
    for m, metric in enumerate(QUANTILE_METRICS):
        spread = statistics.stdev(r.centres[m] for r in results)
        out.append(
            ClusteredResult(
                population.name,
                metric,
                runs,
                statistics.median(r.looks for r in results),
                sum(r.covered[m] for r in results) / runs,
                sum(r.covered_flat[m] for r in results) / runs,
                _rms(r.ses[m] for r in results) / spread,
                _rms(r.ses_flat[m] for r in results) / spread,
            )
        )
    return out


# -- sample-ratio mismatch --------------------------------------------------------------------


def _pearson_flags(counts: dict[str, int], weights: dict[str, float]) -> bool:
    """Pearson's chi-square at p < 0.001, what the check was (two arms: df 1, erfc)."""
    total = sum(counts.values())
    expected = {arm: total * w / sum(weights.values()) for arm, w in weights.items()}
    chi2 = math.fsum((counts[a] - expected[a]) ** 2 / expected[a] for a in weights)
    return math.erfc(math.sqrt(chi2 / 2)) < 0.001


@dataclass(frozen=True, slots=True)
class SrmRun:
    flagged_at: int | None
    """Units seen at the first look flagged (None: never)."""
    pearson_at: int | None
    """The same for Pearson's chi-square at p < 0.001 (two arms only)."""


def srm_run(
    seed: str, weights: dict[str, float], lost: str | None, loss: float, units: int
) -> SrmRun:
    """A split by `weights`, arm `lost` losing `loss` of its units, looked at each time the units
    grow by 1 % from 20 to `units` (stopping once both tests have flagged)."""
    rng = random.Random(seed)
    arms = list(weights)
    cumulative = list(itertools.accumulate(weights.values()))
    counts = dict.fromkeys(arms, 0)
    seen, look = 0, 20
    flagged: int | None = None
    pearson: int | None = None
    two = len(arms) == 2
    while seen < units:
        arm = arms[bisect.bisect(cumulative, rng.random() * cumulative[-1])]
        if arm == lost and rng.random() < loss:
            continue
        counts[arm] += 1
        seen += 1
        if seen < look:
            continue
        look = max(look + 1, math.ceil(look * 1.01))
        if flagged is None and sample_ratio_mismatch(counts, weights).flagged:
            flagged = seen
        if two and pearson is None and _pearson_flags(counts, weights):
            pearson = seen
        if flagged is not None and (pearson is not None or not two):
            break
    return SrmRun(flagged, pearson)


@dataclass(frozen=True, slots=True)
class SrmResult:
    label: str
    runs: int
    flagged: int
    pearson: int | None
    median_units: float | None
    p90_units: float | None


def srm(
    label: str,
    weights: dict[str, float],
    lost: str | None,
    loss: float,
    runs: int,
    units: int,
    seed: int,
    workers: int,
) -> SrmResult:
    seeds = [f"{seed}:srm:{label}:{i}" for i in range(runs)]
    results = _map(srm_run, [(s, weights, lost, loss, units) for s in seeds], workers)
    times = [r.flagged_at for r in results if r.flagged_at is not None]
    return SrmResult(
        label,
        runs,
        len(times),
        sum(r.pearson_at is not None for r in results) if len(weights) == 2 else None,
        statistics.median(times) if times else None,
        _quantile(times, 0.9) if times else None,
    )


SRM_LOSSES = (
    ("50/50, one arm loses 20 %", {"control": 1.0, "b": 1.0}, "b", 0.2),
    ("50/50, one arm loses 10 %", {"control": 1.0, "b": 1.0}, "b", 0.1),
    ("50/50, one arm loses 5 %", {"control": 1.0, "b": 1.0}, "b", 0.05),
    ("50/25/25, a 25 % arm loses 10 %", {"control": 2.0, "b": 1.0, "c": 1.0}, "b", 0.1),
)


# -- running ----------------------------------------------------------------------------------


def _map(
    function: Callable[..., object], argument_lists: list[tuple[object, ...]], workers: int
) -> list:  # type: ignore[type-arg]
    if workers <= 1:
        return [function(*args) for args in argument_lists]
    with ProcessPoolExecutor(workers) as pool:
        futures = [pool.submit(function, *args) for args in argument_lists]
        return [f.result() for f in futures]


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--units", type=int, default=3000, help="units per arm, coverage and A/A")
    parser.add_argument("--look-growth", type=float, default=1.1)
    parser.add_argument("--aa-look-growth", type=float, default=1.2)
    parser.add_argument("--ttd-runs", type=int, default=40)
    parser.add_argument("--interval-s", type=float, default=5.0)
    parser.add_argument("--horizon-h", type=float, default=24.0)
    parser.add_argument("--scenario", default="", help="only coverage scenarios naming this")
    parser.add_argument("--clustered-runs", type=int, default=400)
    parser.add_argument("--clustered-growth", type=float, default=1.2)
    parser.add_argument("--tenant-operations", type=int, default=10_000)
    parser.add_argument("--user-operations", type=int, default=20_000)
    parser.add_argument("--srm-runs", type=int, default=1000)
    parser.add_argument("--srm-units", type=int, default=200_000)
    parser.add_argument("--only", default="coverage,aa,ttd,cost,clustered,srm,srm-power")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    parts = set(args.only.split(","))
    started = time.monotonic()
    print(f"`{COMMAND} {' '.join(argv if argv is not None else sys.argv[1:])}`".replace(" `", "`"))
    print(f"\nalpha {ALPHA}, mde {MDE}, MIN_UNITS {MIN_UNITS}, seed {args.seed}\n")
    if "coverage" in parts:
        print(
            f"Coverage: {args.runs} experiments per scenario, {args.units} units per arm, "
            f"a look each time an arm grows by {args.look_growth - 1:.0%} from {MIN_UNITS}.\n"
        )
        print(
            "| scenario | looks | covered at every look | worst single look | final width, median |"
        )
        print("|---|---|---|---|---|")
        for scenario in [x for x in SCENARIOS if args.scenario in x.name]:
            c = coverage(scenario, args.runs, args.units, args.look_growth, args.seed, args.workers)
            unit = "pts" if scenario.metric == "completion_rate" else "%"
            print(
                f"| {c.scenario} | {c.looks} | {c.covered_always:.1%} | {c.worst_look:.1%} | "
                f"{c.final_width * 100:.1f} {unit} |",
                flush=True,
            )
    if "aa" in parts:
        a = aa(args.runs, args.units, args.aa_look_growth, args.seed, args.workers)
        print(
            f"\nA/A: {a.runs} experiments, {args.units} operations per arm, {a.looks} looks "
            f"each (primary completion, guardrails {', '.join(GUARDRAILS)}):\n"
        )
        print("| ever declared a winner (ship or worse) | ever stopped an arm |")
        print("|---|---|")
        print(
            f"| {a.winners}/{a.runs} ({a.winners / a.runs:.1%}) | "
            f"{a.stopped}/{a.runs} ({a.stopped / a.runs:.1%}) |",
            flush=True,
        )
    if "ttd" in parts:
        print(
            f"\nTime to a decision, completion {COMPLETION:.2f} -> "
            f"{COMPLETION + LIFT_POINTS:.2f}, 50/50, {args.ttd_runs} runs per rate, looks "
            f"every {args.interval_s:g} s, horizon {args.horizon_h:g} h:\n"
        )
        print(
            "| operations arriving | shipped | other verdict | time to ship, median | p95 | "
            "operations then, median | predicted at 1,000 operations, median |"
        )
        print("|---|---|---|---|---|---|---|")
        for label, rate in RATES.items():
            t = time_to_decision(
                label,
                rate,
                args.ttd_runs,
                args.interval_s,
                args.horizon_h * 3600,
                args.seed,
                args.workers,
            )
            units = "-" if t.median_units is None else f"{t.median_units:,.0f}"
            print(
                f"| {t.rate} | {t.shipped}/{t.runs} | {t.other} | {_duration(t.median_s)} | "
                f"{_duration(t.p95_s)} | {units} | {_duration(t.predicted_median_s)} |",
                flush=True,
            )
    if "cost" in parts:
        print("\nThe cost of one look (`decide`, 3 arms, the guardrails above), CPU seconds:\n")
        print("| operations per arm | one look |")
        print("|---|---|")
        for n in (1_000, 10_000, 100_000):
            print(f"| {n:,} | {look_cost(n):.3f} s |", flush=True)
    if "clustered" in parts:
        _print_clustered(args)
    if "srm" in parts:
        _print_srm(args)
    if "srm-power" in parts:
        _print_srm_power(args)
    print(f"\n({time.monotonic() - started:.0f} s)")


def _print_clustered(args: argparse.Namespace) -> None:
    print(
        f"\nLatency over clustered units: {args.clustered_runs} experiments per shape, the arm "
        f"{SLOWER - 1:.0%} slower, a look each time the operations grow by "
        f"{args.clustered_growth - 1:.0%} (alpha {ALPHA} per interval):\n"
    )
    print(
        "| units | operations | metric | looks, median | covered at every look | "
        "operations as units: covered | SE / true spread | operations as units: SE / spread |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for population, total in ((TENANTS, args.tenant_operations), (USERS, args.user_operations)):
        results = clustered(
            population, args.clustered_runs, total, args.clustered_growth, args.seed, args.workers
        )
        for r in results:
            print(
                f"| {r.population} | {total:,} | {r.metric} | {r.looks:.0f} | {r.covered:.1%} | "
                f"{r.covered_flat:.1%} | {r.se_ratio:.2f} | {r.se_ratio_flat:.2f} |",
                flush=True,
            )


def _print_srm(args: argparse.Namespace) -> None:
    r = srm(
        "correct", {"control": 1.0, "b": 1.0}, None, 0.0, args.srm_runs, args.srm_units,
        args.seed, args.workers,
    )  # fmt: skip
    print(
        f"\nSample-ratio false flags: {r.runs} correct 50/50 splits, a look each time the units "
        f"grow by 1 % from 20 to {args.srm_units:,} (SRM_ALPHA {SRM_ALPHA}):\n"
    )
    print("| test | ever flagged |")
    print("|---|---|")
    print(f"| `sample_ratio_mismatch` (Dirichlet-multinomial e-process) | {r.flagged}/{r.runs} "
          f"({r.flagged / r.runs:.1%}) |")  # fmt: skip
    pearson = r.pearson or 0
    print(f"| Pearson's chi-square, p < 0.001 (the check before) | {pearson}/{r.runs} "
          f"({pearson / r.runs:.1%}) |", flush=True)  # fmt: skip


def _print_srm_power(args: argparse.Namespace) -> None:
    print(
        f"\nTime to flag a broken split: {args.srm_runs} experiments per case, looks as above, "
        f"up to {args.srm_units:,} units:\n"
    )
    print("| split | flagged | units at the flag, median | p90 |")
    print("|---|---|---|---|")
    for label, weights, lost, loss in SRM_LOSSES:
        r = srm(label, weights, lost, loss, args.srm_runs, args.srm_units, args.seed, args.workers)
        median = "-" if r.median_units is None else f"{r.median_units:,.0f}"
        p90 = "-" if r.p90_units is None else f"{r.p90_units:,.0f}"
        print(f"| {label} | {r.flagged}/{r.runs} | {median} | {p90} |", flush=True)


if __name__ == "__main__":
    main()
