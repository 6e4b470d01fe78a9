"""The gateway in front of the mock upstream, driven by the official openai SDK (in process)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from proxy.core.records import Arm, ExchangeRecord, Status
from proxy.gateway.exchange import new_request_id
from proxy.mock_upstream.server import MockUpstreamServer
from tests.conftest import InProcessGateway, gateway_config, sdk_client, wait_until

MESSAGES = [
    {"role": "system", "content": "You are terse. max_weight = 150"},
    {"role": "user", "content": "How heavy can my parcel be?"},
]


def records_for(gw: InProcessGateway, request_id: str, count: int = 1) -> list[ExchangeRecord]:
    store = gw.gateway.store
    return wait_until(  # type: ignore[no-any-return]
        lambda: (rows := store.query(request_id=request_id)) and len(rows) >= count and rows,
        what=f"{count} record(s) for {request_id}",
    )


def client(gw: InProcessGateway) -> openai.OpenAI:
    return sdk_client(  # type: ignore[no-any-return]
        openai.OpenAI(
            base_url=gw.url + "/v1", api_key="client-key", max_retries=0, http_client=gw.sdk_http()
        )
    )


def test_chat_non_stream_is_recorded_with_exact_usage_and_cost(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway()
    raw = client(gw).chat.completions.with_raw_response.create(model="echo", messages=MESSAGES)
    completion = raw.parse()
    assert completion.model == "echo"  # the mock echoes the upstream model name
    assert completion.choices[0].message.content
    assert raw.headers["x-mirrorgate-arm"] == "primary"
    assert raw.headers.get_list("date") == [raw.headers["date"]]  # the upstream's, once
    request_id = raw.headers["x-mirrorgate-request-id"]
    (record,) = records_for(gw, request_id)
    assert record.route == "echo" and record.target == "echo" and record.arm is Arm.PRIMARY
    assert record.status is Status.OK and record.http_status == 200 and not record.streamed
    usage = completion.usage
    assert usage is not None
    assert record.usage.input_tokens == usage.prompt_tokens
    assert record.usage.output_tokens == usage.completion_tokens
    assert not record.usage.estimated
    expected = (usage.prompt_tokens * 1.0 + usage.completion_tokens * 4.0) / 1e6
    assert record.cost_usd == pytest.approx(expected, rel=1e-12)
    assert record.response_text == completion.choices[0].message.content


def test_streamed_text_equals_non_streamed_and_chunks_pass_in_order(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    gw = start_gateway()
    sdk = client(gw)
    full = sdk.chat.completions.create(model="echo", messages=MESSAGES)
    via_gateway = list(sdk.chat.completions.create(model="echo", messages=MESSAGES, stream=True))
    direct = list(
        sdk_client(
            openai.OpenAI(base_url=upstream.url + "/v1", api_key="x")
        ).chat.completions.create(model="echo", messages=MESSAGES, stream=True)
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in via_gateway if c.choices)
    assert streamed == full.choices[0].message.content
    # Same chunks, same order, same count as talking to the model directly.
    assert [c.choices[0].delta.content for c in via_gateway] == [
        c.choices[0].delta.content for c in direct
    ]
    # The usage chunk the gateway asked for never reaches a client that did not ask.
    assert all(c.usage is None for c in via_gateway)


def test_usage_chunk_is_injected_upstream_and_stripped_for_the_client(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    gw = start_gateway()
    body = {"model": "echo", "messages": MESSAGES, "stream": True, "x_unknown_field": [1, 2]}
    with gw.http.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.headers["x-accel-buffering"] == "no"
        request_id = response.headers["x-mirrorgate-request-id"]
        events = [line for line in response.iter_lines() if line.startswith("data:")]
    assert events[-1] == "data: [DONE]"
    payloads = [orjson.loads(e[5:]) for e in events[:-1]]
    assert all("usage" not in p for p in payloads), "usage leaked to a client that did not ask"
    assert all(p["choices"] for p in payloads)
    forwarded = [r for r in upstream.app.recorder.requests() if r["path"] == "/v1/chat/completions"]
    sent = forwarded[-1]["body"]
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["x_unknown_field"] == [1, 2]  # unknown fields pass through
    assert sent["model"] == "echo"
    (record,) = records_for(gw, request_id)
    assert record.streamed and record.status is Status.OK
    assert record.usage.output_tokens > 0 and not record.usage.estimated
    assert record.ttft_s is not None and 0 < record.ttft_s <= record.duration_s


def test_client_that_asked_for_usage_gets_it(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway()
    sdk = client(gw)
    full = sdk.chat.completions.create(model="echo", messages=MESSAGES)
    chunks = list(
        sdk.chat.completions.create(
            model="echo", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[-1].choices == []
    assert chunks[-1].usage == full.usage


def test_async_client_concurrent_streams(start_gateway: Callable[..., InProcessGateway]) -> None:
    gw = start_gateway()

    async def run() -> list[str]:
        sdk = openai.AsyncOpenAI(
            base_url=gw.url + "/v1", api_key="k", max_retries=0, http_client=gw.sdk_async_http()
        )

        async def one(i: int) -> str:
            stream = await sdk.chat.completions.create(
                model="slow-stream",
                messages=[{"role": "user", "content": f"question {i}"}],
                stream=True,
            )
            return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

        try:
            return await asyncio.gather(*(one(i) for i in range(20)))
        finally:
            await sdk.close()

    answers = asyncio.run(run())
    assert all(f"question {i}" in answer for i, answer in enumerate(answers))


def test_completions_embeddings_and_responses(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway()
    sdk = client(gw)
    text = sdk.completions.create(model="echo", prompt="Say hi").choices[0].text
    streamed = "".join(
        c.choices[0].text
        for c in sdk.completions.create(model="echo", prompt="Say hi", stream=True)
    )
    assert streamed == text
    vectors = sdk.embeddings.create(model="echo", input=["a", "b"])
    assert len(vectors.data) == 2 and vectors.usage.prompt_tokens > 0
    answer = sdk.responses.create(model="echo", input="Say hi", instructions="be brief")
    events = list(
        sdk.responses.create(model="echo", input="Say hi", instructions="be brief", stream=True)
    )
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == answer.output_text
    assert events[-1].type == "response.completed"
    raw = sdk.responses.with_raw_response.create(model="echo", input="Say hi", stream=False)
    (record,) = records_for(gw, raw.headers["x-mirrorgate-request-id"])
    assert record.endpoint == "responses"
    assert record.usage.output_tokens == raw.parse().usage.output_tokens  # type: ignore[union-attr]


def test_models_lists_routes(start_gateway: Callable[..., InProcessGateway]) -> None:
    gw = start_gateway()
    ids = {m.id for m in client(gw).models.list()}
    assert {"echo", "echo-claude", "rule-follower"} <= ids


def test_missing_usage_is_estimated_and_marked(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway()
    raw = client(gw).chat.completions.with_raw_response.create(model="no-usage", messages=MESSAGES)
    assert raw.parse().usage is None
    (record,) = records_for(gw, raw.headers["x-mirrorgate-request-id"])
    assert record.usage.estimated
    assert record.usage.input_tokens > 0 and record.usage.output_tokens > 0
    assert record.cost_usd > 0
    with gw.http.stream(
        "POST", "/v1/chat/completions",
        json={"model": "no-usage", "messages": MESSAGES, "stream": True},
    ) as response:  # fmt: skip
        request_id = response.headers["x-mirrorgate-request-id"]
        response.read()
    (streamed,) = records_for(gw, request_id)
    assert streamed.usage.estimated and streamed.usage.output_tokens == record.usage.output_tokens


def test_a_stream_that_arrives_in_one_read_is_forwarded_in_one_write(
    upstream: MockUpstreamServer, tmp_path: Path
) -> None:
    # The mock writes an unpaced stream's events and its end at once, so the gateway reads them
    # in one go: they reach the client in the message that ends the answer, not in one message
    # followed by an empty end.
    gw = InProcessGateway(gateway_config(upstream.url, f"sqlite:///{tmp_path / 'gw.db'}"))
    bodies: list[tuple[bytes, bool]] = []
    app = gw.gateway.app

    async def observed(scope: Any, receive: Any, send: Any) -> None:
        async def logged(message: Any) -> None:
            if message["type"] == "http.response.body":
                bodies.append((message.get("body", b""), message.get("more_body", False)))
            await send(message)

        await app(scope, receive, logged if scope["type"] == "http" else send)

    gw.app_thread.app = observed
    gw.start()
    try:
        body = {"model": "echo", "messages": MESSAGES, "stream": True}
        with gw.http.stream("POST", "/v1/chat/completions", json=body) as response:
            received = response.read()
        assert response.status_code == 200 and received.endswith(b"data: [DONE]\n\n")
        assert bodies == [(received, False)]
    finally:
        gw.stop()


def test_every_request_gets_a_new_random_uuid4_as_its_request_id(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway()
    body = {"model": "echo", "messages": MESSAGES}
    seen = [gw.http.post("/v1/chat/completions", json=body).headers["x-mirrorgate-request-id"]]
    seen.append(gw.http.post("/v1/chat/completions", json={}).headers["x-mirrorgate-request-id"])
    seen += [new_request_id() for _ in range(1000)]
    assert len(set(seen)) == len(seen)
    for request_id in seen:
        parsed = uuid.UUID(hex=request_id)
        assert parsed.hex == request_id  # 32 lower-case hex digits, no dashes
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
    # Random everywhere but the version and variant bits: every other digit takes many values.
    for position in (*range(12), *range(13, 16), *range(17, 32)):
        assert len({request_id[position] for request_id in seen}) > 8
