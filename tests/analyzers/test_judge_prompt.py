"""What the LLM judge is asked and how its answer is read: the request's text, the case's rubric
appended, one call's body per wire format, scores only in 1..10, and both orders averaged."""

from __future__ import annotations

import pytest

from analyzers.judge_prompt import (
    DEFAULT_RUBRIC,
    MAX_TEXT,
    average_orders,
    judge_request,
    parse_scores,
    request_text,
    with_case_rubric,
)


def test_the_request_is_its_last_six_messages_or_its_input() -> None:
    messages = [{"role": "user", "content": f"m{i}"} for i in range(8)]
    assert request_text({"messages": messages}) == "\n".join(f"user: m{i}" for i in range(2, 8))
    assert request_text({"messages": [{"role": "user", "content": ["parts"]}, "junk"]}) == ""
    assert request_text({"input": "x" * (MAX_TEXT + 5)}) == "x" * MAX_TEXT
    assert request_text({}) == ""


@pytest.mark.parametrize(
    ("text", "scores"),
    [
        ('{"score_a": 8, "score_b": 5}', (8.0, 5.0)),
        ('Sure. {"score_a": "7", "score_b": 10, "reason": "x"} done', (7.0, 10.0)),
        ('{"score_a": 0, "score_b": 5}', None),
        ('{"score_a": 11, "score_b": 5}', None),
        ('{"score_a": 8}', None),
        ("{not json}", None),
        ("no scores", None),
        ('{"score_a": [1], "score_b": 2}', None),
    ],
)
def test_only_two_scores_in_1_to_10_are_read(text: str, scores: tuple[float, float] | None) -> None:
    assert parse_scores(text) == scores


def test_a_cases_rubric_is_appended_and_each_format_gets_its_body() -> None:
    rubric = with_case_rubric(DEFAULT_RUBRIC, "names the refund window")
    assert rubric.startswith(DEFAULT_RUBRIC) and rubric.endswith("names the refund window")
    assert with_case_rubric(DEFAULT_RUBRIC, None) == DEFAULT_RUBRIC
    path, body = judge_request(rubric, "q", "A!", "B!", anthropic=False)
    assert path == "/v1/chat/completions" and body["messages"][0]["content"] == rubric
    assert "Answer A:\nA!" in body["messages"][1]["content"]
    path, body = judge_request(rubric, "q", "A!", "b" * (MAX_TEXT * 2), anthropic=True)
    assert path == "/v1/messages" and body["system"] == rubric
    assert body["messages"][0]["content"].endswith("b" * MAX_TEXT)
    assert len(body["messages"][0]["content"]) < MAX_TEXT + 100


def test_both_orders_cancel_a_judge_that_favours_the_first_answer() -> None:
    assert average_orders((8, 5), (8, 5)) == (6.5, 6.5)  # whatever comes first gets the 8
    assert average_orders((9, 3), (4, 7)) == (8.0, 3.5)  # the first is better either way
    assert average_orders((8, 5), None) == (8, 5)
