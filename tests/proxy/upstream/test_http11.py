"""UpstreamHTTP against real servers on 127.0.0.1: uvicorn for well-behaved HTTP, raw asyncio
servers for everything an upstream can get wrong. Every test runs on asyncio and on uvloop."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from proxy.upstream.errors import (
    UpstreamConnectError,
    UpstreamConnectTimeout,
    UpstreamPoolTimeout,
    UpstreamProtocolError,
    UpstreamReadTimeout,
    UpstreamTransportTimeout,
    UpstreamWriteTimeout,
)
from proxy.upstream.http11 import READ_BUFFER_BYTES, UpstreamHTTP
from proxy.upstream.pool import ConnectionPool
from tests.conftest import require_service

pytestmark = pytest.mark.anyio

DEADLINE_S = 10.0
JSON_BODY = b'{"id":"chatcmpl-1","object":"chat.completion","choices":[' + b"0" * 540 + b"]}"
MB = 1 << 20


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {}), id="asyncio"),
        pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


# --- a well-behaved upstream: uvicorn (httptools) in a background thread ----------------------


class EchoApp:
    """Raw ASGI: /v1/json → a 600-byte JSON, /v1/echo → the request body back (content-length),
    /v1/echo-chunked → the body back in 1 MB chunks. Records each request's client address
    under its `x-test-id` header, so a test can count the connections it used."""

    def __init__(self) -> None:
        self.clients: dict[bytes, set[tuple[str, int]]] = defaultdict(set)
        self._lock = threading.Lock()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        test_id = dict(scope["headers"]).get(b"x-test-id", b"")
        with self._lock:
            self.clients[test_id].add(tuple(scope["client"]))
        parts: list[bytes] = []
        more = True
        while more:
            message = await receive()
            parts.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(parts)
        path = scope["path"]
        if path == "/v1/echo-chunked":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for start in range(0, len(body), MB):
                chunk = body[start : start + MB]
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return
        out, status = {
            "/v1/json": (JSON_BODY, 200),
            "/v1/echo": (body, 200),
        }.get(path, (b"not found", 404))
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(out))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": out})

    def connections(self, test_id: bytes) -> int:
        with self._lock:
            return len(self.clients[test_id])


class AsgiServer:
    def __init__(self, app: EchoApp, port: int) -> None:
        self.app = app
        self.url = f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def asgi_server() -> Iterator[AsgiServer]:
    app = EchoApp()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        app, loop="uvloop", http="httptools", ws="none", lifespan="off",
        access_log=False, log_level="warning", log_config=None,
    )  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + DEADLINE_S
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield AsgiServer(app, sock.getsockname()[1])
    finally:
        server.should_exit = True
        thread.join(DEADLINE_S)
        sock.close()


@pytest.fixture
def test_id(request: pytest.FixtureRequest) -> bytes:
    """Tags this test's requests (x-test-id) on the shared uvicorn server."""
    nodeid: str = request.node.nodeid
    return nodeid.encode()


def make_client(url: str, **options: Any) -> UpstreamHTTP:
    options.setdefault("connect_timeout_s", DEADLINE_S)
    options.setdefault("read_timeout_s", DEADLINE_S)
    return UpstreamHTTP(url, **options)


@contextlib.asynccontextmanager
async def client_for(url: str, **options: Any) -> AsyncIterator[UpstreamHTTP]:
    client = make_client(url, **options)
    try:
        yield client
    finally:
        await client.aclose()


async def get(client: UpstreamHTTP, path: str, test_id: bytes = b"", body: bytes = b"") -> bytes:
    response = await client.send("POST", path, [(b"x-test-id", test_id)], body)
    try:
        assert response.status_code == 200
        return await response.aread()
    finally:
        await response.aclose()


async def wait_for(predicate: Callable[[], object], what: str) -> None:
    """Poll `predicate` until it holds; fail after DEADLINE_S."""
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)


