"""UpstreamHTTP's caps on what an upstream sends back (`ResponseLimits`), against raw asyncio
servers on 127.0.0.1 (the helpers of test_http11), on asyncio and on uvloop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from proxy.core import Status, UpstreamError
from proxy.upstream import failure_outcome
from proxy.upstream.errors import (
    UpstreamBodyTooLarge,
    UpstreamHeadersTooLarge,
    UpstreamStreamTooLarge,
    UpstreamStreamTooLong,
    gateway_errors,
)
from proxy.upstream.http11 import ResponseLimits
from tests.proxy.upstream.test_http11 import RawServer, anyio_backend, client_for, ok, raw_server

__all__ = ["anyio_backend"]  # the fixture, run on asyncio and on uvloop
pytestmark = pytest.mark.anyio

SMALL = ResponseLimits(header_bytes=2048, headers=20, body_bytes=4096, stream_bytes=8192)


async def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_read() -> None:
    # The head promises a gigabyte; the server never sends it. The refusal does not wait for it.
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 1000000000\r\n\r\nxx"
    async with (
        raw_server(lambda c, r, b: head) as server,
        client_for(server.url, limits=SMALL) as client,
    ):
        response = await client.send("POST", "/x", [], b"")
        with pytest.raises(UpstreamBodyTooLarge, match="1000000000 bytes"):
            await response.aread()
        await response.aclose()
        assert client.pool.open_connections == 0  # the connection was closed, not pooled


async def test_a_chunked_body_over_the_limit_is_refused_while_it_arrives() -> None:
    chunk = b"1000\r\n" + b"a" * 4096 + b"\r\n"
    answer = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunk * 3 + b"0\r\n\r\n"
    async with (
        raw_server(lambda c, r, b: answer) as server,
        client_for(server.url, limits=SMALL) as client,
    ):
        response = await client.send("POST", "/x", [], b"")
        with pytest.raises(UpstreamBodyTooLarge):
            await response.aread()
        await response.aclose()


async def test_a_body_within_the_limit_is_read_whole() -> None:
    async with (
        raw_server(lambda c, r, b: ok(b"a" * 4096)) as server,
        client_for(server.url, limits=SMALL) as client,
    ):
        response = await client.send("POST", "/x", [], b"")
        assert await response.aread() == b"a" * 4096
        await response.aclose()


@pytest.mark.parametrize(
    "head",
    [
        b"".join(b"x-h%d: 1\r\n" % i for i in range(30)) + b"content-length: 0\r\n\r\n",
        b"x-big: " + b"a" * 4000 + b"\r\ncontent-length: 0\r\n\r\n",
        b"x-big: " + b"a" * 4000,  # a header line that never ends
    ],
    ids=["many", "large", "endless-line"],
)
async def test_a_response_head_over_the_limits_is_refused(head: bytes) -> None:
    answer = b"HTTP/1.1 200 OK\r\n" + head
    async with (
        raw_server(lambda c, r, b: answer) as server,
        client_for(server.url, limits=SMALL) as client,
    ):
        with pytest.raises(UpstreamHeadersTooLarge):
            await client.send("POST", "/x", [], b"")


@contextlib.asynccontextmanager
async def endless_server(gap_s: float | None, piece: bytes) -> AsyncIterator[RawServer]:
    """An upstream that streams `piece` every `gap_s` seconds, for ever (None: once, then it
    stays silent until the client hangs up)."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        with contextlib.suppress(OSError):
            while True:
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
                if gap_s is None:
                    await reader.read()  # silent until the client closes
                    return
                await asyncio.sleep(gap_s)

    async with RawServer(handler) as server:
        yield server


async def read_stream(client: object, path: str = "/x") -> int:
    response = await client.send("POST", path, [], b"")  # type: ignore[attr-defined]
    size = 0
    try:
        async for chunk in response.aiter_raw():
            size += len(chunk)
    finally:
        await response.aclose()
    return size


async def test_a_stream_over_its_byte_limit_is_cut() -> None:
    async with (
        endless_server(0, b"d" * 1000) as server,
        client_for(server.url, limits=SMALL) as client,
    ):
        with pytest.raises(UpstreamStreamTooLarge, match="8192 bytes"):
            await read_stream(client)


@pytest.mark.parametrize("gap_s", [0.01, None], ids=["sending", "silent"])
async def test_a_stream_over_its_duration_is_cut_whether_it_sends_or_not(
    gap_s: float | None,
) -> None:
    limits = ResponseLimits(stream_s=0.2)
    async with (
        endless_server(gap_s, b"d" * 10) as server,
        client_for(server.url, limits=limits) as client,
    ):
        with pytest.raises(UpstreamStreamTooLong, match=r"over 0\.2s"):
            await read_stream(client)


async def test_a_broken_limit_is_recorded_as_an_invalid_response_with_its_class() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 1000000000\r\n\r\n"
    async with (
        raw_server(lambda c, r, b: head) as server,
        client_for(server.url, limits=SMALL) as client,
    ):
        response = await client.send("POST", "/x", [], b"")
        with pytest.raises(UpstreamError) as caught, gateway_errors("prod"):
            await response.aread()
        await response.aclose()
    assert caught.value.status == 502 and "model 'prod' refused" in caught.value.message
    assert failure_outcome(caught.value) == (Status.INVALID_RESPONSE, "UpstreamBodyTooLarge")
