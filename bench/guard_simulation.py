"""Simulate the production model's guard after a rule change: A/A false switches, and the time from
the rule change to the switch for a stubborn primary (no I/O: the pure verdict of
`analyzers.rule_guard`, called look after look with accumulating tallies).

Assumptions (the tour's route in README.md and today's defaults): every live request is answered
by the primary; a shadow (`sample` 0.25 by default) answers that share of them too; rule-flip
probes (`rules.NAME.probes.sample`, 0.05 by default) spawn one probe per other target (the shadow
and one more candidate) on that share; the guard looks every `interval_s` (5 s by default) with
`min_samples` 30 and the canary judge's default thresholds. The previous version's evidence is
already there (`previous` answers of the primary at its old failure rate).

    .venv/bin/python bench/guard_simulation.py                 # the README's table
    .venv/bin/python bench/guard_simulation.py --runs 200      # quicker
"""

from __future__ import annotations

import argparse
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from analyzers.rule_guard import (
    GuardEvidence,
    GuardOutcome,
    choose_candidate,
    guard_verdict,
)


@dataclass(frozen=True, slots=True)
class Scenario:
    primary_fail: float
    """The primary's failure rate on the new version."""
    previous_fail: float
    """Its failure rate on the previous version."""
    shadow_fail: float
    """The shadow candidate's failure rate on the new version (probes alike)."""
    other_fail: float
    """The second candidate's (probed only)."""


@dataclass(frozen=True, slots=True)
class Settings:
    rate: float = 20.0
    shadow_share: float = 0.25
    probe_share: float = 0.05
    interval_s: float = 5.0
    min_samples: int = 30
    previous: int = 500
    horizon_s: float = 900.0


def _binomial(rng: random.Random, n: int, p: float) -> int:
    return sum(rng.random() < p for _ in range(n))


def _poisson(rng: random.Random, lam: float) -> int:
    # Knuth's method is fine for the means of one look (at most a few hundred).
    if lam > 50:
        return max(0, round(rng.gauss(lam, lam**0.5)))
    limit, k, p = pow(2.718281828459045, -lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def run(scenario: Scenario, settings: Settings, seed: int) -> tuple[str, float | None]:
    """One rule change: ('switched' | 'alerted' | 'none', seconds until it happened)."""
    rng = random.Random(seed)
    s = settings
    previous = (_binomial(rng, s.previous, scenario.previous_fail), s.previous)
    primary = [0, 0]
    shadow = [0, 0]
    other = [0, 0]
    t = 0.0
    while t < s.horizon_s:
        t += s.interval_s
        n = _poisson(rng, s.rate * s.interval_s)
        primary[1] += n
        primary[0] += _binomial(rng, n, scenario.primary_fail)
        shadowed = _binomial(rng, n, s.shadow_share)
        probed = _binomial(rng, n, s.probe_share)
        shadow[1] += shadowed + probed
        shadow[0] += _binomial(rng, shadowed + probed, scenario.shadow_fail)
        other[1] += probed
        other[0] += _binomial(rng, probed, scenario.other_fail)
        others = (shadow[0] + other[0], shadow[1] + other[1])
        verdict = guard_verdict(
            GuardEvidence((primary[0], primary[1]), previous, others), min_samples=s.min_samples
        )
        if verdict.outcome is not GuardOutcome.REGRESSED:
            continue
        chosen, _, _ = choose_candidate(
            (primary[0], primary[1]),
            {
                "shadow": (shadow[1] - shadow[0], shadow[1]),
                "other": (other[1] - other[0], other[1]),
            },
            min_samples=s.min_samples,
        )
        if chosen is not None:
            return "switched", t
        # Alerted; later looks of the same version may still switch.
        while t < s.horizon_s:
            t += s.interval_s
            n = _poisson(rng, s.rate * s.interval_s)
            primary[1] += n
            primary[0] += _binomial(rng, n, scenario.primary_fail)
            probed = _binomial(rng, n, s.probe_share)
            shadowed = _binomial(rng, n, s.shadow_share)
            shadow[1] += shadowed + probed
            shadow[0] += _binomial(rng, shadowed + probed, scenario.shadow_fail)
            other[1] += probed
            other[0] += _binomial(rng, probed, scenario.other_fail)
            chosen, _, _ = choose_candidate(
                (primary[0], primary[1]),
                {
                    "shadow": (shadow[1] - shadow[0], shadow[1]),
                    "other": (other[1] - other[0], other[1]),
                },
                min_samples=s.min_samples,
            )
            if chosen is not None:
                return "switched", t
        return "alerted", None
    return "none", None


AA = Scenario(0.05, 0.05, 0.05, 0.05)
"""Every model is the same: 5 % of answers fail the rule's checks, before and after."""
STUBBORN = Scenario(0.95, 0.02, 0.02, 0.05)
"""The primary memorised the old rule; the shadow and the other candidate follow the new one."""


def summary(scenario: Scenario, settings: Settings, runs: int, seed: int) -> dict[str, float]:
    outcomes = [run(scenario, settings, seed * 1_000_003 + i) for i in range(runs)]
    times = [t for o, t in outcomes if o == "switched" and t is not None]
    return {
        "runs": runs,
        "switched": sum(o == "switched" for o, _ in outcomes) / runs,
        "alerted_only": sum(o == "alerted" for o, _ in outcomes) / runs,
        "median_s": statistics.median(times) if times else float("nan"),
        "p95_s": sorted(times)[int(0.95 * (len(times) - 1))] if times else float("nan"),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args(argv)
    print("| scenario | req/s | runs | switched | alerted only | median to switch | p95 |")
    print("|---|---|---|---|---|---|---|")
    for name, scenario, rate, runs in (
        ("A/A", AA, 20.0, args.runs),
        ("A/A", AA, 2.0, args.runs),
        ("stubborn primary", STUBBORN, 20.0, max(1, args.runs // 5)),
        ("stubborn primary", STUBBORN, 2.0, max(1, args.runs // 5)),
    ):
        r = summary(scenario, Settings(rate=rate), runs, args.seed)
        print(
            f"| {name} | {rate:g} | {runs} | {r['switched']:.1%} | {r['alerted_only']:.1%} | "
            f"{r['median_s']:.0f} s | {r['p95_s']:.0f} s |"
        )


if __name__ == "__main__":
    main()
