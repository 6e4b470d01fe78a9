"""Scripted answers: a model that follows the rule in its system prompt, and a stale one."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from proxy.mock_upstream.answers import answer_text
from proxy.mock_upstream.behavior import EchoAnswer, FixedAnswer, RegexFromSystemAnswer
from proxy.mock_upstream.conversation import Prompt
from proxy.mock_upstream.tokens import TokenCounter

RULE = "You are a shipping assistant. Policy: max_weight = 150 (kg)."
QUESTION = "How heavy can my parcel be?"


@pytest.mark.parametrize(("model", "expected"), [("follower", 150), ("stale", 100)])
@pytest.mark.parametrize("role", ["system", "developer"])
def test_chat_answers_by_the_rule(oai: openai.OpenAI, model: str, expected: int, role: str) -> None:
    completion = oai.chat.completions.create(
        model=model,
        messages=[
            {"role": role, "content": RULE},  # type: ignore[list-item,misc]
            {"role": "user", "content": QUESTION},
        ],
    )
    assert json.loads(completion.choices[0].message.content or "") == {"max_weight": expected}


@pytest.mark.parametrize(("model", "expected"), [("follower", 150), ("stale", 100)])
def test_responses_read_the_rule_from_instructions(
    oai: openai.OpenAI, model: str, expected: int
) -> None:
    response = oai.responses.create(model=model, instructions=RULE, input=QUESTION)
    assert json.loads(response.output_text) == {"max_weight": expected}


@pytest.mark.parametrize(("model", "expected"), [("follower", 150), ("stale", 100)])
def test_anthropic_reads_the_rule_from_system_blocks(
    claude: anthropic.Anthropic, model: str, expected: int
) -> None:
    message = claude.messages.create(
        model=model,
        max_tokens=50,
        system=[{"type": "text", "text": RULE}],
        messages=[{"role": "user", "content": QUESTION}],
    )
    assert json.loads(message.content[0].text) == {"max_weight": expected}  # type: ignore[union-attr]


def test_the_rule_follower_without_a_rule_gives_its_default(oai: openai.OpenAI) -> None:
    completion = oai.chat.completions.create(
        model="follower", messages=[{"role": "user", "content": QUESTION}]
    )
    assert completion.choices[0].message.content == '{"max_weight": null}'


def test_template_fills_numbered_groups_and_keeps_other_braces() -> None:
    answer = RegexFromSystemAnswer(
        pattern=r"(\w+) = (\d+)", template='{"{1}": {2}, "whole": "{0}", "missing": {7}}'
    )
    prompt = Prompt("m", False, False, "limit = 5", "", ())
    text = answer_text(answer, prompt, TokenCounter())
    assert text == '{"limit": 5, "whole": "limit = 5", "missing": {7}}'


def test_echo_is_cut_to_answer_tokens_even_for_a_long_message() -> None:
    counter = TokenCounter()
    prompt = Prompt("m", False, False, "", "word " * 5000, ())
    text = answer_text(EchoAnswer(answer_tokens=12), prompt, counter)
    assert text.startswith("You said: word word") and counter.count(text) <= 12


def test_a_fixed_answer_may_repeat_its_text_for_a_huge_answer() -> None:
    prompt = Prompt("m", False, False, "", "hi", ())
    answer = FixedAnswer(text="abc ", repeat=3)
    assert answer_text(answer, prompt, TokenCounter()) == "abc abc abc "
    assert answer_text(FixedAnswer(text="once"), prompt, TokenCounter()) == "once"
