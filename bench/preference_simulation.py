"""`human_preference` in an experiment's decision on simulated blind reviews with a known truth
(no I/O, no clock: the pure `analyzers.experiments.decide`, looked at as reviews accumulate).

    .venv/bin/python bench/preference_simulation.py                 # the README's table
    .venv/bin/python bench/preference_simulation.py --runs 100      # quicker

Each review scores the arm's answer against control's: 1 (the arm's preferred) with probability
share - ties/2, 0.5 (a tie) with probability `--ties` (0.2), 0 otherwise, so the true preference
share is `share`. The arms hold `UNITS` identical operations each (enough units: only the reviews
decide), and the decision is looked at after every `--step` (5) new reviews, from the first to
`--reviews` (1,000).

- **Coverage at every look**: share 0.60 (+10 points over one half), the share of runs whose
  interval held the true lift at every look from 30 reviews on.
- **A/A**: share 0.50 as the primary metric (ever `ship` or `worse`) and as a guardrail under
  a completion primary (ever `stopped`).
- **Time to a decision**: share 0.65, the reviews until the first `ship`, and the hours that
  takes at 2 and at 200 requests/s, half of them served by control and every one shadowed by the
  arm's model, with one reviewer scoring a pair a minute: reviews come at the reviewers' pace,
  not the traffic's, as soon as there are pairs to score (at 2 req/s there is a new pair every
  second), so the decision takes as long at 2 req/s as at 200.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analyzers.experiments import MIN_UNITS, Unit, Verdict, decide

COMMAND = ".venv/bin/python bench/preference_simulation.py"
ALPHA = 0.05
MDE = 0.05
UNITS = 60
REVIEWS_PER_HOUR = 60.0
"""One reviewer scoring a pair a minute."""
CONTROL_SHARE = 0.5
RATES = {"2 req/s": 2.0, "200 req/s": 200.0}


def units(arm: str) -> list[Unit]:
    return [
        Unit(arm, 1, 1, 0, 0.01, completed=i % 2, outcomes=1, latencies_s=(1.0,))
        for i in range(UNITS)
    ]


UNITS_BY_ARM = {"control": units("control"), "b": units("b")}


def score(rng: random.Random, share: float, ties: float) -> float:
    u = rng.random()
    if u < share - ties / 2:
        return 1.0
    if u < share + ties / 2:
        return 0.5
    return 0.0


@dataclass(frozen=True, slots=True)
class Run:
    covered: bool
    """The interval held the true lift at every look with one."""
    verdicts: frozenset[Verdict]
    """Every verdict the arm was given."""
    first_ship: int | None
    """Reviews at the first `ship` (None: never)."""


def run(
    seed: str, share: float, ties: float, reviews: int, step: int, *, guardrail: bool = False
) -> Run:
    rng = random.Random(seed)
    scores: list[float] = []
    covered, verdicts, first_ship = True, set[Verdict](), None
    truth = share - 0.5
    while len(scores) < reviews:
        scores.extend(score(rng, share, ties) for _ in range(step))
        primary, guardrails = (
            ("completion_rate", ["human_preference"]) if guardrail else ("human_preference", [])
        )
        decision = decide(
            primary, guardrails, "control", UNITS_BY_ARM, mde=MDE, rate_per_s=None,
            alpha=ALPHA, preferences={"b": scores},
        ).arm("b")  # fmt: skip
        x = decision.lift("human_preference")
        assert x is not None
        if x.low is not None and x.high is not None and not x.low <= truth <= x.high:
            covered = False
        verdicts.add(decision.verdict)
        if decision.verdict is Verdict.SHIP and first_ship is None:
            first_ship = len(scores)
    return Run(covered, frozenset(verdicts), first_ship)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--reviews", type=int, default=1000)
    parser.add_argument("--step", type=int, default=5)
    parser.add_argument("--ties", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    n, r, s, t = args.runs, args.reviews, args.step, args.ties

    def runs(share: float, **kw: bool) -> list[Run]:
        return [run(f"{args.seed}:{share}:{kw}:{i}", share, t, r, s, **kw) for i in range(n)]

    coverage = runs(0.60)
    aa = runs(0.50)
    aa_guard = runs(0.50, guardrail=True)
    real = runs(0.65)
    ships = [x.first_ship for x in real if x.first_ship is not None]
    median = statistics.median(ships) if ships else None
    print(f"`{COMMAND} --runs {n} --reviews {r} --step {s} --ties {t} --seed {args.seed}`")
    print()
    print("| question | result |")
    print("|---|---|")
    held = sum(x.covered for x in coverage) / n
    print(f"| coverage at every look (share 0.60, from {MIN_UNITS} reviews) | {held:.1%} |")
    winners = sum(bool(x.verdicts & {Verdict.SHIP, Verdict.WORSE}) for x in aa) / n
    print(f"| A/A, primary: ever ship or worse | {winners:.1%} |")
    stops = sum(Verdict.STOPPED in x.verdicts for x in aa_guard) / n
    print(f"| A/A, guardrail: ever stopped | {stops:.1%} |")
    print(f"| share 0.65: runs that shipped within {r} reviews | {len(ships) / n:.1%} |")
    if median is not None:
        print(f"| share 0.65: median reviews to ship | {median:.0f} |")
        for name, rate in RATES.items():
            pairs_per_hour = rate * CONTROL_SHARE * 3600
            per_hour = min(REVIEWS_PER_HOUR, pairs_per_hour)
            print(
                f"| share 0.65 at {name}: median time to ship (one reviewer, a pair a minute; "
                f"{pairs_per_hour:,.0f} pairs/h) | {median / per_hour:.1f} h |"
            )


if __name__ == "__main__":
    main()
