"""Pure scoring of offline runs: percentiles, rates, answers against expectations."""

from __future__ import annotations

import statistics

import pytest

from analyzers.evalscore import Accuracy, AnswerScore, accuracy, percentile, rate, score_answer


def test_percentile_interpolates_between_ranks_like_the_inclusive_method() -> None:
    values = [0.9, 0.1, 0.5, 0.3, 0.7, 0.2, 0.4]
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    for q in (5, 25, 50, 90, 95, 99):
        assert percentile(values, q) == pytest.approx(cuts[q - 1])
    assert percentile(values, 0) == 0.1 and percentile(values, 100) == 0.9


def test_percentile_of_one_or_no_value() -> None:
    assert percentile([3.0], 95) == 3.0
    assert percentile([], 50) is None
    with pytest.raises(ValueError, match="between 0 and 100"):
        percentile([1.0], 101)


def test_rate_counts_only_the_flags_that_apply() -> None:
    counted = rate([True, None, False, True, None])
    assert (counted.hits, counted.total) == (2, 3)
    assert counted.share == pytest.approx(2 / 3)
    assert rate([None]).share is None


@pytest.mark.parametrize(
    ("answer", "expect", "score"),
    [
        ('{"max_weight": 150}', '{"max_weight": 150}', AnswerScore(True, True, True)),
        ('{"max_weight":150}', '{"max_weight": 150}', AnswerScore(False, False, True)),
        ("  Paris. ", "paris", AnswerScore(False, True, None)),
        ('{"max_weight": 100}', '{"max_weight": 150}', AnswerScore(False, False, False)),
        ("", "anything", AnswerScore(False, False, None)),
    ],
)
def test_score_answer(answer: str, expect: str, score: AnswerScore) -> None:
    assert score_answer(answer, expect) == score


def test_accuracy_counts_unanswered_items_as_wrong() -> None:
    scores = [AnswerScore(True, True, None), AnswerScore(False, True, None), None, None]
    result = accuracy(scores)
    assert (result.items, result.exact, result.normalized, result.unanswered) == (4, 1, 2, 2)
    assert accuracy([]) == Accuracy(items=0, exact=0, normalized=0, unanswered=0)
