"""A lean keep-alive HTTP/1.1 client for one upstream origin, on asyncio protocols and httptools.

`UpstreamHTTP` replaces httpx on the gateway's hot path: a request costs one `transport.write`, a
future per wait (each connection's one timeout timer is moved, not re-created), O(1) pool work and
llhttp (the C parser uvicorn uses) for the response. There is no URL model, no header model, no
redirects, no decompression, no cookies: the gateway sends bytes it built and relays the bytes it
gets (it asks for `accept-encoding: identity`).

    client = UpstreamHTTP("http://127.0.0.1:9999/v1", connect_timeout_s=5, read_timeout_s=60)
    response = await client.send("POST", "/chat/completions", headers, body)
    try:
        async for chunk in response.aiter_raw():   # or: body = await response.aread()
            ...
    finally:
        await response.aclose()

Errors: every failure of an exchange raises an `UpstreamTransportError` (the tree is drawn in
`errors.py`, which is also where they become the gateway's errors).

Limits (`ResponseLimits`): a response head over `header_bytes` or `headers` lines, a body read
with `aread` over `body_bytes` (refused before a byte is read when its content-length says so),
or a body read with `aiter_raw` over `stream_bytes` or still going `stream_s` after the first
read, raise an `UpstreamLimitExceeded` and close the connection.

Misuse raises built-ins instead: `ValueError` for a bad base URL or a request line or header with
CR/LF in it, `RuntimeError` for a closed client or a body read twice.

Connection reuse rule. A connection goes back to the pool only when its response was received
completely, the upstream allowed keep-alive, and nothing else went wrong; a timeout, an error, a
cancelled read or an early `aclose` closes it. A *reused* connection that closes before a single
response byte arrived is the keep-alive race (the upstream closed it as idle while our request was
on the wire): an upstream that closes an idle connection has not read the request, so the request
is sent once more, on a freshly opened connection, even a POST. This applies only to reused
connections with zero response bytes; a fresh connection failing the same way raises
`UpstreamConnectError`. (An upstream that crashed after reading a request but before writing one
byte would see it twice; that is the price every keep-alive client pays for this retry.)
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

from httptools import HttpParserError, HttpParserUpgrade, HttpResponseParser

from .errors import (
    UpstreamBodyTooLarge,
    UpstreamConnectError,
    UpstreamConnectTimeout,
    UpstreamHeadersTooLarge,
    UpstreamLimitExceeded,
    UpstreamPoolTimeout,
    UpstreamProtocolError,
    UpstreamReadTimeout,
    UpstreamStreamTooLarge,
    UpstreamStreamTooLong,
    UpstreamTransportError,
    UpstreamTransportTimeout,
    UpstreamWriteTimeout,
)
from .pool import ConnectionPool

__all__ = ["ResponseLimits", "UpstreamHTTP", "UpstreamResponse"]

READ_BUFFER_BYTES = 1 << 20
"""Body bytes buffered for a slow `aiter_raw` consumer before the socket stops being read."""
_SMALL_BODY = 64 * 1024
"""Bodies up to this size are sent in the same write as the request head."""
_WRITE_PIECE = 256 * 1024
"""Larger bodies are written in pieces of this size, waiting while the transport is paused."""


@dataclass(frozen=True, slots=True)
class ResponseLimits:
    """How much of a response the client accepts (see the module docstring)."""

    header_bytes: int = 64 * 1024
    """Status line plus header lines of one response head."""
    headers: int = 100
    """Header lines in one response head."""
    body_bytes: int = 64 * 1024 * 1024
    """A body read whole (`aread`)."""
    stream_bytes: int = 64 * 1024 * 1024
    """A body read as it comes (`aiter_raw`)."""
    stream_s: float = 3600.0
    """Seconds from the first `aiter_raw` read to the end of the body."""


class _StaleConnectionError(UpstreamConnectError):
    """A reused connection closed before any response byte: the request may be sent again."""


class _UnexpectedMessageError(Exception):
    """Raised inside a parser callback to stop parsing bytes nobody asked for."""


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection; the state of at most one exchange at a time.

    Parser callbacks never raise into the event loop: failures are stored in `_error` and the
    coroutine that owns the exchange (the one waiting in `_wait`) raises them.
    """

    __slots__ = (
        "_body_bytes",
        "_buffered",
        "_chunks",
        "_closed",
        "_complete",
        "_deadline",
        "_error",
        "_got_bytes",
        "_head_bytes",
        "_head_done",
        "_headers",
        "_in_exchange",
        "_interim",
        "_keep_alive",
        "_limits",
        "_loop",
        "_must_close",
        "_needs_eof",
        "_parser",
        "_read_all",
        "_reading_paused",
        "_requests",
        "_status",
        "_stream_deadline",
        "_timeout_error",
        "_timeout_s",
        "_timer",
        "_transport",
        "_waiter",
        "_writing_paused",
    )

    def __init__(
        self, loop: asyncio.AbstractEventLoop, timeout_s: float, limits: ResponseLimits
    ) -> None:
        self._loop = loop
        self._timeout_s = timeout_s
        self._limits = limits
        self._transport: asyncio.Transport | None = None
        self._parser = HttpResponseParser(self)
        self._requests = 0
        self._closed = False
        self._in_exchange = False
        self._reading_paused = False
        self._writing_paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._deadline = 0.0
        self._timeout_error: type[UpstreamTransportError] = UpstreamReadTimeout
        self._reset()

    def _reset(self) -> None:
        self._status = 0
        self._headers: list[tuple[bytes, bytes]] = []
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._head_done = False
        self._interim = False
        self._complete = False
        self._keep_alive = False
        self._needs_eof = False
        self._must_close = False
        self._got_bytes = False
        self._read_all = False
        self._head_bytes = 0
        self._body_bytes = 0
        self._stream_deadline = 0.0
        """Loop time the stream must end by (0: not streaming)."""
        self._error: UpstreamTransportError | None = None

    # --- pool interface ----------------------------------------------------------------------

    def is_usable(self) -> bool:
        transport = self._transport
        return not self._closed and transport is not None and not transport.is_closing()

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._transport is not None:
            self._transport.abort()

    @property
    def reused(self) -> bool:
        return self._requests > 1

    def reusable(self) -> bool:
        """The exchange ended cleanly and the connection may carry the next one."""
        return (
            self._complete
            and self._keep_alive
            and not self._must_close
            and self._error is None
            and self.is_usable()
        )

    def end_exchange(self) -> None:
        self._in_exchange = False
        self._reset()
        if self._reading_paused:
            self._reading_paused = False
            if self._transport is not None:
                self._transport.resume_reading()

    # --- the exchange, driven by the owning coroutine ----------------------------------------

    async def exchange(self, data: bytes, body: bytes | None) -> None:
        """Write a request (`data`, then `body` if it is large) and wait for the response head."""
        self._requests += 1
        self._in_exchange = True
        transport = self._transport
        if self._closed or transport is None:
            self._lost()
            raise self._error or UpstreamConnectError("connection closed")
        transport.write(data)
        if body is not None:
            await self._write_large(transport, body)
        while not self._head_done:
            if self._error is not None:
                raise self._error
            await self._wait(UpstreamReadTimeout)

    async def _write_large(self, transport: asyncio.Transport, body: bytes) -> None:
        view = memoryview(body)
        for start in range(0, len(body), _WRITE_PIECE):
            while self._writing_paused and self._error is None and not self._head_done:
                await self._wait(UpstreamWriteTimeout)
            if self._error is not None:
                raise self._error
            if self._head_done:
                # The upstream answered before taking the whole body (a 413, say): stop sending;
                # the connection is mid-request, so it cannot be reused.
                self._must_close = True
                return
            transport.write(view[start : start + _WRITE_PIECE])

    async def next_chunk(self) -> bytes | None:
        """Body bytes received since the last call (waiting for some), or None at the end."""
        if not self._stream_deadline:
            self._stream_deadline = self._loop.time() + self._limits.stream_s
            self._refuse(self._over_limit())
        while True:
            if self._error is None and self._loop.time() > self._stream_deadline:
                self._refuse(UpstreamStreamTooLong(self._too_long()))
            if isinstance(self._error, UpstreamLimitExceeded):
                raise self._error
            chunks = self._chunks
            if chunks:
                data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                chunks.clear()
                self._buffered = 0
                if self._reading_paused and self._transport is not None:
                    self._reading_paused = False
                    self._transport.resume_reading()
                return data
            if self._complete:
                return None
            if self._error is not None:
                raise self._error
            await self._wait(UpstreamReadTimeout)

    async def read_all(self) -> bytes:
        """The rest of the body, up to `limits.body_bytes` (refused at once when the declared
        content-length is larger)."""
        self._read_all = True
        declared = _content_length(self._headers)
        if declared is not None and declared > self._limits.body_bytes:
            self._refuse(UpstreamBodyTooLarge(self._too_large(declared)))
        self._refuse(self._over_limit())
        if self._error is not None:
            raise self._error
        if self._reading_paused and self._transport is not None:
            self._reading_paused = False
            self._transport.resume_reading()
        while not self._complete:
            if self._error is not None:
                raise self._error
            await self._wait(UpstreamReadTimeout)
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        return data

    async def _wait(self, timeout_error: type[UpstreamTransportTimeout]) -> None:
        """Sleep until the next event on this connection, at most `timeout_s` (and not beyond
        the stream's end of `limits.stream_s`)."""
        loop = self._loop
        waiter = loop.create_future()
        self._waiter = waiter
        error: type[UpstreamTransportError] = timeout_error
        # One lazily re-armed timer per connection instead of a timer per wait: moving the
        # deadline is an attribute store; the timer only re-arms itself when it fires early.
        deadline = loop.time() + self._timeout_s
        if self._stream_deadline and self._stream_deadline < deadline:
            deadline, error = self._stream_deadline, UpstreamStreamTooLong
        self._timeout_error = error
        self._deadline = deadline
        timer = self._timer
        if timer is None or timer.when() > deadline:  # later only when the stream must end
            if timer is not None:
                timer.cancel()
            self._timer = loop.call_at(deadline, self._on_timer)
        try:
            await waiter
        finally:
            self._waiter = None

    def _on_timer(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # nobody waits; the next wait arms a new timer
        if self._loop.time() < self._deadline:
            self._timer = self._loop.call_at(self._deadline, self._on_timer)
            return
        error = self._timeout_error
        if error is UpstreamStreamTooLong:
            self._refuse(UpstreamStreamTooLong(self._too_long()))
            return
        what = "the request body" if error is UpstreamWriteTimeout else "the response"
        self._error = error(f"upstream stalled on {what} for {self._timeout_s:g}s")
        waiter.set_result(None)

    def _too_long(self) -> str:
        return f"the stream went on for over {self._limits.stream_s:g}s"

    def _too_large(self, size: int) -> str:
        if self._read_all:
            return f"the answer is {size} bytes, over the limit of {self._limits.body_bytes}"
        return f"the stream passed {self._limits.stream_bytes} bytes"

    def _over_limit(self) -> UpstreamLimitExceeded | None:
        """The error when the body received so far is over the limit of its way of reading
        (whole: `body_bytes`; as a stream: `stream_bytes`; not chosen yet: the larger)."""
        limits, size = self._limits, self._body_bytes
        if self._read_all:
            if size > limits.body_bytes:
                return UpstreamBodyTooLarge(self._too_large(size))
        elif self._stream_deadline:
            if size > limits.stream_bytes:
                return UpstreamStreamTooLarge(self._too_large(size))
        elif size > max(limits.body_bytes, limits.stream_bytes):
            return UpstreamBodyTooLarge(self._too_large(size))
        return None

    def _refuse(self, error: UpstreamLimitExceeded | None) -> None:
        """End the exchange for breaking a limit (even if the response is complete already: a
        refused body is never handed out) and close the connection."""
        if error is None:
            return
        if self._error is None:
            self._error = error
        self.close()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: UpstreamTransportError) -> None:
        if self._complete:
            self._must_close = True  # trailing junk after a complete response: just don't reuse
        elif self._error is None:
            self._error = error
        self.close()
        self._wake()

    def _lost(self) -> None:
        """Decide what a closed connection means for the exchange in flight."""
        if not self._in_exchange or self._error is not None:
            return
        if not self._head_done:
            if self._got_bytes:
                self._error = UpstreamProtocolError("upstream closed the connection mid-head")
            elif self.reused:
                self._error = _StaleConnectionError("reused connection closed before a response")
            else:
                self._error = UpstreamConnectError(
                    "upstream closed the connection without sending a response"
                )
        elif not self._complete:
            if self._needs_eof:
                self._complete = True  # read-until-close framing: the close ends the body
            else:
                self._error = UpstreamProtocolError(
                    "peer closed connection without sending complete message body"
                )

    # --- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, AttributeError):  # not every transport is TCP
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if exc is not None and self._in_exchange and self._head_done and self._needs_eof:
            self._needs_eof = False  # a reset does not end a read-until-close body
        self._lost()
        self._wake()

    def eof_received(self) -> bool | None:
        self._closed = True
        return None  # let the transport close; connection_lost settles the exchange

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._wake()

    def data_received(self, data: bytes) -> None:
        if not self._in_exchange:
            self.close()  # bytes nobody asked for on an idle connection
            return
        if self._error is not None:
            return
        self._got_bytes = True
        try:
            self._parser.feed_data(data)
        except HttpParserUpgrade:
            self._fail(UpstreamProtocolError("upstream switched protocols"))
        except HttpParserError as exc:
            if isinstance(exc.__context__, UpstreamLimitExceeded):  # raised by a callback
                self._refuse(exc.__context__)
            else:
                self._fail(UpstreamProtocolError(f"invalid response from upstream: {exc}"))
        else:
            if not self._head_done and self._error is None:
                # A head still incomplete after this read: all of it was head (the parser keeps
                # a partial header line in memory, so count it before it is complete).
                self._head_bytes += len(data)
                if self._head_bytes > self._limits.header_bytes:
                    self._refuse(UpstreamHeadersTooLarge(self._head_too_large()))

    def _head_too_large(self) -> str:
        limits = self._limits
        return f"the response head is over {limits.header_bytes} bytes or {limits.headers} lines"

    # --- httptools callbacks ---------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._complete or not self._in_exchange:
            raise _UnexpectedMessageError

    def on_header(self, name: bytes, value: bytes) -> None:
        headers = self._headers
        headers.append((name, value))
        self._head_bytes += len(name) + len(value) + 4
        if len(headers) > self._limits.headers or self._head_bytes > self._limits.header_bytes:
            raise UpstreamHeadersTooLarge(self._head_too_large())

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if status < 200:
            self._interim = True  # 100 Continue, 103 Early Hints: skipped
            self._head_bytes = 0
            return
        self._status = status
        self._keep_alive = keep_alive = self._parser.should_keep_alive()
        if not keep_alive:
            self._needs_eof = not _has_framing(self._headers)
        self._head_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        self._body_bytes += len(body)
        error = self._over_limit()
        if error is not None:
            raise error  # stops the parser; data_received refuses the exchange
        if self._buffered > READ_BUFFER_BYTES and not self._read_all and not self._reading_paused:
            self._reading_paused = True
            if self._transport is not None:
                self._transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            self._headers = []
            return
        self._complete = True
        self._wake()


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The declared content-length, if it is plain digits."""
    for name, value in headers:
        if name.lower() == b"content-length":
            digits = value.strip()
            return int(digits) if digits.isdigit() else None
    return None


def _has_framing(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a body's end is marked by content-length or chunked coding (not by the close)."""
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"content-length":
            return True
        if lowered == b"transfer-encoding" and b"chunked" in value.lower():
            return True
    return False


