"""Usage and answer text read from the providers' bodies: exact fields, odd shapes never raise."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.records import Usage
from proxy.upstream.usage import (
    SAMPLE_MAX_DEPTH,
    SAMPLE_MAX_NODES,
    PromptSample,
    anthropic_usage,
    openai_usage,
    prompt_sample,
    prompt_text,
    response_text,
    response_usage,
)


def test_openai_cached_tokens_are_taken_out_of_the_prompt_tokens() -> None:
    usage = openai_usage({
        "prompt_tokens": 100, "completion_tokens": 20,
        "prompt_tokens_details": {"cached_tokens": 30},
        "completion_tokens_details": {"reasoning_tokens": 5},
    })  # fmt: skip
    assert usage == Usage(
        input_tokens=70, output_tokens=20, cached_input_tokens=30, reasoning_tokens=5
    )


def test_the_responses_shape_is_read_too_and_counts_stay_consistent() -> None:
    usage = openai_usage({
        "input_tokens": 10, "output_tokens": 4,
        "input_tokens_details": {"cached_tokens": 50},  # more than the prompt: capped
        "output_tokens_details": {"reasoning_tokens": 9},  # more than the output: capped
    })  # fmt: skip
    assert usage == Usage(input_tokens=0, output_tokens=4, cached_input_tokens=10,
                          reasoning_tokens=4)  # fmt: skip


def test_anthropic_usage_keeps_cache_reads_and_writes_apart() -> None:
    usage = anthropic_usage({
        "input_tokens": 12, "output_tokens": 7,
        "cache_read_input_tokens": 100, "cache_creation_input_tokens": 40,
    })  # fmt: skip
    assert usage == Usage(
        input_tokens=12, output_tokens=7, cached_input_tokens=100, cache_write_tokens=40
    )


@pytest.mark.parametrize(
    "odd",
    [None, "12", [], {"prompt_tokens": "12", "completion_tokens": -3},
     {"prompt_tokens": True, "prompt_tokens_details": "x"}],
)  # fmt: skip
def test_odd_shapes_count_as_absent_never_raise(odd: Any) -> None:
    usage = openai_usage(odd)
    assert usage is None or usage == Usage(0, 0)
    assert anthropic_usage(odd) in (None, Usage(0, 0))


def test_response_usage_reads_the_endpoints_format() -> None:
    assert response_usage("messages", {"usage": {"input_tokens": 3, "output_tokens": 2}}) == Usage(
        3, 2
    )
    assert response_usage("chat.completions", {"usage": {"prompt_tokens": 3}}) == Usage(3, 0)
    assert response_usage("embeddings", {}) is None


def test_answer_text_of_each_endpoint() -> None:
    chat = {"choices": [{"message": {"content": "hi"}}, {"message": {"content": "no"}}]}
    assert response_text("chat.completions", chat) == "hi"  # the first choice only
    assert response_text("completions", {"choices": [{"text": "done"}]}) == "done"
    responses = {"output": [
        {"content": [{"type": "output_text", "text": "a"}, {"type": "refusal", "text": "x"}]},
        {"content": [{"type": "output_text", "text": "b"}]},
    ]}  # fmt: skip
    assert response_text("responses", responses) == "ab"
    message = {"content": [{"type": "text", "text": "one "}, {"type": "tool_use"},
                           {"type": "text", "text": "two"}]}  # fmt: skip
    assert response_text("messages", message) == "one two"
    assert response_text("embeddings", {"data": [1, 2]}) == ""
    assert response_text("chat.completions", {"choices": "nope"}) == ""


def test_prompt_text_collects_every_text_a_request_sends() -> None:
    chat = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "rules"},
            {"role": "user", "content": [{"type": "text", "text": "part one"},
                                         {"type": "image_url", "image_url": {"url": "x"}}]},
        ],
    }  # fmt: skip
    assert prompt_text("chat.completions", chat) == "rules\npart one"
    anthropic = {"system": "be brief", "messages": [{"role": "user", "content": "hello"}]}
    assert prompt_text("messages", anthropic) == "be brief\nhello"
    assert prompt_text("responses", {"instructions": "x", "input": "y"}) == "x\ny"


def test_prompt_sample_reads_a_small_request_whole() -> None:
    anthropic = {"system": "be brief", "messages": [{"role": "user", "content": "hello"}]}
    sample = prompt_sample("messages", anthropic)
    assert sample == PromptSample("be brief\nhello", len("be brief\nhello"), True)


def test_prompt_sample_of_a_huge_message_list_reads_a_bounded_part_and_extrapolates() -> None:
    messages = [{"role": "user", "content": "0123456789"} for _ in range(50 * SAMPLE_MAX_NODES)]
    body = {"messages": messages}
    sample = prompt_sample("chat.completions", body)
    whole = prompt_text("chat.completions", body)
    assert not sample.complete
    assert len(sample.text) < len(whole) / 10
    assert abs(sample.chars - len(whole)) / len(whole) < 0.01


def test_prompt_sample_ignores_text_nested_deeper_than_its_bound() -> None:
    deep: Any = "hidden"
    for _ in range(SAMPLE_MAX_DEPTH + 5):
        deep = [deep]
    sample = prompt_sample("chat.completions", {"messages": [deep, "seen"]})
    assert sample.text == "seen"
