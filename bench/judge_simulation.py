"""The canary judge at real traffic levels: promotion, rollback and false-rollback times of whole
rollouts on a virtual clock (no sleeping), at route rates of 1 to 100 req/s.

    .venv/bin/python bench/judge_simulation.py [--rates 1,2,5,20,100] [--runs 12] [--aa-runs 40]
        [--regression-runs 12] [--horizon-h 2] [--workers 2] [--seed 1]
        [--steps 10,50] [--step-interval-s 300] [--interval-s 10] [--min-samples 50]
        [--failure-limit 2] [--threshold error_rate_increase=0.03 ...]
    .venv/bin/python bench/judge_simulation.py --sizing-table [--sizing-runs 11]

Every setting not given on the command line is the config's default, read from the config models
(`routes.NAME.canary` validated through `proxy.config.RouteSpec`), so the simulation follows the
defaults when they change. The flags validate through the same models.

What is simulated is the controller: every `interval_s` the judge looks at the traffic metrics
(error rate, latency p50/p95, cost) on both arms' evidence since the current step began, and, in a
second `judge` call, at the rule check on its epoch (since the rule change or the rollout start,
whichever is later), both calls with `sequences=len(steps)`. A look with any fail counts towards
`failure_limit` consecutive failing looks, which roll back; a look without one resets the count.
When every verdict passes and the step has lasted `step_interval_s`, the canary advances; passing
the last step below 100 % promotes. Inconclusive holds.

Traffic: Poisson arrivals per arm (primary R·(1 - w), canary R·w); latency lognormal (median
0.8 s, sigma 0.5, p95 1.82 s), 1 % errors, a rule check passing 98 %, cost per request lognormal
(median $0.002, sigma 0.4). Samples come from 2^18-point inverse-CDF tables (recorded latencies
have a finite resolution anyway, and it is ten times faster than `random.lognormvariate`).

Scenarios, per route rate:
- good: an identical candidate from the start of the rollout, until promoted or the give-up
  horizon (`--horizon-h`, 2 h): time to promote, time to pass the first step and the canary
  answers it had then, rollbacks (false) within the horizon.
- A/A: `--aa-runs` more identical candidates, each until promoted or 30 minutes: rollbacks.
- rule change: the candidate's check pass rate falls 0.98 -> 0.80 (the primary keeps 0.98) at a
  uniformly random moment of the first look of a step (the first step, and later ones): time from
  the change to the rollback.
- p95: the candidate's latency p95 is 50 % higher, median unchanged, from the start: time to
  rollback.

Only decisions are simulated: `needs` of inconclusive verdicts, which the controller shows but does
not decide on, is not computed (it is the costliest part of a verdict); instead the tables give the
canary answers a step had when it passed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analyzers.judge_stats import judge
from analyzers.verdicts import ArmWindow, Outcome, Thresholds
from proxy.config import RouteSpec

LATENCY_MEDIAN_S = 0.8
LATENCY_SIGMA = 0.5
Z95 = NormalDist().inv_cdf(0.95)
SLOW_TAIL_SIGMA = LATENCY_SIGMA + math.log(1.5) / Z95  # p95 x1.5, same median
COST_MEDIAN_USD = 0.002
COST_SIGMA = 0.4
ERROR_RATE = 0.01
CHECK_PASS = 0.98
BROKEN_CHECK_PASS = 0.80
AA_RUN_S = 30 * 60
TABLE_SIZE = 1 << 18
RATES = (1.0, 2.0, 5.0, 20.0, 100.0)
SIZING_WEIGHTS = (1, 5, 10, 25, 50)
COMMAND = ".venv/bin/python bench/judge_simulation.py"

T = TypeVar("T")
R = TypeVar("R")


def _lognormal_table(median: float, sigma: float) -> list[float]:
    normal = NormalDist()
    return [
        median * math.exp(sigma * normal.inv_cdf((i + 0.5) / TABLE_SIZE)) for i in range(TABLE_SIZE)
    ]


_TABLES: dict[str, list[float]] = {}


def _table(name: str) -> list[float]:
    if not _TABLES:
        _TABLES["latency"] = _lognormal_table(LATENCY_MEDIAN_S, LATENCY_SIGMA)
        _TABLES["slow_tail"] = _lognormal_table(LATENCY_MEDIAN_S, SLOW_TAIL_SIGMA)
        _TABLES["cost"] = _lognormal_table(COST_MEDIAN_USD, COST_SIGMA)
    return _TABLES[name]


@dataclass(frozen=True)
class Settings:
    """The rollout settings a simulation runs with, as the controller reads them."""

    steps: tuple[int, ...]
    step_interval_s: float
    interval_s: float
    failure_limit: int
    thresholds: Thresholds

    @classmethod
    def from_config(cls, canary: dict[str, Any] | None = None) -> Settings:
        """The settings of a `routes.NAME.canary` section (`model` filled in), defaults for the
        rest; `analysis.min_samples` becomes `thresholds.min_samples_rate` unless that is set, as
        in the controller."""
        spec = RouteSpec.model_validate(
            {"primary": "primary", "canary": {"model": "candidate", **(canary or {})}}
        ).canary
        assert spec is not None
        analysis = spec.analysis
        thresholds = analysis.thresholds
        if "min_samples_rate" not in thresholds.model_fields_set:
            thresholds = thresholds.model_copy(update={"min_samples_rate": analysis.min_samples})
        return cls(
            tuple(spec.steps),
            spec.step_interval_s,
            analysis.interval_s,
            analysis.failure_limit,
            thresholds,
        )

    @property
    def judged_steps(self) -> tuple[int, ...]:
        """The steps that are judged: a step of 100 % is promotion itself."""
        return tuple(s for s in self.steps if s < 100)

    def describe(self) -> str:
        """One line: the settings and a digest of every threshold."""
        digest = hashlib.sha256(
            json.dumps(self.thresholds.model_dump(), sort_keys=True).encode()
        ).hexdigest()[:10]
        return (
            f"steps {list(self.steps)}, step_interval_s {self.step_interval_s:g}, "
            f"interval_s {self.interval_s:g}, failure_limit {self.failure_limit}, "
            f"min_samples_rate {self.thresholds.min_samples_rate}, "
            f"min_samples_latency {self.thresholds.min_samples_latency}, thresholds {digest}"
        )


def _poisson(rng: random.Random, lam: float) -> int:
    """A Poisson count: multiplication of uniforms for small means, PTRS (Hörmann 1993) above."""
    if lam <= 0:
        return 0
    if lam < 10:
        limit, k, product = math.exp(-lam), 0, rng.random()
        while product > limit:
            k += 1
            product *= rng.random()
        return k
    slam, loglam = math.sqrt(lam), math.log(lam)
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
    vr = 0.9277 - 3.6224 / (b - 2)
    while True:
        u = rng.random() - 0.5
        v = rng.random()
        us = 0.5 - abs(u)
        k = math.floor((2 * a / us + b) * u + lam + 0.43)
        if us >= 0.07 and v <= vr:
            return k
        if k < 0 or (us < 0.013 and v > us):
            continue
        if math.log(v) + math.log(inv_alpha) - math.log(a / (us * us) + b) <= (
            -lam + k * loglam - math.lgamma(k + 1)
        ):
            return k


def _binomial(rng: random.Random, n: int, p: float) -> int:
    rand = rng.random
    return sum(1 for _ in range(n) if rand() < p)


@dataclass
class _Arm:
    """One arm's evidence since the step began, and its rule check tally since the epoch began."""

    latency_table: str
    check_pass: float
    requests: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    costs: list[float] = field(default_factory=list)
    passed: int = 0
    checked: int = 0

    def serve(self, rng: random.Random, rate: float, seconds: float, *, checked: bool) -> None:
        n = _poisson(rng, rate * seconds)
        if not n:
            return
        self.requests += n
        self.errors += _binomial(rng, n, ERROR_RATE)
        new = sorted(rng.choices(_table(self.latency_table), k=n))
        self.latencies.extend(new)
        self.latencies.sort()  # two sorted runs: a linear merge
        self.costs.extend(rng.choices(_table("cost"), k=n))
        if checked:
            self.passed += _binomial(rng, n, self.check_pass)
            self.checked += n

    def new_step(self) -> None:
        self.requests, self.errors, self.latencies, self.costs = 0, 0, [], []

    def new_epoch(self) -> None:
        self.passed, self.checked = 0, 0

    def traffic(self) -> ArmWindow:
        return ArmWindow(
            self.requests, self.errors, tuple(self.latencies), costs_usd=tuple(self.costs)
        )

    def rule(self) -> ArmWindow:
        return ArmWindow(0, 0, checks={"rule": (self.passed, self.checked)})