# --- misbehaving upstreams: raw asyncio servers ------------------------------------------------

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class RawServer:
    """`handler(reader, writer)` per connection on 127.0.0.1:0; counts connections and requests.
    Every connection is closed and every handler finished on exit."""

    def __init__(self, handler: Handler, ssl_context: ssl.SSLContext | None = None) -> None:
        self._handler = handler
        self._ssl = ssl_context
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []
        self.closed_by_client = asyncio.Event()
        self._writers: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def url(self) -> str:
        scheme = "https" if self._ssl else "http"
        return f"{scheme}://127.0.0.1:{self.port}/v1"

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._ssl)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        for writer in self._writers:
            writer.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.append(writer)
        self.connections += 1
        try:
            await self._handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError, ssl.SSLError):
            pass  # the client went away, or teardown cancelled us
        finally:
            writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
        """One request (head, body), or None when the client closed the connection."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            self.closed_by_client.set()
            return None
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        body = await reader.readexactly(length)
        self.requests.append((head, body))
        return head, body


def serve_forever(
    server_ref: list[RawServer], respond: Callable[[int, int, bytes], bytes | None]
) -> Handler:
    """A handler answering each request with `respond(connection_no, request_no_on_it, body)`;
    None closes the connection without answering."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server = server_ref[0]
        connection_no = server.connections
        request_no = 0
        while (request := await server.read_request(reader)) is not None:
            request_no += 1
            answer = respond(connection_no, request_no, request[1])
            if answer is None:
                return
            writer.write(answer)
            await writer.drain()

    return handler


@contextlib.asynccontextmanager
async def raw_server(
    respond: Callable[[int, int, bytes], bytes | None],
) -> AsyncIterator[RawServer]:
    ref: list[RawServer] = []
    async with RawServer(serve_forever(ref, respond)) as server:
        ref.append(server)
        yield server


def ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)


# --- the basics ---------------------------------------------------------------------------------


async def test_request_wire_format_and_raw_response_headers() -> None:
    answer = b"HTTP/1.1 201 Created\r\nX-Mixed-Case: A\r\nset-thing: 1\r\nset-thing: 2\r\n"
    answer += b"Content-Length: 2\r\n\r\nhi"
    async with raw_server(lambda c, r, b: answer) as server, client_for(server.url) as client:
        headers = [(b"Authorization", b"Bearer k"), (b"accept-encoding", b"identity")]
        response = await client.send("POST", "/chat/completions?x=1", headers, b'{"a":1}')
        assert response.status_code == 201
        assert response.headers == [
            (b"X-Mixed-Case", b"A"), (b"set-thing", b"1"), (b"set-thing", b"2"),
            (b"Content-Length", b"2"),
        ]  # fmt: skip
        assert await response.aread() == b"hi"
        await response.aclose()
    head, body = server.requests[0]
    assert head == (
        b"POST /v1/chat/completions?x=1 HTTP/1.1\r\nhost: 127.0.0.1:%d\r\n"
        b"Authorization: Bearer k\r\naccept-encoding: identity\r\ncontent-length: 7\r\n\r\n"
        % server.port
    )
    assert body == b'{"a":1}'


async def test_json_from_uvicorn(asgi_server: AsgiServer) -> None:
    async with client_for(asgi_server.url + "/v1/") as client:
        assert await get(client, "/json") == JSON_BODY
        response = await client.send("GET", "/missing", [], b"")
        assert response.status_code == 404
        assert await response.aread() == b"not found"
        await response.aclose()


async def test_thousand_sequential_requests_use_one_connection(
    asgi_server: AsgiServer, test_id: bytes
) -> None:
    async with client_for(asgi_server.url + "/v1") as client:
        for _ in range(1000):
            assert await get(client, "/json", test_id) == JSON_BODY
        assert client.pool.open_connections == 1
    assert asgi_server.app.connections(test_id) == 1


