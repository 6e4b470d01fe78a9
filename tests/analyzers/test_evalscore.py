"""Pure scoring of offline runs: percentiles, rates, answers against expectations."""

from __future__ import annotations

import statistics

import pytest

from analyzers.checkbase import CheckResult
from analyzers.evalscore import (
    Accuracy,
    AnswerScore,
    accuracy,
    json_equal,
    percentile,
    rate,
    score_answer,
    score_checks,
    score_json,
)


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
        ('{"max_weight": 150}', '{"max_weight": 150}', AnswerScore(True, True, True, correct=True)),
        (
            '{"max_weight":150}',
            '{"max_weight": 150}',
            AnswerScore(False, False, True, correct=False),
        ),
        ("  Paris. ", "paris", AnswerScore(False, True, None, correct=True)),
        (
            '{"max_weight": 100}',
            '{"max_weight": 150}',
            AnswerScore(False, False, False, correct=False),
        ),
        ("", "anything", AnswerScore(False, False, None, correct=False)),
    ],
)
def test_score_answer(answer: str, expect: str, score: AnswerScore) -> None:
    assert score_answer(answer, expect) == score


def test_accuracy_counts_unanswered_items_as_wrong() -> None:
    scores = [AnswerScore(True, True, None), AnswerScore(False, True, None), None, None]
    result = accuracy(scores)
    assert (result.items, result.exact, result.normalized, result.unanswered) == (4, 1, 2, 2)
    assert accuracy([]) == Accuracy(items=0, exact=0, normalized=0, unanswered=0)


@pytest.mark.parametrize(
    ("answer", "expected", "correct"),
    [
        ('{"b": [1, 2], "a": 150}', {"a": 150, "b": [1, 2]}, True),  # key order
        ('\n  {"a":150.0 ,"b":[1,2]}  \n', {"a": 150, "b": [1, 2]}, True),  # spaces, 150.0
        ('{"a": 150, "b": [2, 1]}', {"a": 150, "b": [1, 2]}, False),  # arrays keep order
        ('{"a": true}', {"a": 1}, False),  # a boolean is not a number
        ('{"a": 150, "c": null}', {"a": 150}, False),  # an extra key
        ("150", 150, True),
        ('Sure! {"a": 150}', {"a": 150}, False),  # prose around it is not JSON
    ],
)
def test_score_json_is_json_equality(answer: str, expected: object, correct: bool) -> None:
    score = score_json(answer, expected)
    assert (score.method, score.correct) == ("json", correct)


def test_json_equal_compares_nested_values_as_json() -> None:
    assert json_equal({"x": [{"y": 1.0}]}, {"x": [{"y": 1}]})
    assert not json_equal({"x": [False]}, {"x": [0]})
    assert not json_equal("1", 1)


def test_score_checks_is_correct_only_when_every_check_passes() -> None:
    passed = CheckResult("a", "pass", "")
    assert score_checks("x", "", [passed, CheckResult("b", "pass", "")]).correct is True
    assert score_checks("x", "", [passed, CheckResult("b", "fail", "no")]).correct is False
    assert score_checks("x", "", [passed, CheckResult("b", "error", "crash")]).correct is False
    assert score_checks("x", "", []).correct is False  # nothing verified is not a pass
    result = accuracy([score_checks("x", "", [passed]), score_json("1", 2), None])
    assert (result.items, result.correct, result.unanswered) == (3, 1, 1)


def test_an_unjudged_judge_item_is_left_out_of_what_correct_is_counted_of() -> None:
    unjudged = AnswerScore(False, False, None, method="judge")
    judged = AnswerScore(False, False, None, method="judge", correct=True, score=0.9)
    result = accuracy([unjudged, judged, AnswerScore(False, False, None, correct=False), None])
    assert (result.items, result.correct, result.unjudged, result.decided) == (4, 1, 1, 3)
    assert result.unanswered == 1  # a failed call stays wrong, not unjudged


def test_score_json_of_a_hostile_answer_is_wrong_not_a_crash() -> None:
    deep = "[" * 200_000 + "]" * 200_000
    assert score_json(deep, [1]).correct is False
    nested = "[" * 900 + "]" * 900  # parses, and recursing into it may not fit the stack
    assert score_json(nested, [1]).correct is False
    assert score_json("1e999999", 1).correct is False  # inf is not 1
