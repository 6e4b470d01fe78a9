"""A call planned before a configuration reload finishes on the model table it was planned with:
the caller's table is swapped whole, and the context and the attempt keep their own."""

from __future__ import annotations

import asyncio

import orjson

from proxy.config import ModelSpec
from proxy.core import ENDPOINTS, Arm, Status
from proxy.upstream import CallContext, ModelCaller, UpstreamClient
from tests.proxy.upstream.test_caller_failures import read_request

CHAT = ENDPOINTS["/v1/chat/completions"]
ANSWER = orjson.dumps(
    {"id": "x", "object": "chat.completion", "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
)  # fmt: skip


def test_a_call_in_flight_keeps_its_models_across_a_swap() -> None:
    async def scenario() -> None:
        arrived, release = asyncio.Event(), asyncio.Event()

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            arrived.set()
            await release.wait()
            head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
            writer.write(head + str(len(ANSWER)).encode() + b"\r\n\r\n" + ANSWER)
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        url = f"http://127.0.0.1:{port}/v1"
        old = UpstreamClient("m", ModelSpec(provider="openai", base_url=url, model="m"), env={})
        new = UpstreamClient("n", ModelSpec(provider="openai", base_url=url, model="n"), env={})
        caller = ModelCaller({"m": old, "fb": old}, keep_bodies=False)
        payload = {"model": "bot", "messages": []}
        ctx = CallContext("r", "bot", CHAT, payload, False, False, [], models=caller.clients)
        try:
            call = asyncio.ensure_future(caller.open(ctx, "m", Arm.PRIMARY))
            await asyncio.wait_for(arrived.wait(), 10)
            caller.clients = {"n": new}  # the reload: "m" and "fb" are gone
            release.set()
            attempt = await asyncio.wait_for(call, 10)
            assert attempt.status is Status.OK and attempt.client is old
            record = caller.record(ctx, attempt, 200, 0.0, own_clock=True)
            assert record.target == "m"
            # Its fallback still comes from the table it was planned with; a new call does not.
            assert caller.prepare(ctx, "fb", Arm.FALLBACK).client is old
            fresh = CallContext("s", "bot", CHAT, dict(payload), False, False, [])
            assert caller.prepare(fresh, "n", Arm.PRIMARY).client is new
        finally:
            await old.aclose()
            await new.aclose()
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())