async def test_concurrency_never_opens_more_than_max_connections(
    asgi_server: AsgiServer, test_id: bytes
) -> None:
    async with client_for(asgi_server.url + "/v1", max_connections=8) as client:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(get(client, "/echo", test_id, b"%d" % i)) for i in range(50)]
        assert [task.result() for task in tasks] == [b"%d" % i for i in range(50)]
        assert client.pool.open_connections == 8
    assert asgi_server.app.connections(test_id) == 8


async def test_ten_megabyte_bodies_both_ways(asgi_server: AsgiServer, test_id: bytes) -> None:
    body = bytes(range(256)) * (10 * MB // 256)
    async with client_for(asgi_server.url + "/v1", max_connections=1) as client:
        assert await get(client, "/echo", test_id, body) == body
        response = await client.send("POST", "/echo-chunked", [], body)
        received = [chunk async for chunk in response.aiter_raw()]
        await response.aclose()
        assert b"".join(received) == body
        assert client.pool.idle_connections == 1
    assert asgi_server.app.connections(test_id) == 1


# --- framing ------------------------------------------------------------------------------------


async def test_chunked_with_odd_sizes_extensions_and_trailers() -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"1\r\na\r\n"
        b"1F;name=value\r\n" + b"b" * 31 + b"\r\n"
        b"00000003\r\nccc\r\n"
        b"1000\r\n" + b"d" * 4096 + b"\r\n"
        b"0\r\nX-Trailer: t\r\n\r\n"
    )
    expected = b"a" + b"b" * 31 + b"ccc" + b"d" * 4096
    async with raw_server(lambda c, r, b: chunked) as server, client_for(server.url) as client:
        assert await get(client, "/x") == expected
        assert await get(client, "/x") == expected
    assert server.connections == 1


async def test_read_until_close_body() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.0 200 OK\r\n\r\nuntil")
        await writer.drain()
        writer.write(b"-close")
        writer.close()

    async with RawServer(handler) as server, client_for(server.url) as client:
        assert await get(client, "/x") == b"until-close"
        assert await get(client, "/x") == b"until-close"
        assert client.pool.idle_connections == 0
    assert server.connections == 2


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(ok(b"bye", b"connection: close\r\n"), id="length"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n"
            b"3\r\nbye\r\n0\r\n\r\n",
            id="chunked",
        ),
    ],
)
async def test_connection_close_response_is_not_reused(answer: bytes) -> None:
    async with raw_server(lambda c, r, b: answer) as server, client_for(server.url) as client:
        assert await get(client, "/x") == b"bye"
        assert await get(client, "/x") == b"bye"
    assert server.connections == 2


async def test_interim_responses_are_skipped() -> None:
    answer = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n" + ok(b"final")
    )
    async with raw_server(lambda c, r, b: answer) as server, client_for(server.url) as client:
        response = await client.send("POST", "/x", [], b"")
        assert response.status_code == 200
        assert response.headers == [(b"content-length", b"5")]
        assert await response.aread() == b"final"
        await response.aclose()
        assert await get(client, "/x") == b"final"
    assert server.connections == 1


async def test_junk_after_a_complete_response_retires_the_connection() -> None:
    answer = ok(b"fine") + b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\njunk"
    async with raw_server(lambda c, r, b: answer) as server, client_for(server.url) as client:
        assert await get(client, "/x") == b"fine"
        assert await get(client, "/x") == b"fine"
    assert server.connections == 2


async def test_bytes_on_an_idle_connection_retire_it() -> None:
    sent_junk = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(ok(b"first"))
        await writer.drain()
        await sent_junk.wait()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\nunasked")
        await server.read_request(reader)  # until the client closes

    async with RawServer(handler) as server, client_for(server.url) as client:
        assert await get(client, "/x") == b"first"
        [(_, idle)] = client.pool._idle  # white-box: the one pooled connection
        sent_junk.set()
        await wait_for(lambda: not idle.is_usable(), "the idle connection to be retired")
        async with asyncio.timeout(DEADLINE_S):
            await server.closed_by_client.wait()