@dataclass(frozen=True)
class Scenario:
    """What one rollout faces."""

    start_step: int = 0
    """Index into the judged steps the canary is on when the simulation starts."""
    rule_change: bool = False
    """The candidate's check pass rate falls 0.98 -> 0.80 during the first look."""
    slow_tail: bool = False
    """The candidate's latency p95 is 50 % higher, median unchanged."""
    horizon_s: float = 4 * 3600.0


@dataclass(frozen=True)
class RunResult:
    """How one simulated rollout ended."""

    promoted_s: float | None
    """From the start to the promotion; None: not promoted."""
    rolled_back_s: float | None
    """From the start (or the rule change) to the rollback; None: not rolled back."""
    first_step_s: float | None
    """From the start to passing the first simulated step; None: it did not pass."""
    first_step_canary: int | None
    """Canary answers of the first simulated step when it passed."""


def simulate(rate: float, settings: Settings, scenario: Scenario, seed: int) -> RunResult:
    """One rollout at `rate` req/s on the virtual clock, with the controller's semantics."""
    rng = random.Random(seed)
    th, steps = settings.thresholds, settings.judged_steps
    sequences = len(settings.steps)
    primary = _Arm("latency", CHECK_PASS)
    candidate = _Arm("slow_tail" if scenario.slow_tail else "latency", CHECK_PASS)
    step = scenario.start_step
    step_started, streak, now = 0.0, 0, 0.0
    origin = 0.0
    first_step_s: float | None = None
    first_step_canary: int | None = None
    if scenario.rule_change:
        origin = rng.uniform(0.0, settings.interval_s)
    while now + settings.interval_s <= scenario.horizon_s:
        weight = steps[step] / 100
        segments = [(settings.interval_s, True)]
        if scenario.rule_change and now == 0.0:
            segments = [(origin, False), (settings.interval_s - origin, True)]
        for seconds, after in segments:
            if scenario.rule_change and after and now == 0.0:
                primary.new_epoch()
                candidate.new_epoch()
                candidate.check_pass = BROKEN_CHECK_PASS
            primary.serve(rng, rate * (1 - weight), seconds, checked=after)
            candidate.serve(rng, rate * weight, seconds, checked=after)
        now += settings.interval_s
        verdicts = judge(
            primary.traffic(), candidate.traffic(), th, sequences=sequences, with_needs=False
        )
        verdicts += judge(
            primary.rule(), candidate.rule(), th, sequences=sequences, with_needs=False
        )
        if any(v.outcome is Outcome.FAIL for v in verdicts):
            streak += 1
            if streak >= settings.failure_limit:
                return RunResult(None, now - origin, first_step_s, first_step_canary)
            continue
        streak = 0
        passed = bool(verdicts) and all(v.outcome is Outcome.PASS for v in verdicts)
        if passed and now - step_started >= settings.step_interval_s:
            if first_step_s is None:
                first_step_s, first_step_canary = now, candidate.requests
            step += 1
            if step == len(steps):
                return RunResult(now, None, first_step_s, first_step_canary)
            step_started = now
            primary.new_step()
            candidate.new_step()
    return RunResult(None, None, first_step_s, first_step_canary)


