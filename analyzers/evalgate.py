"""The offline gate's decision (pure): may a candidate's canary start, given its newest
evaluation run and the primary's run on the same cases?

Refused when there is no run, when the run is older than `max_age_s`, when the primary did not
run beside it (no baseline on the same cases), or when on any stratum with at least `min_cases`
cases in both runs the candidate's pass rate is more than `max_drop` below the primary's.
Strata with fewer cases are reported and never block: at 10 cases one answer is 10 points,
noise rather than evidence. Every line of the verdict carries its numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StratumResult:
    """Cases and passes of one stratum of one model's run."""

    cases: int
    passed: int

    @property
    def rate(self) -> float | None:
        return self.passed / self.cases if self.cases else None


@dataclass(frozen=True, slots=True)
class StratumComparison:
    stratum: str
    candidate: StratumResult
    primary: StratumResult
    drop: float | None
    """primary's pass rate minus the candidate's (positive: the candidate is worse)."""
    blocking: bool
    counted: bool
    """Enough cases on both sides to count."""


@dataclass(frozen=True, slots=True)
class GateVerdict:
    allowed: bool
    reason: str
    """One line: why, with the numbers."""
    strata: tuple[StratumComparison, ...] = ()


def decide(
    candidate: Mapping[str, StratumResult] | None,
    primary: Mapping[str, StratumResult] | None,
    *,
    age_s: float | None,
    max_age_s: float,
    max_drop: float,
    min_cases: int,
    candidate_name: str,
    set_name: str,
) -> GateVerdict:
    """The verdict; `candidate`/`primary` are None when there is no such run."""
    if candidate is None or age_s is None:
        return GateVerdict(
            False,
            f"no evaluation run of {candidate_name} on set {set_name}: run "
            f"`mirrorgate replay --candidate {candidate_name} --eval-set <the set>` first",
        )
    if age_s > max_age_s:
        return GateVerdict(
            False,
            f"the newest run of {candidate_name} on set {set_name} is {_age(age_s)} old; "
            f"require_eval.max_age is {_age(max_age_s)}",
        )
    if primary is None:
        return GateVerdict(
            False,
            f"the newest run of {candidate_name} on set {set_name} has no run of the primary "
            "beside it (the set names no route, or the primary's calls failed)",
        )
    compared: list[StratumComparison] = []
    for stratum in sorted(candidate, key=lambda s: (s != "all", s)):
        mine = candidate[stratum]
        theirs = primary.get(stratum)
        if theirs is None:
            continue
        counted = mine.cases >= min_cases and theirs.cases >= min_cases
        drop = None
        if mine.rate is not None and theirs.rate is not None:
            drop = theirs.rate - mine.rate
        blocking = counted and drop is not None and drop > max_drop + 1e-12
        compared.append(StratumComparison(stratum, mine, theirs, drop, blocking, counted))
    worst = [c for c in compared if c.blocking]
    if worst:
        listed = "; ".join(
            f"{c.stratum}: {_rate(c.candidate)} vs primary {_rate(c.primary)} "
            f"(-{(c.drop or 0) * 100:.1f} points)"
            for c in sorted(worst, key=lambda c: -(c.drop or 0))
        )
        return GateVerdict(
            False,
            f"{candidate_name} regresses on set {set_name} beyond max_drop "
            f"{max_drop * 100:.1f} points: {listed}",
            tuple(compared),
        )
    overall = next((c for c in compared if c.stratum == "all"), None)
    summary = (
        f"{_rate(overall.candidate)} vs primary {_rate(overall.primary)}"
        if overall is not None
        else "no common strata"
    )
    return GateVerdict(
        True,
        f"{candidate_name} passes set {set_name} within max_drop {max_drop * 100:.1f} points "
        f"on every stratum of at least {min_cases} cases ({summary}, run {_age(age_s)} ago)",
        tuple(compared),
    )


def _rate(result: StratumResult) -> str:
    rate = result.rate
    return f"{result.passed}/{result.cases}" + (f" {rate:.1%}" if rate is not None else "")


def _age(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:.1f}d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 60:.0f}m"
