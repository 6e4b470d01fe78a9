"""What the LLM judge is asked and how its answer is read, shared by the live judge of shadow
pairs (`proxy.mirror.llm_judge`) and replay's judging of rubric cases (`proxy.replay`).

The judge sees a request and two answers, A and B, and replies with a score from 1 to 10 for
each. Judge models favour the answer shown in one position, so each pair is asked twice with the
answers swapped and each answer's two scores are averaged (`average_orders`); one order only is
half the cost and leaves that bias in. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

DEFAULT_RUBRIC = """You compare two answers to the same request and score each from 1 to 10.
Judge correctness first (including following the instructions and policies in the request),
then helpfulness and clarity. Do not reward length: a longer answer is not better, and padding,
repetition or needless detail lowers the score. Ignore the order in which answers are shown.
Reply with JSON only: {"score_a": <1-10>, "score_b": <1-10>, "reason": "<one sentence>"}"""

MAX_TEXT = 20_000
"""The request and each answer are cut to this many characters in the judge's prompt."""
_SCORES = re.compile(r"\{.*\}", re.DOTALL)


def request_text(payload: Mapping[str, Any]) -> str:
    """The request as the judge reads it: its last six messages (`role: text`), or its input."""
    messages = payload.get("messages")
    if isinstance(messages, list):
        parts = []
        for message in messages[-6:]:
            if isinstance(message, dict) and isinstance(message.get("content"), str):
                parts.append(f"{message.get('role', 'user')}: {message['content']}")
        return "\n".join(parts)[:MAX_TEXT]
    return str(payload.get("input") or payload.get("prompt") or "")[:MAX_TEXT]


def parse_scores(text: str) -> tuple[float, float] | None:
    """(score_a, score_b) from the judge's answer, or None when it did not give both in 1..10."""
    match = _SCORES.search(text)
    if match is None:
        return None
    try:
        data = json.loads(match.group(0))
        a, b = float(data["score_a"]), float(data["score_b"])
    except (ValueError, KeyError, TypeError):
        return None
    if not (1 <= a <= 10 and 1 <= b <= 10):
        return None
    return a, b


def with_case_rubric(rubric: str, case_rubric: str | None) -> str:
    """The judge's instructions, with what one case asks the judge to look for appended."""
    if not case_rubric:
        return rubric
    return f"{rubric}\n\nWhat this request's answers must do:\n{case_rubric[:MAX_TEXT]}"


def judge_request(
    rubric: str, request: str, answer_a: str, answer_b: str, *, anthropic: bool
) -> tuple[str, dict[str, Any]]:
    """(the endpoint's path, the body) of one call of the judge model."""
    content = (
        f"Request:\n{request}\n\nAnswer A:\n{answer_a[:MAX_TEXT]}\n\n"
        f"Answer B:\n{answer_b[:MAX_TEXT]}"
    )
    if anthropic:
        return "/v1/messages", {
            "system": rubric,
            "max_tokens": 200,
            "messages": [{"role": "user", "content": content}],
        }
    return "/v1/chat/completions", {
        "messages": [{"role": "system", "content": rubric}, {"role": "user", "content": content}],
        "max_tokens": 200,
        "temperature": 0,
    }


def average_orders(
    first_first: tuple[float, float], second_first: tuple[float, float] | None
) -> tuple[float, float]:
    """(first's score, second's score) from the call that showed the first answer as A and,
    when asked, the call that showed it as B: each answer's scores averaged over both."""
    if second_first is None:
        return first_first
    return (
        (first_first[0] + second_first[1]) / 2,
        (first_first[1] + second_first[0]) / 2,
    )