def _job(args: tuple[float, Settings, Scenario, int]) -> RunResult:
    return simulate(*args)


def _map(fn: Callable[[T], R], jobs: Sequence[T], workers: int) -> list[R]:
    """`fn` over `jobs`, on a pool of `workers` processes (in this process for 1)."""
    if workers <= 1:
        return [fn(job) for job in jobs]
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(fn, jobs, chunksize=1))


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    h = (len(ordered) - 1) * q
    low = math.floor(h)
    if h == low:
        return ordered[low]
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (h - low) * (ordered[high] - ordered[low])


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _times(values: Sequence[float | None], horizon_s: float) -> tuple[str, str, str]:
    """(median, p95, share never) of times, None meaning not within the horizon."""
    done = sorted(v for v in values if v is not None)
    never = len(values) - len(done)
    share = f"{never}/{len(values)}"

    def at(q: float) -> str:
        # None counts as later than every time: a quantile among the never-ending is "never".
        rank = q * (len(values) - 1)
        if math.ceil(rank) >= len(done):
            return f"> {_duration(horizon_s)}"
        return _duration(_quantile(done + [math.inf] * never, q))

    return at(0.5), at(0.95), share


def _seeds(seed: int, tag: int, rate: float, count: int) -> list[int]:
    base = (seed * 1_000 + tag) * 1_000_000 + round(rate * 100) * 10_000
    return [base + i for i in range(count)]


