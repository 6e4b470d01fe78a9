"""The mock speaks OpenAI's wire formats: the official SDK parses everything it sends."""

from __future__ import annotations

import base64
import struct
from typing import TYPE_CHECKING

import httpx
import openai
import orjson
import pytest

from proxy.mock_upstream.server import MockUpstreamServer
from proxy.mock_upstream.tokens import TokenCounter

if TYPE_CHECKING:  # the SDKs load on first use (tests/sdk_imports.py)
    from openai.types.chat import ChatCompletionMessageParam

MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Where is my parcel? It left Zürich on Monday 📦"},
]


def sse_payloads(text: str) -> list[dict[str, object]]:
    """The JSON payloads of a `data:` stream, [DONE] excluded."""
    lines = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    return [orjson.loads(line) for line in lines if line != "[DONE]"]


def test_chat_answer_echoes_the_user_with_real_usage(oai: openai.OpenAI) -> None:
    completion = oai.chat.completions.create(model="gpt-test", messages=MESSAGES)
    counter = TokenCounter()
    text = completion.choices[0].message.content or ""
    assert completion.id.startswith("chatcmpl-")
    assert completion.object == "chat.completion"
    assert completion.model == "gpt-test"
    assert completion.choices[0].finish_reason == "stop"
    assert text.startswith("You said: Where is my parcel?")
    assert completion.usage is not None
    assert completion.usage.completion_tokens == counter.count(text) == 40
    expected_prompt = sum(counter.count(str(m.get("content"))) for m in MESSAGES)
    assert completion.usage.prompt_tokens == expected_prompt
    assert completion.usage.total_tokens == expected_prompt + 40


