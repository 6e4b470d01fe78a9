"""How fast and how rightly the statistical judge rolls back, on simulated traffic with a virtual
clock (no sleeping), compared with Flagger-like semantics on the same traffic.

    .venv/bin/python bench/judge_simulation.py [--runs-a 200] [--runs-b 50] [--aa-runs 50]
                                               [--workers 2] [--seed 1]

Traffic: 20 requests/s per arm, one analysis every 10 s. Latency lognormal (median 0.8 s,
sigma 0.5, so p95 1.82 s), errors 2%, a rule check passing 98%, cost per request lognormal
(median $0.002, sigma 0.4). Samples are drawn from a 2^18-point inverse-CDF table of each
distribution (recorded latencies have finite resolution anyway, and it is 10x faster than
`random.lognormvariate`). No streaming, corrections or noise pairs: TTFT, correction and
agreement verdicts are not exercised here.

Windows: the rollout-level call (error rate, latency, cost) sees the last 60 s of both arms;
the rule check is judged in its own call on its rule epoch (counts since the epoch started,
its own look count), as docs/rollouts.md describes the judge.

The defaults keep the run under 2 minutes on 2 cores (about 100 s): 200 runs of (a), 50 of (b)
and 50 A/A rollouts. The 1,000 A/A rollouts of the target take `--aa-runs 1000` (about 14 min).

Scenarios: (a) at t = 60 s a rule change drops the candidate's check pass rate 0.98 -> 0.80:
time from the change to the rollback; (b) the candidate's latency sigma grows to 0.7465
(p95 +50%, median unchanged) from the start: time to the rollback; (c) A/A rollouts of
30 minutes: share rolled back. The judge rolls back after `--failure-limit` (default 2, as
the config) consecutive looks with a failing metric, as the controller does. Flagger-like:
every 60 s, the last 60 s of the candidate against fixed thresholds (error rate <= 3%, check
pass rate >= 93%, p95 <= 1.25 x the healthy p95), no statistics, no data counts as a
failure, rollback after 5 consecutive failed checks.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analyzers.judge_stats import judge
from analyzers.verdicts import ArmWindow, Outcome, Thresholds

RATE_PER_S = 20
INTERVAL_S = 10
PER_LOOK = RATE_PER_S * INTERVAL_S
WINDOW_LOOKS = 6  # 60 s
LATENCY_MEDIAN_S = 0.8
LATENCY_SIGMA = 0.5
SLOW_TAIL_SIGMA = LATENCY_SIGMA + math.log(1.5) / 1.6448536269514722  # p95 x1.5, same median
ERROR_RATE = 0.02
CHECK_PASS = 0.98
BROKEN_CHECK_PASS = 0.80
RULE_CHANGE_S = 60
AA_DURATION_S = 30 * 60
GIVE_UP_S = 900
FAILURE_LIMIT = 2
"""The default of `analysis.failure_limit`."""
FLAGGER_INTERVAL_S = 60
FLAGGER_THRESHOLD = 5
HEALTHY_P95_S = LATENCY_MEDIAN_S * math.exp(1.6448536269514722 * LATENCY_SIGMA)
TABLE_SIZE = 1 << 18


def _lognormal_table(median: float, sigma: float) -> list[float]:
    normal = NormalDist()
    return [
        median * math.exp(sigma * normal.inv_cdf((i + 0.5) / TABLE_SIZE)) for i in range(TABLE_SIZE)
    ]


_TABLES: dict[str, list[float]] = {}


def _table(name: str) -> list[float]:
    if name not in _TABLES:
        _TABLES["latency"] = _lognormal_table(LATENCY_MEDIAN_S, LATENCY_SIGMA)
        _TABLES["slow_tail"] = _lognormal_table(LATENCY_MEDIAN_S, SLOW_TAIL_SIGMA)
        _TABLES["cost"] = _lognormal_table(0.002, 0.4)
    return _TABLES[name]


@dataclass
class _Arm:
    """One arm's last 60 s, one chunk per 10 s look."""

    latency_table: str
    check_pass: float
    chunks: deque[tuple[int, tuple[float, ...], tuple[float, ...], int]]

    def draw(self, rng: random.Random) -> None:
        rand = rng.random
        errors = sum(1 for _ in range(PER_LOOK) if rand() < ERROR_RATE)
        latencies = tuple(sorted(rng.choices(_table(self.latency_table), k=PER_LOOK)))
        costs = tuple(rng.choices(_table("cost"), k=PER_LOOK))
        passed = sum(1 for _ in range(PER_LOOK) if rand() < self.check_pass)
        self.chunks.append((errors, latencies, costs, passed))

    def window(self) -> ArmWindow:
        chunks = list(self.chunks)
        return ArmWindow(
            requests=PER_LOOK * len(chunks),
            errors=sum(c[0] for c in chunks),
            latencies_s=tuple(v for c in chunks for v in c[1]),
            costs_usd=tuple(v for c in chunks for v in c[2]),
        )

    def last_passed(self) -> int:
        return self.chunks[-1][3]