async def test_switching_protocols_is_a_protocol_error() -> None:
    answer = b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: x\r\n\r\n"
    async with raw_server(lambda c, r, b: answer) as server, client_for(server.url) as client:
        with pytest.raises(UpstreamProtocolError, match="switched protocols"):
            await client.send("POST", "/x", [], b"")
        assert client.pool.open_connections == 0


async def test_body_is_read_once() -> None:
    async with raw_server(lambda c, r, b: ok(b)) as server, client_for(server.url) as client:
        response = await client.send("POST", "/x", [], b"body")
        assert await response.aread() == b"body"
        assert await response.aread() == b"body"
        with pytest.raises(RuntimeError):
            await anext(response.aiter_raw())
        await response.aclose()
        response = await client.send("POST", "/x", [], b"body")
        assert [chunk async for chunk in response.aiter_raw()] == [b"body"]
        assert [chunk async for chunk in response.aiter_raw()] == []
        with pytest.raises(RuntimeError):
            await response.aread()
        await response.aclose()
    assert server.connections == 1


# --- broken upstreams ---------------------------------------------------------------------------


async def test_garbage_status_line_is_a_protocol_error() -> None:
    answer = b"HTTTP/9 what\r\n\r\n"
    async with raw_server(lambda c, r, b: answer) as server, client_for(server.url) as client:
        with pytest.raises(UpstreamProtocolError):
            await client.send("POST", "/x", [], b"")
        assert client.pool.open_connections == 0


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly-ten!!", id="length"),
        pytest.param(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nab", id="chunked"),
    ],
)
async def test_close_mid_body_is_a_protocol_error(answer: bytes) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(answer)
        writer.close()

    async with RawServer(handler) as server, client_for(server.url) as client:
        response = await client.send("POST", "/x", [], b"")
        with pytest.raises(UpstreamProtocolError, match="peer closed connection without sending"):
            await response.aread()
        await response.aclose()
        assert client.pool.open_connections == 0


async def test_close_mid_head_is_a_protocol_error() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-le")
        writer.close()

    async with RawServer(handler) as server, client_for(server.url) as client:
        with pytest.raises(UpstreamProtocolError):
            await client.send("POST", "/x", [], b"")


async def test_unanswered_request_times_out_and_frees_the_slot() -> None:
    never = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        await never.wait()  # the upstream stalls

    async with (
        RawServer(handler) as server,
        client_for(server.url, read_timeout_s=0.05, max_connections=1) as client,
    ):
        with pytest.raises(UpstreamReadTimeout) as caught:
            await client.send("POST", "/x", [], b"")
        assert isinstance(caught.value, UpstreamTransportTimeout)
        assert caught.value.phase == "read"
        assert client.pool.open_connections == 0


async def test_stall_between_chunks_times_out() -> None:
    release = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await writer.drain()
        await release.wait()  # never set

    async with RawServer(handler) as server, client_for(server.url, read_timeout_s=0.05) as client:
        response = await client.send("POST", "/x", [], b"")
        chunks = response.aiter_raw()
        assert await anext(chunks) == b"first"
        with pytest.raises(UpstreamReadTimeout):
            await anext(chunks)
        await response.aclose()
        assert client.pool.open_connections == 0


async def test_port_nobody_listens_on_is_a_connect_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with client_for(f"http://127.0.0.1:{port}") as client:
        with pytest.raises(UpstreamConnectError):
            await client.send("GET", "/", [], b"")
        assert client.pool.open_connections == 0


async def test_connect_timeout_when_the_accept_queue_is_full() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers: list[socket.socket] = []
    try:
        while True:  # fill the accept queue until the kernel starts dropping SYNs
            filler = socket.socket()
            fillers.append(filler)
            filler.settimeout(0.2)
            try:
                filler.connect(("127.0.0.1", port))
            except TimeoutError:
                break
        async with client_for(f"http://127.0.0.1:{port}", connect_timeout_s=0.05) as client:
            with pytest.raises(UpstreamConnectTimeout) as caught:
                await client.send("GET", "/", [], b"")
            assert caught.value.phase == "connect"
            assert client.pool.open_connections == 0
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


