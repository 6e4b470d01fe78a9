"""Numbers as text, the same in the Markdown and the HTML report.

Durations print as `ms` below a second and `s` above, money with three significant digits below a
dollar, rates as a percentage with their 95% interval, differences of rates in percentage points;
`—` (DASH) is "nothing to compute".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from analyzers.adaptation import ScoredRate
from analyzers.summary import Difference, Rate
from proxy.store import EvalRun

if TYPE_CHECKING:
    from .model import ArmReport, Report, RuleChange

DASH = "—"


def format_duration(seconds: float | None, *, signed: bool = False) -> str:
    """`245 ms`, `0.4 ms`, `1.32 s`; with `signed`, a leading + or -."""
    if seconds is None:
        return DASH
    sign = "-" if seconds < 0 else "+" if signed and seconds > 0 else ""
    magnitude = abs(seconds)
    if magnitude >= 1:
        return f"{sign}{magnitude:.2f} s"
    ms = magnitude * 1000
    return f"{sign}{ms:.1f} ms" if ms < 10 else f"{sign}{ms:.0f} ms"


def format_usd(amount: float | None, *, signed: bool = False) -> str:
    """`$1,234`, `$12.34`, `$0.00123` (three significant digits below a dollar)."""
    if amount is None:
        return DASH
    sign = "-" if amount < 0 else "+" if signed and amount > 0 else ""
    magnitude = abs(amount)
    if magnitude == 0:
        return f"{sign}$0"
    if magnitude >= 100:
        return f"{sign}${magnitude:,.0f}"
    if magnitude >= 1:
        return f"{sign}${magnitude:,.2f}"
    decimals = min(10, 2 - math.floor(math.log10(magnitude)))
    return f"{sign}${magnitude:.{decimals}f}"


def format_percent(share: float | None) -> str:
    return DASH if share is None else f"{share * 100:.1f}%"


def format_scored(rate: ScoredRate) -> str:
    """An adaptation or stuck rate as `format_rate` shows a rate; a dash with no probes."""
    if rate.rate is None or rate.low is None or rate.high is None:
        return DASH
    return f"{rate.rate * 100:.1f}% [{rate.low * 100:.1f}, {rate.high * 100:.1f}]"


def format_rate(rate: Rate) -> str:
    """`80.0% [49.0, 94.3]` (value, and the 95% interval in percent); a dash when nothing was
    counted."""
    if rate.value is None:
        return DASH
    return f"{rate.value * 100:.1f}% [{rate.low * 100:.1f}, {rate.high * 100:.1f}]"


def format_difference(diff: Difference | None) -> str:
    """`+12.0 pp [+3.1, +20.5]`: percentage points with the 95% interval."""
    if diff is None or diff.value is None:
        return DASH
    return f"{diff.value * 100:+.1f} pp [{diff.low * 100:+.1f}, {diff.high * 100:+.1f}]"


def format_ratio(value: float | None) -> str:
    return DASH if value is None else f"{value:.2f}x"


def format_time(moment: datetime | None) -> str:
    return DASH if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def format_time_short(moment: datetime) -> str:
    """`12-02 14:05:09Z`: a moment on the rollout timeline."""
    return moment.astimezone(UTC).strftime("%m-%d %H:%M:%SZ")


def describe_window(report: Report) -> str:
    start = format_time(report.since) if report.since else "the first record"
    return f"{start} → {format_time(report.generated_at)}"


def describe_failures(arm: ArmReport) -> str:
    return ", ".join(f"{count} {status}" for status, count in arm.failures)


def format_score(score: float | None) -> str:
    """A mean rating: `4.25`."""
    return DASH if score is None else f"{score:.2f}"


def format_judge_delta(low: float | None, delta: float | None, high: float | None) -> str:
    """`-1.25 [-2.00, -0.50]`: a mean score difference with its 95% interval (points of 1-10)."""
    if delta is None:
        return DASH
    if low is None or high is None:
        return f"{delta:+.2f}"
    return f"{delta:+.2f} [{low:+.2f}, {high:+.2f}]"


def as_sentence(text: str) -> str:
    """`rule change at …` → `Rule change at ….`"""
    return text[:1].upper() + text[1:] + "."


def describe_change(change: RuleChange | None) -> str:
    """`rule change at 2025-03-01 10:00:00 UTC, from v1` (or the first version of the rule)."""
    if change is None:
        return "no rule-change event recorded for this version"
    when = format_time(change.first_seen_at)
    if change.previous_version is None:
        return f"first version of the rule, seen at {when}"
    return f"rule change at {when}, from {change.previous_version}"


def describe_labels(labels: tuple[tuple[str, int], ...], most: int = 3) -> str:
    """`wrong-policy 3, rude 1` (the most frequent few, then `+N more`)."""
    if not labels:
        return DASH
    shown = ", ".join(f"{label} {count}" for label, count in labels[:most])
    return shown + (f", +{len(labels) - most} more" if len(labels) > most else "")


def evaluation_table(runs: Sequence[EvalRun]) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the offline evaluation runs: one row per model and run, oldest first,
    the pass rate of `all` and of each difficulty and task stratum as columns."""
    strata = sorted(
        {s for run in runs for s in run.strata if s != "all"},
        key=lambda s: (0 if s.startswith("difficulty=") else 1, s),
    )
    header = ["started", "set", "model", "role", "config", "all", "mean score", *strata]
    rows = []
    for run in runs:
        mean = run.overall.mean_score
        rows.append(
            [
                format_time(run.started_at), f"{run.set_name} v{run.set_version}", run.model,
                run.role, run.config_fingerprint[:8], _stratum_rate(run, "all"),
                "-" if mean is None else f"{mean:.2f}", *(_stratum_rate(run, s) for s in strata),
            ]
        )  # fmt: skip
    return header, rows


def _stratum_rate(run: EvalRun, name: str) -> str:
    score = run.strata.get(name)
    if score is None or not score.cases:
        return "-"
    return f"{score.passed / score.cases:.0%} ({score.passed}/{score.cases})"