def report(
    settings: Settings,
    rates: Iterable[float],
    runs: int,
    aa_runs: int,
    regression_runs: int,
    workers: int,
    seed: int,
    horizon_s: float,
) -> str:
    """The markdown tables of every scenario at every rate."""
    rates = list(rates)
    steps = settings.judged_steps
    later = [i for i in range(1, len(steps))]
    jobs: list[tuple[float, Settings, Scenario, int]] = []
    keys: list[tuple[str, float]] = []
    plan: list[tuple[str, Scenario, int, int]] = [
        ("good", Scenario(horizon_s=horizon_s), runs, 1),
        ("aa", Scenario(horizon_s=AA_RUN_S), aa_runs, 3),
    ]
    rollback_horizon = min(horizon_s, 3600.0)
    for index in [0, *later]:
        plan.append(
            (
                f"rule@{index}",
                Scenario(start_step=index, rule_change=True, horizon_s=rollback_horizon),
                regression_runs,
                10 + index,
            )
        )
    plan.append(("p95", Scenario(slow_tail=True, horizon_s=rollback_horizon), regression_runs, 2))
    for rate in rates:
        for name, scenario, count, tag in plan:
            for s in _seeds(seed, tag, rate, count):
                jobs.append((rate, settings, scenario, s))
                keys.append((name, rate))
    results: dict[tuple[str, float], list[RunResult]] = {}
    # The costliest jobs first (a look costs in proportion to the evidence, rate x time), so
    # neither worker idles at the end.
    order = sorted(range(len(jobs)), key=lambda i: -jobs[i][0] * jobs[i][2].horizon_s ** 2)
    done = _map(_job, [jobs[i] for i in order], workers)
    for i, outcome in zip(order, done, strict=True):
        results.setdefault(keys[i], []).append(outcome)

    out: list[str] = []
    out.append(f"Settings: {settings.describe()}.")
    out.append("")
    out.append(
        f"Good candidate (identical to the primary): {runs} runs per rate until promoted or "
        f"{_duration(horizon_s)}; A/A: {aa_runs} more runs per rate, each until promoted or "
        "30 min, rolled back (false rollbacks):"
    )
    out.append("")
    out.append(
        "| route rate | promoted, median | p95 | not promoted within "
        f"{_duration(horizon_s)} | first step passed, median | canary answers then, median | "
        f"rolled back within {_duration(horizon_s)} | A/A, 30 min: rolled back |"
    )
    out.append("|---|---|---|---|---|---|---|---|")
    for rate in rates:
        good = results[("good", rate)]
        median, p95, never = _times([r.promoted_s for r in good], horizon_s)
        first, _, _ = _times([r.first_step_s for r in good], horizon_s)
        answers = [r.first_step_canary for r in good if r.first_step_canary is not None]
        answered = f"{statistics.median(answers):.0f}" if answers else "-"
        ever = sum(1 for r in good if r.rolled_back_s is not None)
        aa = results[("aa", rate)]
        false = sum(1 for r in aa if r.rolled_back_s is not None)
        out.append(
            f"| {rate:g}/s | {median} | {p95} | {never} | {first} | {answered} "
            f"| {ever}/{len(good)} ({ever / len(good):.1%}) "
            f"| {false}/{len(aa)} ({false / len(aa):.1%}) |"
        )
    out.append("")
    out.append(
        f"Regressions, {regression_runs} runs per cell: time to rollback, median / p95 "
        f"(never: not within {_duration(rollback_horizon)}):"
    )
    out.append("")
    header = ["route rate"]
    header += [f"rule change at {steps[i]} %" for i in [0, *later]]
    header.append(f"p95 +50 % from the start ({steps[0]} %)")
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "---|" * len(header))
    for rate in rates:
        cells = [f"{rate:g}/s"]
        for name in [*(f"rule@{i}" for i in [0, *later]), "p95"]:
            batch = results[(name, rate)]
            median, p95, never = _times([r.rolled_back_s for r in batch], rollback_horizon)
            cell = f"{median} / {p95}"
            if never != f"0/{len(batch)}":
                cell += f" ({never} never)"
            cells.append(cell)
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def sizing_header(settings: Settings, runs: int, seed: int, horizon_s: float) -> str:
    """The first line of the sizing table: everything it was produced from."""
    return (
        f"Sizing table: {runs} runs per cell, seed {seed}, give up after {_duration(horizon_s)}; "
        f"{settings.describe()}; the first step replaced by the column's weight."
    )


