"""A failing upstream, as the caller records it: the gateway's error, the transport's cause."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from proxy.config import ModelSpec
from proxy.core import ENDPOINTS, Arm, Status, UpstreamError, UpstreamTimeout
from proxy.upstream import CallContext, ModelCaller, UpstreamClient
from proxy.upstream.errors import UpstreamProtocolError, UpstreamReadTimeout

CHAT = ENDPOINTS["/v1/chat/completions"]
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


async def read_request(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    await reader.readexactly(length)


async def call(
    handler: Handler,
    *,
    stream: bool,
    read: Callable[..., Awaitable[Any]],
    total_timeout_s: float | None = None,
) -> Any:
    """Serve `handler` on a loopback port, call it once through a ModelCaller, and return what
    `read(caller, ctx, attempt)` makes of the attempt."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    spec = ModelSpec(
        provider="openai", base_url=f"http://127.0.0.1:{port}/v1", model="m", timeout_s=0.2,
        total_timeout_s=total_timeout_s,
    )  # fmt: skip
    caller = ModelCaller({"cand": UpstreamClient("cand", spec, env={})}, keep_bodies=False)
    payload = {"model": "bot", "messages": [], "stream": stream}
    ctx = CallContext("req-1", "bot", CHAT, payload, stream, False, [])
    try:
        attempt = await caller.open(ctx, "cand", Arm.PRIMARY)
        return await read(caller, ctx, attempt)
    finally:
        await caller.clients["cand"].aclose()
        server.close()
        await server.wait_closed()


async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        await read_request(reader)
        await reader.read()  # never answers; returns when the client gives up
    finally:
        writer.close()


async def break_mid_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        await read_request(reader)
        writer.write(STREAM_HEAD + b'10\r\ndata: {"a": 1}\n\n\r\n')
        await writer.drain()
    finally:
        writer.close()  # the chunked body never ends


async def drip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A head, then one byte of body every 20 ms, for ever: no single wait is ever long."""
    try:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n")
        while True:
            writer.write(b" ")
            await writer.drain()
            await asyncio.sleep(0.02)
    except ConnectionError:
        pass
    finally:
        writer.close()


async def attempt_of(caller: ModelCaller, ctx: CallContext, attempt: Any) -> Any:
    return attempt


def test_a_stalled_upstream_is_the_gateways_timeout_caused_by_the_transports() -> None:
    attempt = asyncio.run(call(stall, stream=False, read=attempt_of))
    assert (attempt.status, attempt.error_class) == (Status.TIMEOUT, "UpstreamReadTimeout")
    assert type(attempt.error) is UpstreamTimeout and attempt.error.status == 504
    assert attempt.error.message == "upstream model 'cand' timed out"
    assert isinstance(attempt.error.__cause__, UpstreamReadTimeout)
    assert attempt.retryable  # the client path may still fall back


def test_a_drip_fed_answer_ends_at_the_calls_total_deadline() -> None:
    attempt = asyncio.run(call(drip, stream=False, read=attempt_of, total_timeout_s=0.3))
    assert (attempt.status, attempt.error_class) == (Status.TIMEOUT, "UpstreamTotalTimeout")
    assert type(attempt.error) is UpstreamTimeout and attempt.error.status == 504
    assert attempt.error.message == "upstream model 'cand' did not answer within 0.3s"
    assert attempt.response is None and attempt.body is None


def test_a_stream_broken_off_raises_the_gateways_error_from_the_chunks() -> None:
    async def drain(caller: ModelCaller, ctx: CallContext, attempt: Any) -> Any:
        assert attempt.streaming
        received = []
        with pytest.raises(UpstreamError) as caught:
            async for chunk in attempt.chunks():
                received.append(chunk)
        await attempt.response.aclose()
        return received, caught.value

    received, error = asyncio.run(call(break_mid_stream, stream=True, read=drain))
    assert b"".join(received) == b'data: {"a": 1}\n\n'
    assert type(error) is UpstreamError and error.status == 502
    assert error.message == "upstream stream broke: UpstreamProtocolError"
    assert error.error_class == "UpstreamProtocolError"
    assert isinstance(error.__cause__, UpstreamProtocolError)


def test_a_stream_consumed_off_the_client_path_records_the_same_cause() -> None:
    async def consume(caller: ModelCaller, ctx: CallContext, attempt: Any) -> Any:
        await caller.consume(ctx, attempt)
        return attempt

    attempt = asyncio.run(call(break_mid_stream, stream=True, read=consume))
    assert (attempt.status, attempt.error_class) == (Status.CONNECT_ERROR, "UpstreamProtocolError")
    assert type(attempt.error) is UpstreamError
    assert attempt.error.message == "upstream model 'cand' broke off its answer"
