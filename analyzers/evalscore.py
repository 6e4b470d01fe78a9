"""Scoring offline runs — replays and evaluation sets (pure: numbers and text in, numbers out).

- `percentile`: latency and time-to-first-token percentiles of a run;
- `rate`: the share of True among flags that apply (agreement, JSON equality, ...);
- `score_answer` / `accuracy`: an evaluation-set answer against its `expect`, and a group of them.

The report's statistics (confidence intervals, tests) live elsewhere; this module only counts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from analyzers.comparison import compare_text


def percentile(values: Sequence[float], q: float) -> float | None:
    """The `q`-th percentile (0 to 100) of `values`, interpolating linearly between the two
    nearest ranks (numpy's default method); None when there are no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be between 0 and 100, not {q}")
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True, slots=True)
class Rate:
    """How many of the cases a flag applies to have it set."""

    hits: int
    total: int

    @property
    def share(self) -> float | None:
        """hits / total; None when no case applies."""
        return self.hits / self.total if self.total else None


def rate(flags: Iterable[bool | None]) -> Rate:
    """Count True among `flags`; None means "does not apply" (e.g. an answer that is not JSON)."""
    hits = total = 0
    for flag in flags:
        if flag is None:
            continue
        total += 1
        hits += flag
    return Rate(hits, total)


@dataclass(frozen=True, slots=True)
class AnswerScore:
    """One answer compared with the expected answer of an evaluation item."""

    exact: bool
    """The answer is exactly `expect`."""
    normalized: bool
    """Equal after `analyzers.comparison.normalize` (case, Unicode, spaces, edge punctuation)."""
    json_equal: bool | None
    """Both parse as JSON and are equal; None when either is not JSON."""


def score_answer(answer: str, expect: str) -> AnswerScore:
    """Score `answer` against `expect`."""
    comparison = compare_text(expect, answer)
    return AnswerScore(comparison.exact, comparison.normalized, comparison.json_equal)


@dataclass(frozen=True, slots=True)
class Accuracy:
    """Evaluation results of a group of items. An item that got no answer counts as wrong."""

    items: int
    exact: int
    normalized: int
    unanswered: int
    """Items whose call failed (error, timeout, broken stream): no answer to score."""


def accuracy(scores: Iterable[AnswerScore | None]) -> Accuracy:
    """Sum up the scores of a group of items; None stands for an item that got no answer."""
    items = exact = normalized = unanswered = 0
    for score in scores:
        items += 1
        if score is None:
            unanswered += 1
            continue
        exact += score.exact
        normalized += score.normalized
    return Accuracy(items, exact, normalized, unanswered)