def sizing_table(
    settings: Settings,
    rates: Sequence[float],
    weights: Sequence[int],
    runs: int,
    seed: int,
    horizon_s: float,
    workers: int,
) -> str:
    """Route rate x first-step weight -> median time to pass the first step and to promote."""
    jobs: list[tuple[float, Settings, Scenario, int]] = []
    for rate in rates:
        for weight in weights:
            steps = (weight, *(s for s in settings.steps if s > weight))
            varied = Settings(
                steps,
                settings.step_interval_s,
                settings.interval_s,
                settings.failure_limit,
                settings.thresholds,
            )
            jobs += [
                (rate, varied, Scenario(horizon_s=horizon_s), s)
                for s in _seeds(seed, 100 + weight, rate, runs)
            ]
    done = _map(_job, jobs, workers)
    lines = [sizing_header(settings, runs, seed, horizon_s), ""]
    lines.append("| route rate | " + " | ".join(f"first step {w} %" for w in weights) + " |")
    lines.append("|---|" + "---|" * len(weights))
    for r_index, rate in enumerate(rates):
        cells = [f"{rate:g}/s"]
        for w_index in range(len(weights)):
            start = (r_index * len(weights) + w_index) * runs
            batch = done[start : start + runs]
            first, _, _ = _times([r.first_step_s for r in batch], horizon_s)
            promoted, _, _ = _times([r.promoted_s for r in batch], horizon_s)
            if first.startswith(">"):
                cells.append(f"does not pass within {_duration(horizon_s)}")
            else:
                cells.append(f"{first}; promoted {promoted}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _settings_from(args: argparse.Namespace) -> Settings:
    canary: dict[str, Any] = {}
    analysis: dict[str, Any] = {}
    if args.steps:
        canary["steps"] = [int(s) for s in args.steps.split(",")]
    if args.step_interval_s is not None:
        canary["step_interval_s"] = args.step_interval_s
    if args.interval_s is not None:
        analysis["interval_s"] = args.interval_s
    if args.min_samples is not None:
        analysis["min_samples"] = args.min_samples
    if args.failure_limit is not None:
        analysis["failure_limit"] = args.failure_limit
    thresholds: dict[str, float] = {}
    for item in args.threshold:
        key, _, value = item.partition("=")
        thresholds[key] = float(value)
    if thresholds:
        analysis["thresholds"] = thresholds
    if analysis:
        canary["analysis"] = analysis
    return Settings.from_config(canary)


def command_line() -> argparse.ArgumentParser:
    """The command line (the docs' sizing table carries one)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rates", default=",".join(f"{r:g}" for r in RATES))
    parser.add_argument("--runs", type=int, default=12, help="good-candidate runs per rate")
    parser.add_argument("--aa-runs", type=int, default=40, help="30-min A/A runs per rate")
    parser.add_argument("--regression-runs", type=int, default=12)
    parser.add_argument("--horizon-h", type=float, default=2.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", help="canary.steps, comma-separated")
    parser.add_argument("--step-interval-s", type=float)
    parser.add_argument("--interval-s", type=float)
    parser.add_argument("--min-samples", type=int)
    parser.add_argument("--failure-limit", type=int)
    parser.add_argument(
        "--threshold", action="append", default=[], metavar="KEY=VALUE",
        help="a canary.analysis.thresholds key (repeatable)",
    )  # fmt: skip
    parser.add_argument("--sizing-table", action="store_true")
    parser.add_argument("--sizing-runs", type=int, default=11)
    parser.add_argument("--sizing-weights", default=",".join(str(w) for w in SIZING_WEIGHTS))
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the command line, run, print markdown."""
    args = command_line().parse_args(argv)
    settings = _settings_from(args)
    rates = [float(r) for r in args.rates.split(",")]
    horizon_s = args.horizon_h * 3600
    started = time.perf_counter()
    if args.sizing_table:
        weights = [int(w) for w in args.sizing_weights.split(",")]
        table = sizing_table(
            settings, rates, weights, args.sizing_runs, args.seed, horizon_s, args.workers
        )
        print(table)
        return
    print(
        report(
            settings,
            rates,
            args.runs,
            args.aa_runs,
            args.regression_runs,
            args.workers,
            args.seed,
            horizon_s,
        )
    )
    print()
    print(
        f"Wall time {time.perf_counter() - started:.0f} s, {args.workers} workers, "
        f"seed {args.seed}."
    )


if __name__ == "__main__":
    main()
