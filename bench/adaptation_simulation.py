"""The context-awareness score and the `rule_adaptation` gate in simulation, on a virtual clock (no
sleeping): how close 200 probes put the adaptation estimate to the truth, how long the gate takes
to fail a memorising canary at 2 and 200 req/s, and how often it fails an A/A pair.

    .venv/bin/python bench/adaptation_simulation.py [--estimate-runs 10000] [--fail-runs 200]
        [--aa-runs 1000] [--rates 2,200] [--horizon-h 1] [--seed 1] [--uncapped]

Every setting not given is the config's default, read from the config models: the probes'
`sample` (0.05) and `max_per_hour` (200) from `rules.NAME.probes`, the judge's `interval_s`,
`failure_limit` and `steps` (its `sequences`) from `routes.NAME.canary`, and the thresholds
(`rule_adaptation_drop`, `min_samples_probes`, `false_rollback_rate`) from
`canary.analysis.thresholds`.

1. **Estimate**: for staged adaptation p in {0, 0.3, 0.95}, 200 probes each scored followed with
   probability p (`analyzers.adaptation.adaptation_score`): the share of runs whose estimate is
   within ±5 points of p, the 95th percentile of the absolute error, and how often the 95% Wilson
   interval covers p.
2. **Gate**: probes reach each target at min(rate * sample, max_per_hour / 3600) per second
   (Poisson), from the rollout's start; every `interval_s` the controller's `rule_adaptation` look
   judges both arms' tallies so far (`analyzers.judge_stats.judge`, `sequences = len(steps)`);
   `failure_limit` consecutive failing looks roll back. A memoriser (adaptation 0) against a
   follower primary (0.95): time to the rollback. An A/A pair (both 0.95) for `--horizon-h`:
   runs with a rollback (false) and runs with any failing look (a false warning).
   `--uncapped` also runs the gate with no `max_per_hour`, so the rates really differ.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analyzers.adaptation import adaptation_score
from analyzers.judge_stats import judge
from analyzers.verdicts import ArmWindow, Outcome, Thresholds
from proxy.config import ProbesSpec, RouteSpec

STAGED = (0.0, 0.3, 0.95)
PROBES = 200


@dataclass(frozen=True, slots=True)
class Settings:
    sample: float
    max_per_hour: int | None
    interval_s: float
    failure_limit: int
    sequences: int
    thresholds: Thresholds

    @classmethod
    def from_config(cls) -> Settings:
        probes = ProbesSpec.model_validate(
            {
                "parameter": "v=(?P<value>\\d+)",
                "values": [1],
                "expect": [{"name": "x", "type": "json"}],
            }
        )
        route = RouteSpec.model_validate({"primary": "p", "canary": {"model": "c"}})
        assert route.canary is not None
        analysis = route.canary.analysis
        return cls(
            probes.sample,
            probes.max_per_hour,
            analysis.interval_s,
            analysis.failure_limit,
            len(route.canary.steps),
            analysis.thresholds,
        )

    def probes_per_s(self, rate: float) -> float:
        """Probes a target gets per second at `rate` live requests per second of the rule."""
        sampled = rate * self.sample
        if self.max_per_hour is None:
            return sampled
        return min(sampled, self.max_per_hour / 3600)


def _poisson(rng: random.Random, mean: float) -> int:
    if mean > 30:  # the normal approximation, rounded: exact enough for arrival counts
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    limit, k, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        k += 1
        product *= rng.random()
    return k


def _followed(rng: random.Random, n: int, p: float) -> int:
    return sum(rng.random() < p for _ in range(n))


def estimate(runs: int, seed: int) -> list[dict[str, float]]:
    """Per staged p: share within ±5 points, p95 absolute error, Wilson coverage."""
    rows = []
    for p in STAGED:
        rng = random.Random(f"{seed}-estimate-{p}")
        errors, covered = [], 0
        for _ in range(runs):
            followed = _followed(rng, PROBES, p)
            score = adaptation_score(followed, PROBES - followed, 0).adaptation
            assert score.rate is not None and score.low is not None and score.high is not None
            errors.append(abs(score.rate - p))
            covered += score.low <= p <= score.high
        errors.sort()
        rows.append(
            {
                "p": p,
                "within_5": sum(e <= 0.05 + 1e-12 for e in errors) / runs,
                "p95_error": errors[min(runs - 1, math.ceil(0.95 * runs) - 1)],
                "coverage": covered / runs,
            }
        )
    return rows


def gate_run(
    s: Settings, rng: random.Random, per_s: float, p_primary: float, p_candidate: float,
    horizon_s: float,
) -> tuple[float | None, bool]:  # fmt: skip
    """One rollout's `rule_adaptation` looks: (seconds to the rollback or None, any fail)."""
    n_p = n_c = f_p = f_c = 0
    failures, any_fail = 0, False
    outcome: Outcome | None = None
    looks = int(horizon_s / s.interval_s)
    for look in range(1, looks + 1):
        new_p, new_c = _poisson(rng, per_s * s.interval_s), _poisson(rng, per_s * s.interval_s)
        if new_p or new_c or outcome is None:
            n_p, n_c = n_p + new_p, n_c + new_c
            f_p, f_c = (
                f_p + _followed(rng, new_p, p_primary),
                f_c + _followed(rng, new_c, p_candidate),
            )
            verdicts = judge(
                ArmWindow(0, 0, adaptation=(n_p - f_p, n_p)),
                ArmWindow(0, 0, adaptation=(n_c - f_c, n_c)),
                s.thresholds,
                sequences=s.sequences,
                with_needs=False,
            )
            outcome = verdicts[0].outcome if verdicts else Outcome.INCONCLUSIVE
        if outcome is Outcome.FAIL:
            any_fail = True
            failures += 1
            if failures >= s.failure_limit:
                return look * s.interval_s, True
        else:
            failures = 0
    return None, any_fail