# --- the keep-alive race ------------------------------------------------------------------------


async def test_stale_reused_connection_is_retried_once_on_a_fresh_one() -> None:
    # Each connection answers its first request, then closes on the next without answering:
    # exactly what a reused connection looks like when the upstream closed it as idle.
    def respond(connection: int, request: int, body: bytes) -> bytes | None:
        return ok(body) if request == 1 else None

    async with raw_server(respond) as server, client_for(server.url) as client:
        assert await get(client, "/x", body=b"one") == b"one"
        assert await get(client, "/x", body=b"two") == b"two"
    assert server.connections == 2
    assert [body for _, body in server.requests] == [b"one", b"two", b"two"]


async def test_stale_retry_happens_only_once() -> None:
    def respond(connection: int, request: int, body: bytes) -> bytes | None:
        return ok(body) if connection == 1 and request == 1 else None

    async with raw_server(respond) as server, client_for(server.url) as client:
        assert await get(client, "/x", body=b"one") == b"one"
        with pytest.raises(UpstreamConnectError):
            await get(client, "/x", body=b"two")
        assert client.pool.open_connections == 0
    assert server.connections == 2


async def test_fresh_connection_closed_without_answer_is_not_retried() -> None:
    async with raw_server(lambda c, r, b: None) as server, client_for(server.url) as client:
        with pytest.raises(UpstreamConnectError):
            await client.send("POST", "/x", [], b"body")
    assert server.connections == 1


async def test_upstream_closing_idle_connections_is_harmless() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await server.read_request(reader)
        assert request is not None
        writer.write(ok(request[1]))  # keep-alive response, then close anyway
        await writer.drain()

    async with RawServer(handler) as server, client_for(server.url) as client:
        for i in range(5):
            assert await get(client, "/x", body=b"%d" % i) == b"%d" % i
    assert server.connections == 5


# --- streaming, flow control, cancellation ------------------------------------------------------


async def test_aiter_raw_yields_each_chunk_as_it_arrives() -> None:
    first_seen = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        writer.write(b"6\r\nchunk1\r\n")
        await writer.drain()
        await first_seen.wait()  # the second chunk only exists once the first was consumed
        writer.write(b"6\r\nchunk2\r\n0\r\n\r\n")
        await writer.drain()

    async with RawServer(handler) as server, client_for(server.url) as client:
        response = await client.send("POST", "/x", [], b"")
        chunks = response.aiter_raw()
        async with asyncio.timeout(DEADLINE_S):
            assert await anext(chunks) == b"chunk1"
        first_seen.set()
        assert [chunk async for chunk in chunks] == [b"chunk2"]
        await response.aclose()
        assert client.pool.idle_connections == 1


async def test_received_all_says_the_last_bytes_were_handed_out() -> None:
    # A forwarder that stops at `received_all` sends the last bytes with its own end; the
    # connection still goes back to the pool, although the empty last item was never read.
    first_seen = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n6\r\nchunk1\r\n")
        await writer.drain()
        await first_seen.wait()
        writer.write(b"6\r\nchunk2\r\n0\r\n\r\n")  # the last chunk and the end, in one write
        await writer.drain()

    async with RawServer(handler) as server, client_for(server.url) as client:
        response = await client.send("POST", "/x", [], b"")
        chunks = response.aiter_raw()
        async with asyncio.timeout(DEADLINE_S):
            assert await anext(chunks) == b"chunk1"
            assert not response.received_all  # the end has not arrived
            first_seen.set()
            assert await anext(chunks) == b"chunk2"
        assert response.received_all
        await response.aclose()
        assert client.pool.idle_connections == 1


