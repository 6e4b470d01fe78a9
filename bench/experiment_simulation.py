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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analyzers.experiments import MIN_UNITS, Unit, Verdict, decide, lift

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
    parser.add_argument("--only", default="coverage,aa,ttd,cost")
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
        for scenario in SCENARIOS:
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
    print(f"\n({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