def gate(
    s: Settings, rate: float, fail_runs: int, aa_runs: int, horizon_s: float, seed: int
) -> dict[str, float | None]:
    per_s = s.probes_per_s(rate)
    rng = random.Random(f"{seed}-memoriser-{rate}-{per_s}")
    times = []
    for _ in range(fail_runs):
        at, _ = gate_run(s, rng, per_s, 0.95, 0.0, 24 * 3600)
        times.append(at if at is not None else math.inf)
    times.sort()
    rng = random.Random(f"{seed}-aa-{rate}-{per_s}")
    rollbacks = warnings = 0
    for _ in range(aa_runs):
        at, warned = gate_run(s, rng, per_s, 0.95, 0.95, horizon_s)
        rollbacks += at is not None
        warnings += warned
    return {
        "rate": rate,
        "probes_per_s": per_s,
        "fail_median_s": statistics.median(times),
        "fail_p90_s": times[min(len(times) - 1, math.ceil(0.9 * len(times)) - 1)],
        "fail_never": sum(math.isinf(t) for t in times) / len(times),
        "aa_rollbacks": rollbacks / aa_runs,
        "aa_warnings": warnings / aa_runs,
        "aa_runs": aa_runs,
    }


def command_line() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--estimate-runs", type=int, default=10_000)
    parser.add_argument("--fail-runs", type=int, default=200)
    parser.add_argument("--aa-runs", type=int, default=1_000)
    parser.add_argument("--rates", default="2,200")
    parser.add_argument("--horizon-h", type=float, default=1.0, help="each A/A run's length")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--uncapped", action="store_true", help="also without max_per_hour")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = command_line().parse_args(argv)
    started = time.monotonic()
    settings = Settings.from_config()
    print(f"## Estimate after {PROBES} probes ({args.estimate_runs:,} runs per p)\n")
    print("| staged p | within ±5 points | p95 abs error | Wilson 95% coverage |")
    print("|---:|---:|---:|---:|")
    for row in estimate(args.estimate_runs, args.seed):
        print(
            f"| {row['p']:.2f} | {row['within_5']:.1%} | {row['p95_error'] * 100:.1f} pts "
            f"| {row['coverage']:.1%} |"
        )
    variants = [("default max_per_hour", settings)]
    if args.uncapped:
        variants.append(("no max_per_hour", replace(settings, max_per_hour=None)))
    for name, s in variants:
        print(
            f"\n## Gate, sample {s.sample:g}, {name} ({s.max_per_hour or '-'}/h), interval "
            f"{s.interval_s:g} s, failure_limit {s.failure_limit}, min "
            f"{s.thresholds.min_samples_probes} probes ({args.fail_runs} memoriser runs, "
            f"{args.aa_runs:,} A/A runs of {args.horizon_h:g} h)\n"
        )
        print(
            "| req/s | probes/s per target | memoriser rolled back: median | p90 | never "
            "| A/A rollbacks | A/A failing looks |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for rate in (float(r) for r in args.rates.split(",")):
            g = gate(s, rate, args.fail_runs, args.aa_runs, args.horizon_h * 3600, args.seed)
            print(
                f"| {rate:g} | {g['probes_per_s']:.3g} | {g['fail_median_s']:.0f} s "
                f"| {g['fail_p90_s']:.0f} s | {g['fail_never']:.1%} | {g['aa_rollbacks']:.2%} "
                f"| {g['aa_warnings']:.2%} |"
            )
    print(f"\n({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