async def test_cancelled_stream_closes_its_connection_and_the_pool_recovers() -> None:
    first_seen = asyncio.Event()
    never = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await server.read_request(reader)
        assert request is not None
        if request[1] == b"ok":
            writer.write(ok(b"recovered"))
            await writer.drain()
            return
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await writer.drain()
        await server.read_request(reader)  # returns at EOF: the client closed the connection

    async def consume() -> None:
        response = await client.send("POST", "/x", [], b"stream")
        try:
            async for _ in response.aiter_raw():
                first_seen.set()
                await never.wait()
        finally:
            await response.aclose()

    async with RawServer(handler) as server, client_for(server.url, max_connections=1) as client:
        async with asyncio.TaskGroup() as group:
            task = group.create_task(consume())
            async with asyncio.timeout(DEADLINE_S):
                await first_seen.wait()
            task.cancel()
        async with asyncio.timeout(DEADLINE_S):
            await server.closed_by_client.wait()
        assert client.pool.open_connections == 0
        assert await get(client, "/x", body=b"ok") == b"recovered"
    assert server.connections == 2


async def test_cancelled_aread_closes_its_connection() -> None:
    partial_sent = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
        await writer.drain()
        partial_sent.set()
        await server.read_request(reader)  # returns at EOF: the client closed the connection

    async def read_all() -> None:
        response = await client.send("POST", "/x", [], b"")
        try:
            await response.aread()
        finally:
            await response.aclose()

    async with RawServer(handler) as server, client_for(server.url) as client:
        async with asyncio.TaskGroup() as group:
            task = group.create_task(read_all())
            async with asyncio.timeout(DEADLINE_S):
                await partial_sent.wait()
            task.cancel()
        async with asyncio.timeout(DEADLINE_S):
            await server.closed_by_client.wait()
        assert task.cancelled()
        assert client.pool.open_connections == 0


async def test_cancel_while_waiting_for_the_head_frees_the_slot() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await server.read_request(reader)
        if request is not None and request[1] == b"ok":
            writer.write(ok(b"fine"))
            await writer.drain()
            return
        await server.read_request(reader)  # never answers; returns when the client closes

    async with RawServer(handler) as server, client_for(server.url, max_connections=1) as client:
        async with asyncio.TaskGroup() as group:
            task = group.create_task(client.send("POST", "/x", [], b"hang"))
            await wait_for(lambda: len(server.requests) == 1, "the request to arrive")
            task.cancel()
        async with asyncio.timeout(DEADLINE_S):
            await server.closed_by_client.wait()
        assert client.pool.open_connections == 0
        assert await get(client, "/x", body=b"ok") == b"fine"