def _new_arm(latency_table: str = "latency") -> _Arm:
    return _Arm(latency_table, CHECK_PASS, deque(maxlen=WINDOW_LOOKS))


def _flagger_fails(candidate: _Arm) -> bool:
    """One Flagger-like check of the last 60 s of the candidate: any metric over its threshold."""
    window = candidate.window()
    if window.requests == 0:
        return True  # no data counts as failure
    passed = sum(c[3] for c in list(candidate.chunks)[-WINDOW_LOOKS:])
    p95 = statistics.quantiles(window.latencies_s, n=20)[-1]
    return (
        window.errors / window.requests > 0.03
        or passed / window.requests < 0.93
        or p95 > 1.25 * HEALTHY_P95_S
    )


@dataclass(frozen=True)
class RunResult:
    judge_fail_s: float | None
    """Seconds from the start (or the rule change in (a)) to the rollback (`failure_limit`
    consecutive failing looks); None: never."""
    judge_false_before_change: bool
    flagger_rollback_s: float | None


def simulate(scenario: str, seed: int, failure_limit: int = FAILURE_LIMIT) -> RunResult:
    """One rollout of `scenario` ("a", "b" or "aa") on the virtual clock. The judge rolls back
    after `failure_limit` consecutive looks with a failing metric, as the controller does."""
    rng = random.Random(seed)
    thresholds = Thresholds()
    primary = _new_arm()
    candidate = _new_arm("slow_tail" if scenario == "b" else "latency")
    duration = AA_DURATION_S if scenario == "aa" else GIVE_UP_S
    origin = RULE_CHANGE_S if scenario == "a" else 0
    epoch_start, epoch_counts = 0, [0, 0, 0]  # primary passed, candidate passed, total each
    judge_fail: float | None = None
    false_before = False
    flagger_fail: float | None = None
    consecutive = 0
    judge_streak = 0
    for look, now in enumerate(range(INTERVAL_S, duration + 1, INTERVAL_S), start=1):
        if scenario == "a" and now - INTERVAL_S == RULE_CHANGE_S:
            # The rule changes: a new epoch; the candidate keeps following the old rule.
            candidate.check_pass = BROKEN_CHECK_PASS
            epoch_start, epoch_counts = now - INTERVAL_S, [0, 0, 0]
        primary.draw(rng)
        candidate.draw(rng)
        epoch_counts[0] += primary.last_passed()
        epoch_counts[1] += candidate.last_passed()
        epoch_counts[2] += PER_LOOK
        epoch_look = (now - epoch_start) // INTERVAL_S
        if judge_fail is None:
            verdicts = judge(primary.window(), candidate.window(), thresholds, look)
            verdicts += judge(
                ArmWindow(0, 0, checks={"rule": (epoch_counts[0], epoch_counts[2])}),
                ArmWindow(0, 0, checks={"rule": (epoch_counts[1], epoch_counts[2])}),
                thresholds,
                epoch_look,
            )
            judge_streak = (
                judge_streak + 1 if any(v.outcome is Outcome.FAIL for v in verdicts) else 0
            )
            if judge_streak >= failure_limit:
                if now - INTERVAL_S < origin:
                    false_before = True
                judge_fail = float(now - origin)
        if now % FLAGGER_INTERVAL_S == 0 and flagger_fail is None:
            consecutive = consecutive + 1 if _flagger_fails(candidate) else 0
            if consecutive >= FLAGGER_THRESHOLD:
                flagger_fail = float(now - origin)
        if judge_fail is not None and flagger_fail is not None:
            break
    return RunResult(judge_fail, false_before, flagger_fail)


