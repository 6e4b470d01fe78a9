"""Scoring offline runs — replays and evaluation sets (pure: numbers and text in, numbers out).

- `percentile`: latency and time-to-first-token percentiles of a run;
- `rate`: the share of True among flags that apply (agreement, JSON equality, ...);
- `score_answer` / `accuracy`: an evaluation-set answer against its `expect`, and a group of them.
  An item is scored one of three ways (`ScoreMethod`): `text` (exact and normalised, the
  default), `json` (JSON equality with the expected value: key order, whitespace and number
  spelling ignored, `true` never equal to `1`) or `checks` (every rule check the caller ran on
  the answer passed; the caller runs them, this module only counts).

The report's statistics (confidence intervals, tests) live elsewhere; this module only counts.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from analyzers.checkbase import CheckResult
from analyzers.comparison import compare_text

ScoreMethod = Literal["text", "json", "checks", "judge"]
SCORE_METHODS: tuple[ScoreMethod, ...] = ("text", "json", "checks", "judge")


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
    method: ScoreMethod = "text"
    """How the item is scored; `correct` says what that method decided."""
    correct: bool | None = None
    """`text`: equal after normalisation; `json`: JSON-equal to the expected value; `checks`:
    every check passed (an `error` is not a pass). None only for answers built by hand."""
    checks: tuple[CheckResult, ...] = ()
    """The rule checks' results (`checks` items, and any item naming a governed route)."""
    score: float | None = None
    """0..1: the share of the expected JSON's fields the answer got right (`json`), else 1.0
    for a correct answer and 0.0 for a wrong one; None when not scored (a `judge` item that
    no judge saw)."""

    @property
    def value(self) -> float | None:
        """`score`, or 1/0 from `correct`."""
        if self.score is not None:
            return self.score
        return None if self.correct is None else float(self.correct)


def score_answer(answer: str, expect: str) -> AnswerScore:
    """Score `answer` against `expect` as text."""
    comparison = compare_text(expect, answer)
    return AnswerScore(
        comparison.exact,
        comparison.normalized,
        comparison.json_equal,
        method="text",
        correct=comparison.normalized,
    )


_NOT_JSON = object()


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # not JSON, a number too large, nested too deeply
        return _NOT_JSON


def json_equal(a: Any, b: Any) -> bool:
    """JSON values equal as JSON means them: objects by key (any order), arrays in order,
    numbers by value (`150` equals `150.0`), and a boolean never equal to a number."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def score_json(answer: str, expected: Any) -> AnswerScore:
    """Score `answer` against the JSON value `expected`: correct when the answer, with
    surrounding whitespace removed, parses as JSON equal to it."""
    text = json.dumps(expected, ensure_ascii=False)
    comparison = compare_text(text, answer)
    value = _parsed(answer.strip())
    try:
        equal = value is not _NOT_JSON and json_equal(value, expected)
    except RecursionError:  # as deep as the parser allows, and deeper than `expected` can be
        equal = False
    return AnswerScore(
        comparison.exact,
        comparison.normalized,
        equal if value is not _NOT_JSON else None,
        method="json",
        correct=equal,
        score=1.0 if equal else field_share(value, expected),
    )


def field_share(answer: Any, expected: Any) -> float:
    """The share of `expected`'s top-level fields that `answer` has with an equal value (0 when
    either is not an object)."""
    if not isinstance(expected, dict) or not isinstance(answer, dict) or not expected:
        return 0.0
    try:
        same = sum(k in answer and json_equal(answer[k], v) for k, v in expected.items())
    except RecursionError:
        return 0.0
    return same / len(expected)


def with_checks(score: AnswerScore, results: Sequence[CheckResult]) -> AnswerScore:
    """`score` with the rule checks run on the same answer: still correct only when every
    check passed too (a failed check costs the whole case, as it does in live traffic)."""
    if not results:
        return score
    passed = all(result.result == "pass" for result in results)
    correct = bool(score.correct) and passed
    value = score.value if passed else 0.0
    return dataclasses.replace(score, correct=correct, checks=tuple(results), score=value)


def unjudged(answer: str) -> AnswerScore:
    """A `judge` item's answer with no judge verdict: neither right nor wrong."""
    comparison = compare_text("", answer)
    return AnswerScore(
        comparison.exact, comparison.normalized, comparison.json_equal, method="judge"
    )


def judged(answer: str, score: float, pass_score: float) -> AnswerScore:
    """A `judge` item's answer scored `score` (0..1) by the judge; correct from `pass_score`."""
    comparison = compare_text("", answer)
    return AnswerScore(
        comparison.exact,
        comparison.normalized,
        comparison.json_equal,
        method="judge",
        correct=score >= pass_score,
        score=score,
    )


def score_checks(answer: str, expect: str, results: Sequence[CheckResult]) -> AnswerScore:
    """Score an answer by the rule checks run on it: correct when there is at least one result
    and every one is `pass`. The text comparison with `expect` (which may be empty) is kept."""
    comparison = compare_text(expect, answer)
    correct = bool(results) and all(result.result == "pass" for result in results)
    return AnswerScore(
        comparison.exact,
        comparison.normalized,
        comparison.json_equal,
        method="checks",
        correct=correct,
        checks=tuple(results),
    )


@dataclass(frozen=True, slots=True)
class Accuracy:
    """Evaluation results of a group of items. An item that got no answer counts as wrong."""

    items: int
    exact: int
    normalized: int
    unanswered: int
    """Items whose call failed (error, timeout, broken stream): no answer to score."""
    correct: int = 0
    """Items the item's own method (`AnswerScore.correct`) found correct."""
    unjudged: int = 0
    """`judge` items answered but not judged (no judge configured, or its call failed): neither
    right nor wrong, so `correct` is out of `items - unjudged`."""

    @property
    def decided(self) -> int:
        """Items whose correctness was decided: what `correct` is counted out of."""
        return self.items - self.unjudged


def accuracy(scores: Iterable[AnswerScore | None]) -> Accuracy:
    """Sum up the scores of a group of items; None stands for an item that got no answer."""
    items = exact = normalized = unanswered = correct = unjudged = 0
    for score in scores:
        items += 1
        if score is None:
            unanswered += 1
            continue
        exact += score.exact
        normalized += score.normalized
        if score.method == "judge" and score.correct is None:
            unjudged += 1
        correct += bool(score.correct)
    return Accuracy(items, exact, normalized, unanswered, correct, unjudged)