async def test_slow_consumer_pauses_reading_with_a_bounded_buffer() -> None:
    size = 32 * MB
    body_written = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size)
        piece = b"x" * MB
        for _ in range(size // MB):
            writer.write(piece)
            await writer.drain()
        body_written.set()

    async with RawServer(handler) as server, client_for(server.url) as client:
        response = await client.send("GET", "/x", [], b"")
        chunks = response.aiter_raw()
        received = len(await anext(chunks))
        conn = response._conn  # white-box: the buffer is not part of the API
        assert conn is not None
        await wait_for(lambda: conn._reading_paused, "reading to pause")
        assert conn._buffered <= READ_BUFFER_BYTES + MB
        assert not body_written.is_set()  # the upstream is held back, not buffered in full
        async for chunk in chunks:
            received += len(chunk)
        await response.aclose()
        assert received == size
        assert client.pool.idle_connections == 1


async def test_closing_an_unread_response_closes_its_connection() -> None:
    def respond(connection: int, request: int, body: bytes) -> bytes:
        return ok(b"x" * 4 * MB) if body == b"big" else ok(b"small")

    async with raw_server(respond) as server, client_for(server.url) as client:
        response = await client.send("POST", "/x", [], b"big")
        await response.aclose()  # 4 MB still on the way: never pooled half-read
        assert client.pool.open_connections == 0
        assert await get(client, "/x", body=b"small") == b"small"
    assert server.connections == 2


async def test_early_answer_stops_the_upload_and_retires_the_connection() -> None:
    size = 32 * MB
    answered = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")  # the head only: the body is refused unread
        writer.write(b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 8\r\n\r\ntoo big!")
        await writer.drain()
        await answered.wait()
        while await reader.read(MB):
            pass  # drain what was sent until the client closes
        server.closed_by_client.set()

    async with RawServer(handler) as server, client_for(server.url) as client:
        response = await client.send("POST", "/x", [], b"u" * size)
        assert response.status_code == 413
        assert await response.aread() == b"too big!"
        await response.aclose()
        answered.set()
        async with asyncio.timeout(DEADLINE_S):
            await server.closed_by_client.wait()
        assert client.pool.open_connections == 0


async def test_upstream_not_reading_the_body_is_a_write_timeout() -> None:
    never = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await never.wait()  # reads nothing: the client's writes back up

    async with RawServer(handler) as server, client_for(server.url, read_timeout_s=0.05) as client:
        with pytest.raises(UpstreamWriteTimeout) as caught:
            await client.send("POST", "/x", [], b"u" * 32 * MB)
        assert caught.value.phase == "write"
        assert client.pool.open_connections == 0


async def test_pool_wait_is_bounded_by_the_read_timeout() -> None:
    def respond(connection: int, request: int, body: bytes) -> bytes:
        return ok(body)

    async with (
        raw_server(respond) as server,
        client_for(server.url, max_connections=1, read_timeout_s=0.05) as client,
    ):
        held = await client.send("POST", "/x", [], b"held")  # holds the only connection
        with pytest.raises(UpstreamPoolTimeout):
            await client.send("POST", "/x", [], b"waits")
        assert await held.aread() == b"held"  # reading it to the end frees the connection
        await held.aclose()
        assert await get(client, "/x", body=b"next") == b"next"
    assert server.connections == 1


async def test_waiters_are_served_in_arrival_order() -> None:
    async with (
        raw_server(lambda c, r, b: ok(b)) as server,
        client_for(server.url, max_connections=1) as client,
    ):
        held = await client.send("POST", "/x", [], b"held")
        order: list[int] = []

        async def waiter(i: int) -> None:
            await get(client, "/x", body=b"%d" % i)
            order.append(i)

        async with asyncio.TaskGroup() as group:
            for i in range(5):
                group.create_task(waiter(i))
            await wait_for(lambda: len(client.pool._waiters) == 5, "five waiters")
            await held.aclose()
        assert order == [0, 1, 2, 3, 4]


# --- TLS ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    require_service("the openssl CLI", openssl is not None, "it makes a self-signed certificate")
    assert openssl is not None
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
            "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_https_round_trip_and_untrusted_certificate(tls_files: tuple[Path, Path]) -> None:
    cert, key = tls_files
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    ref: list[RawServer] = []
    async with RawServer(serve_forever(ref, lambda c, r, b: ok(b)), server_context) as server:
        ref.append(server)
        trusting = ssl.create_default_context(cafile=str(cert))
        async with client_for(server.url, ssl_context=trusting) as client:
            assert await get(client, "/x", body=b"secret") == b"secret"
            assert await get(client, "/x", body=b"again") == b"again"
        async with client_for(server.url, ssl_context=ssl.create_default_context()) as client:
            with pytest.raises(UpstreamConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await client.send("POST", "/x", [], b"")
    assert server.connections == 1  # both requests on one connection; the failed handshake
    # never reached the handler


# --- misuse -------------------------------------------------------------------------------------


async def test_crlf_in_a_header_is_refused_before_sending() -> None:
    async with raw_server(lambda c, r, b: ok(b)) as server, client_for(server.url) as client:
        with pytest.raises(ValueError, match="CR or LF"):
            await client.send("POST", "/x", [(b"x-a", b"1\r\nx-injected: 1")], b"")
        with pytest.raises(ValueError, match="CR or LF"):
            await client.send("POST", "/x HTTP/1.1\nx: y", [], b"")
        assert client.pool.open_connections == 0
    assert server.connections == 0


@pytest.mark.parametrize(
    "url", ["ftp://example.com", "http://", "http://h:99999", "http://h/v1?x=1", "example.com"]
)
def test_bad_base_url_is_refused(url: str) -> None:
    with pytest.raises(ValueError):
        make_client(url)


# --- the pool on its own (fake connections, fake clock) -----------------------------------------


class FakeConnection:
    def __init__(self, name: str) -> None:
        self.name = name
        self.usable = True
        self.closed = False

    def is_usable(self) -> bool:
        return self.usable and not self.closed

    def close(self) -> None:
        self.closed = True


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_pool_reuses_newest_first_and_skips_unusable() -> None:
    pool: ConnectionPool[FakeConnection] = ConnectionPool(4, 30.0, FakeClock())
    a, b, c = FakeConnection("a"), FakeConnection("b"), FakeConnection("c")
    for _ in range(3):
        assert await pool.acquire(1.0) is None
    for conn in (a, b, c):
        pool.release(conn)
    c.usable = False  # the upstream closed it while idle
    assert await pool.acquire(1.0) is b
    assert c.closed
    assert pool.open_connections == 2


async def test_pool_expires_idle_connections() -> None:
    clock = FakeClock()
    pool: ConnectionPool[FakeConnection] = ConnectionPool(4, 30.0, clock)
    old, new = FakeConnection("old"), FakeConnection("new")
    assert await pool.acquire(1.0) is None
    assert await pool.acquire(1.0) is None
    pool.release(old)
    clock.now += 31
    pool.release(new)  # evicts the expired one at the bottom, in passing
    assert old.closed
    assert pool.open_connections == 1
    clock.now += 31
    assert await pool.acquire(1.0) is None  # `new` expired too: a fresh slot instead
    assert new.closed
    assert pool.open_connections == 1


async def test_pool_hands_connections_and_slots_to_waiters_in_order() -> None:
    pool: ConnectionPool[FakeConnection] = ConnectionPool(1, 30.0, FakeClock())
    assert await pool.acquire(1.0) is None
    async with asyncio.TaskGroup() as group:
        first = group.create_task(pool.acquire(DEADLINE_S))
        second = group.create_task(pool.acquire(DEADLINE_S))
        await wait_for(lambda: len(pool._waiters) == 2, "two waiters")
        conn = FakeConnection("a")
        pool.release(conn)  # straight to the first waiter
        assert await first is conn
        pool.discard()  # its slot goes to the second: "open a new one"
        assert await second is None
    assert pool.open_connections == 1


async def test_pool_waiter_cancelled_after_the_hand_over_passes_it_on() -> None:
    pool: ConnectionPool[FakeConnection] = ConnectionPool(1, 30.0, FakeClock())
    assert await pool.acquire(1.0) is None
    async with asyncio.TaskGroup() as group:
        first = group.create_task(pool.acquire(DEADLINE_S))
        second = group.create_task(pool.acquire(DEADLINE_S))
        await wait_for(lambda: len(pool._waiters) == 2, "two waiters")
        conn = FakeConnection("a")
        pool.release(conn)
        first.cancel()  # cancelled after the connection was handed over, before it ran
        assert await second is conn
    assert first.cancelled()
    assert pool.open_connections == 1


async def test_pool_wait_times_out_and_close_fails_waiters() -> None:
    pool: ConnectionPool[FakeConnection] = ConnectionPool(1, 30.0, FakeClock())
    assert await pool.acquire(1.0) is None
    with pytest.raises(TimeoutError):
        await pool.acquire(0.01)

    async def wait_in_vain() -> None:
        with pytest.raises(RuntimeError):
            await pool.acquire(DEADLINE_S)

    async with asyncio.TaskGroup() as group:
        group.create_task(wait_in_vain())
        await wait_for(lambda: any(not w.done() for w in pool._waiters), "a waiter")
        pool.close()
    conn = FakeConnection("late")
    pool.release(conn)  # released after close: closed, not pooled
    assert conn.closed
    assert pool.open_connections == 0
    with pytest.raises(RuntimeError):
        await pool.acquire(1.0)