class UpstreamResponse:
    """A response whose head has arrived; the body is read with `aread` or `aiter_raw`.

    The connection goes back to the pool by itself once the body was read to the end; `aclose`
    must still be called (in a `finally`) — it is how an abandoned or cancelled read closes the
    connection and frees its pool slot. A response neither read to the end nor closed keeps its
    slot forever.
    """

    __slots__ = ("_body", "_conn", "_owner", "headers", "status_code")

    def __init__(self, owner: UpstreamHTTP, conn: _Connection) -> None:
        self.status_code: int = conn._status
        """The final status (interim 1xx responses are skipped)."""
        self.headers: list[tuple[bytes, bytes]] = conn._headers
        """Header lines as received: names in the server's case, repeated names repeated."""
        self._owner = owner
        self._conn: _Connection | None = conn
        self._body: bytes | None = None

    async def aread(self) -> bytes:
        """The whole body (de-chunked, content-encoding untouched). Returns it again if called
        twice; raises `RuntimeError` after `aiter_raw` consumed it or `aclose`."""
        if self._body is not None:
            return self._body
        conn = self._conn
        if conn is None:
            raise RuntimeError("the response body was already consumed or closed")
        try:
            body = await conn.read_all()
        except BaseException:
            self._drop()
            raise
        self._body = body
        self._finish()
        return body

    @property
    def received_all(self) -> bool:
        """The whole body has arrived and every byte of it was handed out by `aiter_raw`: the
        next item would be the end. A reader that forwards the body can send what it holds with
        the end of its own answer, in one write, instead of waiting for that empty last item."""
        conn = self._conn
        return conn is not None and conn._complete and not conn._chunks and conn._error is None

    def aiter_raw(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive (de-chunked; content-encoding untouched). Each item is
        everything received since the previous one. Waits at most read_timeout_s per item.

        While the consumer is slower than the upstream, at most about `READ_BUFFER_BYTES` wait
        in memory: then the socket is no longer read until the consumer catches up.
        """
        return _RawBody(self)

    async def aclose(self) -> None:
        """Hand the connection back if its response arrived completely, else close it."""
        conn = self._conn
        if conn is not None:
            if conn._complete:
                self._finish()
            else:
                self._drop()

    def _finish(self) -> None:
        conn = self._conn
        if conn is not None:
            self._conn = None
            self._owner._end(conn)

    def _drop(self) -> None:
        conn = self._conn
        if conn is not None:
            self._conn = None
            conn.close()
            self._owner._end(conn)


class _RawBody:
    """The iterator of `UpstreamResponse.aiter_raw` (a class: cheaper than an async generator,
    and nothing is left to finalize when the consumer stops early)."""

    __slots__ = ("_response",)

    def __init__(self, response: UpstreamResponse) -> None:
        self._response = response

    def __aiter__(self) -> _RawBody:
        return self

    async def __anext__(self) -> bytes:
        response = self._response
        conn = response._conn
        if conn is None:
            if response._body is not None:
                raise RuntimeError("the response body was already read with aread()")
            raise StopAsyncIteration
        try:
            chunk = await conn.next_chunk()
        except BaseException:
            response._drop()
            raise
        if chunk is None:
            response._finish()
            raise StopAsyncIteration
        return chunk


class UpstreamHTTP:
    """Keep-alive HTTP/1.1 to one origin, for requests whose path is appended to `base_url`.

    `base_url` is "http://host[:port][/prefix]" or "https://…"; the prefix (without a trailing
    slash) goes in front of every request path, and the host header is the URL's host[:port].
    https uses `ssl_context` (a default verifying context if None) with the URL's host as SNI
    and certificate name.

    Up to `max_connections` connections are open at once (busy + idle); idle ones are reused
    newest first and closed after `keepalive_expiry_s`. `connect_timeout_s` bounds each connect
    (TCP and TLS); `read_timeout_s` bounds the wait for a free connection, each wait for the
    upstream to take more of a large body, the wait for the response head, and the gap between
    any two body chunks.
    """

    def __init__(
        self,
        base_url: str,
        *,
        connect_timeout_s: float,
        read_timeout_s: float,
        max_connections: int = 256,
        keepalive_expiry_s: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
        limits: ResponseLimits | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be http(s)://host[:port][/path], not {base_url!r}")
        if parts.query or parts.fragment:
            raise ValueError(f"base_url must not have a query or fragment: {base_url!r}")
        if not (connect_timeout_s > 0 and read_timeout_s > 0):
            raise ValueError(
                f"timeouts must be positive, not {connect_timeout_s!r} and {read_timeout_s!r}"
            )
        try:
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"base_url has an invalid port: {base_url!r}") from exc
        self.base_url = base_url
        self._hostname = parts.hostname
        self._tls = parts.scheme == "https"
        self._port = port or (443 if self._tls else 80)
        self._ssl: ssl.SSLContext | None = None
        if self._tls:
            self._ssl = ssl_context if ssl_context is not None else ssl.create_default_context()
        authority = parts.netloc.rpartition("@")[2]
        if not authority.isascii():
            raise ValueError(f"base_url must spell the host in ASCII (punycode): {base_url!r}")
        self._host = b"host: " + authority.encode() + b"\r\n"
        self._prefix = parts.path.rstrip("/").encode("ascii")
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self._limits = limits if limits is not None else ResponseLimits()
        self._pool: ConnectionPool[_Connection] = ConnectionPool(
            max_connections, keepalive_expiry_s
        )

    @property
    def pool(self) -> ConnectionPool[_Connection]:
        """The connection pool (for metrics: open and idle connection counts)."""
        return self._pool

    async def send(
        self, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> UpstreamResponse:
        """Send one request; return when the final response head has arrived.

        `path` (starting with "/", query included) is appended to the base URL's path. `headers`
        are sent as given, after `host`; this adds `content-length` itself — callers never pass
        host, content-length or transfer-encoding. Raises `ValueError` if the method, path or a
        header contains CR or LF, and an `UpstreamTransportError` when the exchange fails (see the
        module docstring; a reused connection closing before any response byte is retried once).
        If the calling task is cancelled, the connection is closed and its slot freed.
        """
        data, large = self._encode(method, path, headers, body)
        pool = self._pool
        conn = await self._acquire()
        try:
            try:
                await conn.exchange(data, large)
            except _StaleConnectionError:
                conn.close()
                conn = await self._connect()  # same pool slot, fresh connection
                await conn.exchange(data, large)
        except BaseException:
            conn.close()
            pool.discard()
            raise
        return UpstreamResponse(self, conn)

    async def aclose(self) -> None:
        """Close every idle connection; in-flight responses close theirs when they end."""
        self._pool.close()

    def _encode(
        self, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> tuple[bytes, bytes | None]:
        parts = [method.encode(), b" ", self._prefix, path.encode(), b" HTTP/1.1\r\n", self._host]
        for name, value in headers:
            parts += (name, b": ", value, b"\r\n")
        parts.append(b"content-length: %d\r\n\r\n" % len(body))
        head = b"".join(parts)
        # Exactly the line breaks we put there, or a CR/LF came in with the method, path or a
        # header: refuse rather than let a caller smuggle a header or a second request.
        breaks = len(headers) + 4
        if head.count(b"\n") != breaks or head.count(b"\r") != breaks:
            raise ValueError("CR or LF in the request line or a header")
        if len(body) <= _SMALL_BODY:
            return head + body, None
        return head, body

    async def _acquire(self) -> _Connection:
        try:
            conn = await self._pool.acquire(self._read_timeout_s)
        except TimeoutError as exc:
            raise UpstreamPoolTimeout(
                f"no free connection to {self.base_url} within {self._read_timeout_s:g}s"
            ) from exc
        if conn is not None:
            return conn
        try:
            return await self._connect()
        except BaseException:
            self._pool.discard()
            raise

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        conn = _Connection(loop, self._read_timeout_s, self._limits)
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                await loop.create_connection(
                    lambda: conn,
                    self._hostname,
                    self._port,
                    ssl=self._ssl,
                    server_hostname=self._hostname if self._tls else None,
                )
        except TimeoutError as exc:  # before OSError: TimeoutError is one
            raise UpstreamConnectTimeout(
                f"connecting to {self.base_url} took over {self._connect_timeout_s:g}s"
            ) from exc
        except OSError as exc:  # refused, unreachable, DNS (gaierror), TLS (SSLError)
            raise UpstreamConnectError(f"cannot connect to {self.base_url}: {exc}") from exc
        return conn

    def _end(self, conn: _Connection) -> None:
        """The exchange on `conn` is over: pool it if it is clean, else close it."""
        if conn.reusable():
            conn.end_exchange()
            self._pool.release(conn)
        else:
            conn.close()
            self._pool.discard()