def _run(args: tuple[str, int, int]) -> RunResult:
    return simulate(*args)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    h = (len(ordered) - 1) * q
    low = math.floor(h)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (h - low) * (ordered[high] - ordered[low])


def _times(values: list[float | None], q: float) -> str:
    done = [v for v in values if v is not None]
    if len(done) < len(values):
        return f"{len(values) - len(done)}/{len(values)} never"
    return f"{_quantile(done, q):.0f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs-a", type=int, default=200)
    parser.add_argument("--runs-b", type=int, default=50)
    parser.add_argument("--aa-runs", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--failure-limit",
        type=int,
        default=FAILURE_LIMIT,
        help="consecutive failing looks that roll back (the config's analysis.failure_limit)",
    )
    args = parser.parse_args()
    limit = args.failure_limit
    started = time.perf_counter()
    jobs = {
        "a": [("a", args.seed * 1_000_000 + i, limit) for i in range(args.runs_a)],
        "b": [("b", args.seed * 2_000_000 + i, limit) for i in range(args.runs_b)],
        "aa": [("aa", args.seed * 3_000_000 + i, limit) for i in range(args.aa_runs)],
    }
    results: dict[str, list[RunResult]] = {}
    with ProcessPoolExecutor(args.workers) as pool:
        for name, batch in jobs.items():
            results[name] = list(pool.map(_run, batch, chunksize=4))
    a, b, aa = results["a"], results["b"], results["aa"]
    aa_judge = sum(1 for r in aa if r.judge_fail_s is not None)
    aa_flagger = sum(1 for r in aa if r.flagger_rollback_s is not None)
    a_false = sum(1 for r in a if r.judge_false_before_change)
    print("| scenario | runs | target | mirrorgate judge | Flagger-like (60 s, 5 failed checks) |")
    print("|---|---|---|---|---|")
    print(
        f"| (a) rule change, check pass 0.98 -> 0.80: time to rollback, median "
        f"| {len(a)} | <= 30 s | {_times([r.judge_fail_s for r in a], 0.5)} "
        f"| {_times([r.flagger_rollback_s for r in a], 0.5)} |"
    )
    print(
        f"| (a) same, p95 | {len(a)} | <= 60 s | {_times([r.judge_fail_s for r in a], 0.95)} "
        f"| {_times([r.flagger_rollback_s for r in a], 0.95)} |"
    )
    print(
        f"| (b) latency p95 +50%, median unchanged: time to rollback, median | {len(b)} | <= 120 s "
        f"| {_times([r.judge_fail_s for r in b], 0.5)} "
        f"| {_times([r.flagger_rollback_s for r in b], 0.5)} |"
    )
    print(
        f"| (c) A/A, 30 min: rollouts rolled back | {len(aa)} | <= 1% "
        f"| {aa_judge}/{len(aa)} ({aa_judge / len(aa):.1%}) "
        f"| {aa_flagger}/{len(aa)} ({aa_flagger / len(aa):.1%}) |"
    )
    print()
    print(
        f"(a) fails before the rule change (false): {a_false}/{len(a)}. "
        f"Wall time {time.perf_counter() - started:.0f} s, {args.workers} workers, "
        f"seed {args.seed}, failure_limit {limit}."
    )


if __name__ == "__main__":
    main()
