"""Scripted answers: a model that follows the rule in its system prompt, and a stale one."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from proxy.mock_upstream.answers import answer_text
from proxy.mock_upstream.behavior import (
    EchoAnswer,
    FixedAnswer,
    RegexFromSystemAnswer,
    parse_behavior,
)
from proxy.mock_upstream.conversation import Prompt
from proxy.mock_upstream.server import MockUpstreamServer
from proxy.mock_upstream.tokens import TokenCounter
from tests.conftest import TLS_CONTEXT

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


# The memorising model: counted shares of answers from memory, reasoning that agrees.

MEMORISER = {
    "type": "regex_from_system",
    "pattern": r"max_weight\s*=\s*(\d+)",
    "template": '{"max_weight": {1}}',
    "reasoning": "Parcels may weigh up to {1} kg.",
}


def _weights(server: MockUpstreamServer, model: str, n: int) -> list[int]:
    with openai.OpenAI(
        base_url=server.url + "/v1", api_key="k", max_retries=0,
        http_client=openai.DefaultHttpxClient(verify=TLS_CONTEXT),
    ) as client:  # fmt: skip
        return [
            json.loads(
                client.chat.completions.create(
                    model=model,
                    messages=[
                        {"role": "system", "content": RULE},
                        {"role": "user", "content": QUESTION},
                    ],
                )
                .choices[0]
                .message.content
                or ""
            )["max_weight"]
            for _ in range(n)
        ]


@pytest.fixture(scope="module")
def memory_server() -> Iterator[MockUpstreamServer]:
    models = {
        f"p{int(rate * 100)}": {
            "answer": {**MEMORISER, "memorised": {"group": 1, "value": "100", "rate": rate}}
        }
        for rate in (0.0, 0.3, 0.95, 1.0)
    }
    with MockUpstreamServer(parse_behavior({"models": models})) as server:
        yield server


@pytest.mark.parametrize(("rate", "model"), [(0.0, "p0"), (0.3, "p30"), (0.95, "p95")])
def test_a_memoriser_answers_the_memorised_value_on_exactly_its_share(
    memory_server: MockUpstreamServer, rate: float, model: str
) -> None:
    httpx.post(memory_server.url + "/_mock/reset", verify=TLS_CONTEXT)
    answers = _weights(memory_server, model, 20)
    assert set(answers) <= {100, 150}
    assert answers.count(100) == round(20 * rate)
    # The counter schedule: answer n is memorised when floor(n*r) > floor((n-1)*r).
    expected = [
        100 if math.floor(n * rate + 1e-9) > math.floor((n - 1) * rate + 1e-9) else 150
        for n in range(1, 21)
    ]
    assert answers == expected


def test_reset_restarts_the_memory_schedule_and_stats_count_it(
    memory_server: MockUpstreamServer,
) -> None:
    httpx.post(memory_server.url + "/_mock/reset", verify=TLS_CONTEXT)
    first = _weights(memory_server, "p30", 7)
    stats = httpx.get(memory_server.url + "/_mock/stats", verify=TLS_CONTEXT).json()
    assert stats["memorised"] == first.count(100) == 2
    httpx.post(memory_server.url + "/_mock/reset", verify=TLS_CONTEXT)
    assert _weights(memory_server, "p30", 7) == first == [150, 150, 150, 100, 150, 150, 100]


def test_each_model_keeps_its_own_memory_counter(memory_server: MockUpstreamServer) -> None:
    httpx.post(memory_server.url + "/_mock/reset", verify=TLS_CONTEXT)
    assert _weights(memory_server, "p30", 3) == [150, 150, 150]
    assert _weights(memory_server, "p0", 5) == [150] * 5
    assert _weights(memory_server, "p30", 1) == [100]  # its 4th answer, whatever came between


def test_openai_chat_returns_reasoning_content_that_states_the_same_value(
    memory_server: MockUpstreamServer,
) -> None:
    with openai.OpenAI(
        base_url=memory_server.url + "/v1", api_key="k", max_retries=0,
        http_client=openai.DefaultHttpxClient(verify=TLS_CONTEXT),
    ) as client:  # fmt: skip
        messages: Any = [
            {"role": "system", "content": RULE},
            {"role": "user", "content": QUESTION},
        ]
        completion = client.chat.completions.create(model="p100", messages=messages)
        message = completion.choices[0].message
        assert message.content == '{"max_weight": 100}'
        assert message.model_extra == {"reasoning_content": "Parcels may weigh up to 100 kg."}
        usage = completion.usage
        assert usage is not None and usage.completion_tokens_details is not None
        assert (usage.completion_tokens_details.reasoning_tokens or 0) > 0
        stream = client.chat.completions.create(model="p0", messages=messages, stream=True)
        reasoning, content = "", ""
        for chunk in stream:
            if chunk.choices:
                delta = chunk.choices[0].delta
                reasoning += (delta.model_extra or {}).get("reasoning_content", "")
                content += delta.content or ""
        assert (reasoning, content) == ("Parcels may weigh up to 150 kg.", '{"max_weight": 150}')


def test_anthropic_returns_a_signed_thinking_block_before_the_text(
    memory_server: MockUpstreamServer,
) -> None:
    with anthropic.Anthropic(
        base_url=memory_server.url, api_key="k", max_retries=0,
        http_client=anthropic.DefaultHttpxClient(verify=TLS_CONTEXT),
    ) as client:  # fmt: skip
        ask: Any = {
            "model": "p100",
            "max_tokens": 200,
            "system": RULE,
            "messages": [{"role": "user", "content": QUESTION}],
        }
        message = client.messages.create(**ask)
        thinking, text = message.content
        assert thinking.type == "thinking" and thinking.signature
        assert thinking.thinking == "Parcels may weigh up to 100 kg."
        assert text.type == "text" and text.text == '{"max_weight": 100}'
        with client.messages.stream(**{**ask, "model": "p0"}) as stream:
            final = stream.get_final_message()
        streamed_thinking, streamed_text = final.content
        assert streamed_thinking.type == "thinking"
        assert streamed_thinking.thinking == "Parcels may weigh up to 150 kg."
        assert streamed_thinking.signature
        assert streamed_text.type == "text" and streamed_text.text == '{"max_weight": 150}'


def test_without_reasoning_the_anthropic_stream_is_unchanged(
    claude: anthropic.Anthropic,
) -> None:
    with claude.messages.stream(
        model="follower",
        max_tokens=50,
        system=RULE,
        messages=[{"role": "user", "content": QUESTION}],
    ) as stream:
        kinds = [event.type for event in stream]
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert [b.type for b in stream.get_final_message().content] == ["text"]