def test_chat_stream_joins_to_the_non_streamed_text_with_the_same_usage(
    oai: openai.OpenAI,
) -> None:
    whole = oai.chat.completions.create(model="gpt-test", messages=MESSAGES)
    chunks = list(
        oai.chat.completions.create(
            model="gpt-test",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == whole.choices[0].message.content
    assert len(chunks) > 5  # 40 tokens in 3-token deltas, plus role, finish and usage chunks
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage
    assert all(c.usage is None for c in chunks[:-1])
    assert len({c.id for c in chunks}) == 1 and chunks[0].object == "chat.completion.chunk"


def test_include_usage_puts_null_usage_on_every_chunk_and_usage_last(raw: httpx.Client) -> None:
    body: dict[str, object] = {"model": "m", "messages": MESSAGES, "stream": True}
    plain = raw.post("/v1/chat/completions", json=body)
    asked = raw.post(
        "/v1/chat/completions", json={**body, "stream_options": {"include_usage": True}}
    )
    assert plain.headers["content-type"].startswith("text/event-stream")
    assert plain.text.endswith("data: [DONE]\n\n")
    assert all("usage" not in p for p in sse_payloads(plain.text))
    payloads = sse_payloads(asked.text)
    assert all(p["usage"] is None for p in payloads[:-1])
    assert payloads[-1]["choices"] == [] and isinstance(payloads[-1]["usage"], dict)


def test_max_tokens_cuts_the_answer_and_reports_length(oai: openai.OpenAI) -> None:
    completion = oai.chat.completions.create(
        model="m",
        messages=MESSAGES,
        max_completion_tokens=7,
    )
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens <= 7


def test_cached_tokens_are_reported_as_prompt_cache_hits(oai: openai.OpenAI) -> None:
    completion = oai.chat.completions.create(model="cached", messages=MESSAGES)
    assert completion.usage is not None and completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == 3


def test_usage_switched_off_leaves_it_out_even_when_asked(
    oai: openai.OpenAI, raw: httpx.Client
) -> None:
    completion = oai.chat.completions.create(model="silent", messages=MESSAGES)
    assert completion.usage is None
    body: dict[str, object] = {"model": "silent", "messages": MESSAGES, "stream": True}
    streamed = raw.post(
        "/v1/chat/completions", json={**body, "stream_options": {"include_usage": True}}
    )
    payloads = sse_payloads(streamed.text)
    assert payloads and all("usage" not in p for p in payloads)


@pytest.mark.anyio
async def test_async_client_streams_the_same_text(mock_server: MockUpstreamServer) -> None:
    async with openai.AsyncOpenAI(
        base_url=mock_server.url + "/v1", api_key="k", max_retries=0
    ) as client:
        whole = await client.chat.completions.create(model="a", messages=MESSAGES)
        stream = await client.chat.completions.create(model="a", messages=MESSAGES, stream=True)
        parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    assert "".join(parts) == whole.choices[0].message.content


def test_legacy_completions_stream_and_not(oai: openai.OpenAI) -> None:
    whole = oai.completions.create(model="davinci-test", prompt="Say hi")
    chunks = list(
        oai.completions.create(
            model="davinci-test",
            prompt="Say hi",
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert whole.object == "text_completion" and whole.id.startswith("cmpl-")
    assert whole.choices[0].text.startswith("You said: Say hi")
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage
    assert whole.usage is not None and whole.usage.prompt_tokens == 2


def test_completion_prompt_as_token_ids_counts_the_ids(oai: openai.OpenAI) -> None:
    completion = oai.completions.create(model="m", prompt=[1, 2, 3, 4])
    assert completion.usage is not None and completion.usage.prompt_tokens == 4


def test_embeddings_are_deterministic_unit_vectors_in_both_encodings(
    oai: openai.OpenAI, raw: httpx.Client
) -> None:
    first = oai.embeddings.create(model="emb", input=["hello", "world"])
    again = oai.embeddings.create(model="emb", input="hello", dimensions=1536)
    as_float = raw.post(
        "/v1/embeddings", json={"model": "emb", "input": "hello", "encoding_format": "float"}
    ).json()
    as_base64 = raw.post(
        "/v1/embeddings", json={"model": "emb", "input": "hello", "encoding_format": "base64"}
    ).json()
    vector = first.data[0].embedding
    assert len(vector) == 1536 and first.data[1].embedding != vector
    assert again.data[0].embedding == vector == as_float["data"][0]["embedding"]
    decoded = base64.b64decode(as_base64["data"][0]["embedding"])
    assert list(struct.unpack(f"<{len(vector)}f", decoded)) == vector
    assert abs(sum(v * v for v in vector) - 1.0) < 1e-5
    assert first.usage.prompt_tokens == first.usage.total_tokens == 2
    short = oai.embeddings.create(model="emb", input="hello", dimensions=8)
    assert len(short.data[0].embedding) == 8


def test_responses_create_and_both_stream_apis_agree(oai: openai.OpenAI) -> None:
    model, prompt, instructions = "resp-test", "Track parcel 42", "Be brief."
    whole = oai.responses.create(model=model, input=prompt, instructions=instructions)
    events = list(
        oai.responses.create(model=model, input=prompt, instructions=instructions, stream=True)
    )
    with oai.responses.stream(model=model, input=prompt, instructions=instructions) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert whole.id.startswith("resp_") and whole.status == "completed"
    assert whole.model == "resp-test" and whole.instructions == "Be brief."
    assert whole.output_text.startswith("You said: Track parcel 42")
    assert "".join(deltas) == final.output_text == whole.output_text
    assert final.usage == whole.usage
    assert whole.usage is not None and whole.usage.output_tokens == 40
    assert whole.usage.input_tokens == TokenCounter().count("Be brief.") + 4
    assert whole.usage.input_tokens_details.cached_tokens == 0
    assert whole.usage.output_tokens_details.reasoning_tokens == 0
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_responses_max_output_tokens_ends_incomplete(oai: openai.OpenAI) -> None:
    response = oai.responses.create(model="m", input="hello", max_output_tokens=16)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"


def test_models_lists_the_behaviour_models(oai: openai.OpenAI) -> None:
    ids = [model.id for model in oai.models.list()]
    assert "follower" in ids and "stale" in ids


def test_bad_requests_get_openai_errors(oai: openai.OpenAI, raw: httpx.Client) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        oai.chat.completions.create(model="m", messages=[])
    assert "messages" in caught.value.message
    not_json = raw.post("/v1/chat/completions", content=b"{nope")
    assert (
        not_json.status_code == 400 and not_json.json()["error"]["type"] == "invalid_request_error"
    )
    assert raw.post("/v1/unknown", json={}).status_code == 404
    assert raw.get("/v1/chat/completions").status_code == 405
