"""The client connection's limits: uvicorn's httptools protocol with timers and header caps.

uvicorn bounds only the idle time between two requests (`timeout_keep_alive`); a client may take
for ever to send its headers or its body, send headers of any size, and open connections
without end. `limited_protocol` returns a subclass of uvicorn's `HttpToolsProtocol` (handed to
`uvicorn.Config(http=...)`) that adds, per connection, from `server.limits`:

- a header timer, counted from the connection's opening and from the first byte of each later
  request, stopped when the headers are complete: beyond `header_timeout_s` the client gets 408
  and the connection is closed (closed without a word when no byte of a request came);
- a header cap: the request line and headers over `max_header_bytes`, or over `max_headers`
  lines, get 431 and the connection is closed (also while an endless header line is still
  arriving: bytes are counted as they come, before the parser holds a complete line);
- a body timer, counted from the end of the headers, stopped when the body is: no byte for
  `body_timeout_s`, or the whole body not there `body_total_timeout_s` after the headers, gets
  408 and the connection is closed; the application sees the client gone (`http.disconnect`).
  The timer waits while reading is paused because the application has not taken what came;
- a connection cap: a connection beyond `max_connections` open ones is answered 503 as soon as
  its headers are complete, and closed;
- a client hanging up is told to the request being served even when the client pipelined more
  requests behind it. uvicorn tells only its newest cycle, which for a pipelining client is a
  queued request that never runs; the one being served would see no `http.disconnect` and write
  into a closed transport (a RuntimeError under uvloop, silently lost bytes under asyncio's
  loop), leaving an upstream call made and billed without a record.

Answers are JSON in the wire format of the path (Anthropic's for /v1/messages, OpenAI's for the
rest), with `connection: close`, and each closing is counted in
`mirrorgate_connections_closed_total{reason}`.

The cycles write through `response_writes.HeldHeadTransport`, which sends an answer's head
with its body in one write.

This relies on uvicorn internals (the parser callbacks, `cycle`, `pipeline`, `flow`, `app`);
`UVICORN_TESTED` names the versions it was checked against, and a test fails on any other.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

from proxy.config import LimitsSpec
from proxy.core import (
    ENDPOINTS,
    GatewayError,
    HeadersTooLarge,
    RequestTimeout,
    Unavailable,
    WireFormat,
    error_body,
)
from proxy.observability import ConnectionMetrics

from .response_writes import HeldHeadTransport

UVICORN_TESTED = ("0.54.0", "0.55.0")
"""uvicorn versions whose `HttpToolsProtocol` this subclass was read against."""
LINGER_S = 5.0
"""After an answer that ends a connection, the client's further bytes are read and dropped for
up to this long: closing a socket with unread bytes resets it, and a reset can destroy the
answer before the client has read it (nginx's lingering close)."""


class _Refused(Exception):
    """Raised inside a parser callback to stop parsing a request that broke a limit."""

    def __init__(self, error: GatewayError, reason: str) -> None:
        super().__init__(error.message)
        self.error = error
        self.reason = reason


def _wire(path: bytes) -> WireFormat:
    endpoint = ENDPOINTS.get(path.split(b"?", 1)[0].decode("latin-1"))
    return endpoint.wire if endpoint is not None else "openai"


def _answer(error: GatewayError, wire: WireFormat) -> bytes:
    """A complete HTTP/1.1 response carrying `error`, after which the connection closes."""
    body = error_body(error, wire)
    head = b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
    return STATUS_LINE[error.status] + head % len(body) + body


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """See the module docstring. `limits` and `metrics` are set by `limited_protocol`."""

    limits: LimitsSpec
    metrics: ConnectionMetrics

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reading_head = True
        """Between requests, or inside a request's line and headers."""
        self._head_bytes = 0
        """Request line and header lines of the current request, as the parser completes them."""
        self._head_raw = 0
        """Bytes read while the head stayed incomplete (an endless line is caught by this)."""
        self._header_lines = 0
        self._head_started = False
        """A byte of the current request arrived (a silent connection is closed unanswered)."""
        self._head_since = 0.0
        """Loop time of the current request's first byte."""
        self._head_timer: asyncio.TimerHandle | None = None
        """Armed at the connection's opening, and for a later request only when its head takes
        more than one read (most arrive whole: no timer to arm and cancel)."""
        self._in_body = False
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_last = 0.0
        self._body_started = 0.0
        self._refused = False
        self._linger: asyncio.TimerHandle | None = None
        self._refusal: bytes | None = None
        """An answer waiting for the response in progress to end (pipelined requests)."""
        self._path = b""
        self._serving: RequestResponseCycle | None = None
        """The cycle whose application runs (a pipelining client queues more behind it)."""

    # --- connection ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._writes = HeldHeadTransport(transport, self.loop)
        self.transport = self._writes  # type: ignore[assignment]  # the cycles write through it
        self.metrics.open.inc()
        if len(self.connections) > self.limits.max_connections:
            self.app = _over_capacity
            self.metrics.closed.labels("over_capacity").inc()
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self.metrics.open.dec()
        self._stop_timers()
        if self._linger is not None:
            self._linger.cancel()
        super().connection_lost(exc)
        cycle = self._serving
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        self._serving = cycle
        self._writes.hold_next()  # the cycle's first write is its answer's head
        super()._start_asgi_task(cycle, app)

    def data_received(self, data: bytes) -> None:
        # uvicorn's own, plus the head's timer and byte count, and refusals from callbacks.
        if self._refused:
            return
        self._unset_keepalive_if_required()
        head_before = self._reading_head
        if head_before and not self._head_started and data.strip(b"\r\n"):
            self._head_started = True
            self._head_since = self.loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, _Refused):
                self._refuse(exc.__context__.error, exc.__context__.reason)
                return
            self._invalid()
            return
        except httptools.HttpParserError:
            self._invalid()
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if self._refused:
            return
        if self._reading_head and self._head_started:
            if head_before:
                # The whole read was head: count it now, before the parser holds a complete line.
                self._head_raw += len(data)
                if self._head_raw > self.limits.max_header_bytes:
                    self._refuse(self._too_large(), "headers_too_large")
                    return
            if self._head_timer is None:  # a keep-alive request whose head takes more reads
                self._head_timer = self.loop.call_at(
                    self._head_since + self.limits.header_timeout_s, self._on_head_timer
                )
        elif self._in_body and self._body_timer is None:  # a body that takes more reads
            limits = self.limits
            self._body_timer = self.loop.call_at(
                self._body_last + min(limits.body_timeout_s, limits.body_total_timeout_s),
                self._on_body_timer,
            )

    def _invalid(self) -> None:
        msg = "Invalid HTTP request received."
        self.logger.warning(msg)
        self.send_400_response(msg)

    # --- parser callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._reading_head = True
        self._head_bytes = 0
        self._header_lines = 0
        self._path = b""

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self._path) < 256:
            self._path += url[:256]
        self._head_bytes += len(url)
        self._check_head()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_lines += 1
        self._head_bytes += len(name) + len(value) + 4
        self._check_head()
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._reading_head = False
        self._head_started = False
        self._head_raw = 0
        self._cancel_head_timer()
        super().on_headers_complete()
        self._in_body = True
        self._body_started = self._body_last = self.loop.time()

    def on_body(self, body: bytes) -> None:
        self._body_last = self.loop.time()
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._in_body = False
        self._cancel_body_timer()
        self._reading_head = True
        self._head_bytes = 0
        super().on_message_complete()

    def on_response_complete(self) -> None:
        refusal, self._refusal = self._refusal, None
        if refusal is not None and not self.transport.is_closing():
            self._answer_and_close(refusal)
            return
        super().on_response_complete()

    # --- limits ----------------------------------------------------------------------------

    def _too_large(self) -> HeadersTooLarge:
        limits = self.limits
        return HeadersTooLarge(
            f"request headers are over {limits.max_header_bytes} bytes "
            f"or {limits.max_headers} lines"
        )

    def _check_head(self) -> None:
        limits = self.limits
        if self._header_lines > limits.max_headers or self._head_bytes > limits.max_header_bytes:
            raise _Refused(self._too_large(), "headers_too_large")

    def _busy(self) -> bool:
        """A response is in progress (for an earlier request, when pipelining)."""
        cycle = self.cycle
        return cycle is not None and not cycle.response_complete

    def _refuse(self, error: GatewayError, reason: str) -> None:
        """Answer `error` and close, once any response in progress is complete."""
        self._refused = True
        self._stop_timers()
        self.metrics.closed.labels(reason).inc()
        answer = _answer(error, _wire(self._path))
        if self._busy():
            self._refusal = answer
            self.flow.pause_reading()
        elif not self.transport.is_closing():
            self._answer_and_close(answer)

    def _answer_and_close(self, answer: bytes) -> None:
        """Send `answer`, end our side, and drop what the client still sends (see `LINGER_S`)."""
        transport = self.transport
        transport.write(answer)
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self.flow.resume_reading()
        self._linger = self.loop.call_later(LINGER_S, transport.close)

    def _arm_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(self.limits.header_timeout_s, self._on_head_timer)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _stop_timers(self) -> None:
        self._cancel_head_timer()
        self._cancel_body_timer()

    def _on_head_timer(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self._refused:
            return
        if self._busy():  # the client waits for us: its next request's headers can wait too
            self._arm_head_timer()
            return
        if not self._head_started:
            self.metrics.closed.labels("header_timeout").inc()
            self.transport.close()  # not a byte came: there is no request to answer
            return
        seconds = self.limits.header_timeout_s
        error = RequestTimeout(f"request headers not received within {seconds:g}s")
        self._refuse(error, "header_timeout")

    def _on_body_timer(self) -> None:
        self._body_timer = None
        cycle = self.cycle
        if self.transport.is_closing() or self._refused or cycle is None:
            return
        limits, now = self.limits, self.loop.time()
        deadline = min(
            self._body_last + limits.body_timeout_s,
            self._body_started + limits.body_total_timeout_s,
        )
        if self.flow.read_paused or self.pipeline:
            # The application, not the client, holds the body up: the client's clocks wait.
            self._body_started += now - self._body_last
            self._body_last = now
            self._body_timer = self.loop.call_at(now + limits.body_timeout_s, self._on_body_timer)
            return
        if now < deadline:
            self._body_timer = self.loop.call_at(deadline, self._on_body_timer)
            return
        self.metrics.closed.labels("body_timeout").inc()
        self._refused = True
        if cycle.response_started:  # the application answered already: end it there
            cycle.keep_alive = False
            if cycle.response_complete:
                self.transport.close()
            return
        error = RequestTimeout(
            f"request body not received in time (no byte for {limits.body_timeout_s:g}s, "
            f"or not complete within {limits.body_total_timeout_s:g}s)"
        )
        self._answer_and_close(_answer(error, _wire(self._path)))
        # The application reading the body hears the client gone; its answer goes nowhere.
        cycle.disconnected = True
        cycle.message_event.set()


async def _over_capacity(scope: Any, receive: Any, send: Any) -> None:
    """The application of a connection beyond `max_connections`: 503, then close."""
    error = Unavailable("too many connections to this gateway; retry later")
    body = error_body(error, _wire(scope.get("raw_path", b"")))
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", b"1"),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


FILES_KEPT_FOR_THE_REST = 256
"""Open files the gateway needs besides client connections (upstream pools, the store, logs)."""


def connection_cap_warning(limits: LimitsSpec, open_files: int) -> str | None:
    """What to tell the operator when `max_connections` cannot be reached under the process's
    open-file limit `open_files` (`ulimit -n`): beyond it, accepting fails with EMFILE instead
    of a 503. None when the cap fits."""
    room = open_files - FILES_KEPT_FOR_THE_REST
    if limits.max_connections <= room:
        return None
    return (
        f"server.limits.max_connections ({limits.max_connections}) is above what this process "
        f"may open ({open_files} files, ulimit -n): connections beyond about {max(room, 0)} "
        "fail to be accepted instead of getting a 503; raise the limit or lower the cap"
    )


def limited_protocol(
    limits: LimitsSpec, metrics: ConnectionMetrics
) -> type[LimitedHttpToolsProtocol]:
    """The protocol class for `uvicorn.Config(http=...)`, bound to `limits` and `metrics`."""
    return type(
        "BoundLimitedHttpToolsProtocol",
        (LimitedHttpToolsProtocol,),
        {"limits": limits, "metrics": metrics},
    )
