"""The mock speaks Anthropic's Messages API: the official SDK parses everything it sends."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anthropic
import httpx
import orjson
import pytest

from proxy.mock_upstream.server import MockUpstreamServer
from proxy.mock_upstream.tokens import TokenCounter

if TYPE_CHECKING:  # the SDKs load on first use (tests/sdk_imports.py)
    from anthropic.types import MessageParam

MESSAGES: list[MessageParam] = [{"role": "user", "content": "Is my order on its way?"}]
SYSTEM = "You are a shipping assistant."


def test_message_echoes_the_user_with_real_usage(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(
        model="claude-test", max_tokens=256, system=SYSTEM, messages=MESSAGES
    )
    counter = TokenCounter()
    block = message.content[0]
    assert block.type == "text" and block.text.startswith("You said: Is my order on its way?")
    assert message.id.startswith("msg_") and message.model == "claude-test"
    assert message.role == "assistant" and message.stop_reason == "end_turn"
    assert message.usage.output_tokens == counter.count(block.text) == 40
    assert message.usage.input_tokens == counter.count(SYSTEM) + counter.count(
        "Is my order on its way?"
    )
    assert message.usage.cache_read_input_tokens == 0
    assert message.usage.cache_creation_input_tokens == 0


def test_stream_helper_rebuilds_the_same_message(claude: anthropic.Anthropic) -> None:
    whole = claude.messages.create(model="c", max_tokens=256, messages=MESSAGES)
    with claude.messages.stream(model="c", max_tokens=256, messages=MESSAGES) as stream:
        deltas = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(deltas) == final.content[0].text == whole.content[0].text  # type: ignore[union-attr]
    assert len(deltas) > 1
    assert final.usage == whole.usage and final.stop_reason == "end_turn"


def test_stream_events_come_in_anthropic_order(
    claude: anthropic.Anthropic, raw: httpx.Client
) -> None:
    body = {"model": "c", "max_tokens": 256, "messages": MESSAGES, "stream": True}
    wire = raw.post("/v1/messages", json=body).text
    names = [line[7:] for line in wire.splitlines() if line.startswith("event: ")]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert set(names[3:-3]) == {"content_block_delta"}
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    events = list(claude.messages.create(model="c", max_tokens=256, messages=MESSAGES, stream=True))
    start, ending = events[0], events[-2]
    assert start.type == "message_start" and start.message.usage.output_tokens == 1
    assert ending.type == "message_delta" and ending.delta.stop_reason == "end_turn"
    assert ending.usage.output_tokens == 40


def test_max_tokens_stops_with_max_tokens(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(model="c", max_tokens=5, messages=MESSAGES)
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens <= 5


def test_cache_reads_are_split_from_input_tokens(claude: anthropic.Anthropic) -> None:
    plain = claude.messages.create(model="c", max_tokens=64, messages=MESSAGES)
    cached = claude.messages.create(model="cached", max_tokens=64, messages=MESSAGES)
    assert cached.usage.cache_read_input_tokens == 3
    assert cached.usage.input_tokens == plain.usage.input_tokens - 3


def test_usage_switched_off_leaves_usage_out(raw: httpx.Client) -> None:
    body = {"model": "silent", "max_tokens": 64, "messages": MESSAGES}
    assert "usage" not in raw.post("/v1/messages", json=body).json()
    streamed = raw.post("/v1/messages", json={**body, "stream": True}).text
    payloads = [
        orjson.loads(line[6:]) for line in streamed.splitlines() if line.startswith("data:")
    ]
    assert payloads and not any("usage" in p or "usage" in p.get("message", {}) for p in payloads)


@pytest.mark.anyio
async def test_async_client_streams_the_same_text(mock_server: MockUpstreamServer) -> None:
    async with anthropic.AsyncAnthropic(
        base_url=mock_server.url, api_key="k", max_retries=0
    ) as client:
        whole = await client.messages.create(model="c", max_tokens=99, messages=MESSAGES)
        async with client.messages.stream(model="c", max_tokens=99, messages=MESSAGES) as stream:
            text = "".join([delta async for delta in stream.text_stream])
    assert text == whole.content[0].text  # type: ignore[union-attr]


def test_errors_use_the_anthropic_shape(claude: anthropic.Anthropic, raw: httpx.Client) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(model="c", max_tokens=10, messages=[])
    assert caught.value.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "messages: must be a non-empty array",
        },
    }
    assert raw.post("/v1/messages", content=b"[1, 2]").json()["type"] == "error"


def test_models_list_in_anthropic_format(claude: anthropic.Anthropic) -> None:
    ids = [model.id for model in claude.models.list()]
    assert "follower" in ids
