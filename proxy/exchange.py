"""One proxied request, from the client's bytes to the upstream and back, ending in records.

The client path is: read and validate the body → plan the route → call the upstream (once more on
the fallback if the primary fails before any byte was sent) → forward the answer (streams event by
event) → hand the record to the recorder, metrics and tracer. Nothing after the last byte is sent
delays the client; nothing before it waits on the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson

from proxy.asgi import ClientGone, Headers, Receive, Scope, Send, header, read_body, send_bytes
from proxy.asgi import send_error as send_gateway_error
from proxy.config import MirrorgateConfig
from proxy.endpoints import Endpoint
from proxy.errors import (
    GatewayError,
    RequestError,
    RouteNotFound,
    UnsupportedMediaType,
    UpstreamError,
    UpstreamTimeout,
    WrongWireFormat,
    error_body,
)
from proxy.metrics import GatewayMetrics
from proxy.pricing import cost_usd
from proxy.records import Arm, ExchangeRecord, Status, Usage
from proxy.routing import RoutePlan, RouteTable
from proxy.streaming import StreamObserver
from proxy.tokens import count_tokens
from proxy.tracing import ExchangeTracer
from proxy.upstream import HOP_BY_HOP, UpstreamClient
from proxy.usage import prompt_text, response_text, response_usage

log = logging.getLogger("mirrorgate.exchange")

RecordSink = Callable[[ExchangeRecord], object]


@dataclass(slots=True)
class _Request:
    """A validated client request, ready to send."""

    request_id: str
    endpoint: Endpoint
    payload: dict[str, Any]
    plan: RoutePlan
    stream: bool
    strip_usage: bool
    started_at: datetime
    t0: float
    start_ns: int
    headers: Headers
    waited: float = 0.0
    """Seconds spent waiting on upstreams so far (all attempts), for the overhead metric."""


@dataclass(slots=True)
class _Attempt:
    """The outcome of one upstream call, before anything was sent to the client."""

    target: str
    arm: Arm
    upstream_body: bytes
    t_sent: float
    response: httpx.Response | None = None
    body: bytes | None = None
    """Non-streamed answers: the whole body, already read."""
    parsed: dict[str, Any] | None = None
    status: Status = Status.OK
    error_class: str | None = None
    error: GatewayError | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def retryable(self) -> bool:
        """Failed in a way that a fallback may fix, and nothing reached the client yet."""
        if self.error is not None:
            return True
        return self.response is not None and self.response.status_code >= 500


class ProxyHandler:
    """Serves the proxied endpoints (DESIGN §5)."""

    def __init__(
        self,
        config: MirrorgateConfig,
        routes: RouteTable,
        clients: dict[str, UpstreamClient],
        metrics: GatewayMetrics,
        tracer: ExchangeTracer,
        sinks: list[RecordSink],
    ) -> None:
        self.config = config
        self.routes = routes
        self.clients = clients
        self.metrics = metrics
        self.tracer = tracer
        self.sinks = sinks
        self.keep_bodies = config.store.bodies != "none"
        self.max_body = config.server.max_body_bytes

    # --- entry ------------------------------------------------------------------------------------

    async def __call__(
        self, scope: Scope, receive: Receive, send: Send, endpoint: Endpoint
    ) -> None:
        request_id = uuid.uuid4().hex
        ids = [(b"x-mirrorgate-request-id", request_id.encode())]
        self.metrics.inflight.inc()
        try:
            try:
                request = await self._prepare(scope, receive, endpoint, request_id)
            except GatewayError as exc:
                self.metrics.rejected.labels(endpoint.name, str(exc.status)).inc()
                await send_gateway_error(send, exc, endpoint.wire, ids)
                return
            except ClientGone:
                return
            await self._serve(request, receive, send)
        finally:
            self.metrics.inflight.dec()

    async def _prepare(
        self, scope: Scope, receive: Receive, endpoint: Endpoint, request_id: str
    ) -> _Request:
        t0 = time.perf_counter()
        start_ns = time.time_ns()
        content_type = header(scope, b"content-type") or b""
        body = await read_body(scope, receive, self.max_body)
        if b"json" not in content_type.lower():
            given = content_type.decode("latin-1")[:100]
            raise UnsupportedMediaType(f"content-type must be application/json, not '{given}'")
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            reason = "not valid UTF-8" if "UTF-8" in str(exc) else f"not valid JSON ({exc})"
            raise RequestError(f"request body is {reason}") from None
        if not isinstance(payload, dict):
            raise RequestError("request body must be a JSON object")
        model = payload.get("model")
        if not isinstance(model, str) or not model:
            raise RequestError("'model' is required and must name a route")
        plan = self.routes.plan(model)
        if plan is None:
            known = ", ".join(sorted(self.routes.names())[:20])
            raise RouteNotFound(f"model '{model[:200]}' is not a route of this gateway ({known})")
        provider = self.clients[plan.target].spec.provider
        if provider != endpoint.wire:
            raise WrongWireFormat(
                f"route '{model}' is served by a {provider} model; "
                f"{endpoint.path} speaks {endpoint.wire}"
            )
        stream = payload.get("stream", False)
        if not isinstance(stream, bool):
            raise RequestError("'stream' must be a boolean")
        if stream and not endpoint.streams:
            raise RequestError(f"{endpoint.path} does not stream")
        strip = False
        if stream and endpoint.usage_option:
            options = payload.get("stream_options")
            if options is not None and not isinstance(options, dict):
                raise RequestError("'stream_options' must be an object")
            if not (options or {}).get("include_usage"):
                payload["stream_options"] = {**(options or {}), "include_usage": True}
                strip = True
        return _Request(
            request_id, endpoint, payload, plan, stream, strip,
            datetime.now(UTC), t0, start_ns, scope["headers"],
        )  # fmt: skip

    # --- upstream ---------------------------------------------------------------------------------

    async def _open(self, req: _Request, target: str, arm: Arm) -> _Attempt:
        """Send the request to `target`; for non-streamed answers also read the whole body."""
        client = self.clients[target]
        req.payload["model"] = client.spec.model
        try:
            upstream_body = orjson.dumps(req.payload)
        except TypeError as exc:  # e.g. an integer beyond 64 bits
            raise RequestError(f"request body cannot be forwarded: {exc}") from None
        attempt = _Attempt(target, arm, upstream_body, time.perf_counter())
        request = client.build(req.endpoint.upstream_path, upstream_body, req.headers)
        try:
            response = await client.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            req.waited += time.perf_counter() - attempt.t_sent
            self._fail(attempt, exc)
            return attempt
        attempt.response = response
        if req.stream and response.status_code < 300:
            return attempt  # the body is forwarded as it arrives
        try:
            attempt.body = await response.aread()
        except httpx.HTTPError as exc:
            self._fail(attempt, exc)
        finally:
            await response.aclose()
        req.waited += time.perf_counter() - attempt.t_sent
        if attempt.error is not None:
            return attempt
        if response.status_code >= 300:
            attempt.status = Status.UPSTREAM_ERROR
            attempt.error_class = f"http_{response.status_code}"
            return attempt
        try:
            parsed = orjson.loads(attempt.body or b"")
            if not isinstance(parsed, dict):
                raise ValueError("not an object")
            attempt.parsed = parsed
        except ValueError:
            attempt.status = Status.INVALID_RESPONSE
            attempt.error_class = "invalid_json"
            attempt.error = UpstreamError(f"upstream model '{target}' returned an invalid response")
        return attempt

    @staticmethod
    def _fail(attempt: _Attempt, exc: httpx.HTTPError) -> None:
        attempt.error_class = type(exc).__name__
        if isinstance(exc, httpx.TimeoutException):
            attempt.status = Status.TIMEOUT
            attempt.error = UpstreamTimeout(f"upstream model '{attempt.target}' timed out")
        else:
            attempt.status = Status.CONNECT_ERROR
            attempt.error = UpstreamError(
                f"upstream model '{attempt.target}' failed: {type(exc).__name__}"
            )

    # --- client -----------------------------------------------------------------------------------

    def _response_headers(self, req: _Request, attempt: _Attempt) -> Headers:
        out: Headers = []
        if attempt.response is not None:
            for name, value in attempt.response.headers.raw:
                if name.lower().decode("latin-1") not in HOP_BY_HOP:
                    out.append((name, value))
        out.extend(self._ids(req, attempt))
        return out

    @staticmethod
    def _ids(req: _Request, attempt: _Attempt) -> Headers:
        return [
            (b"x-mirrorgate-request-id", req.request_id.encode()),
            (b"x-mirrorgate-arm", attempt.arm.value.encode()),
        ]

    async def _serve(self, req: _Request, receive: Receive, send: Send) -> None:
        plan = req.plan
        attempt = await self._open(req, plan.target, plan.arm)
        fallback = plan.route.fallback
        if attempt.retryable and fallback is not None and fallback != attempt.target:
            self._emit(req, attempt, http_status=0, ended=time.perf_counter())
            attempt = await self._open(req, fallback, Arm.FALLBACK)
        if req.stream and attempt.response is not None and attempt.response.status_code < 300:
            await self._stream(req, attempt, receive, send)
            return
        if attempt.error is not None:
            status = attempt.error.status
            headers = [(b"content-type", b"application/json"), *self._ids(req, attempt)]
            body = error_body(attempt.error, req.endpoint.wire)
        else:
            assert attempt.response is not None
            status = attempt.response.status_code
            headers = self._response_headers(req, attempt)
            body = attempt.body or b""
        try:
            await send_bytes(send, status, body, headers)
        except OSError:
            attempt.status, attempt.error_class = Status.CLIENT_DISCONNECTED, "client_disconnected"
        self._emit(req, attempt, http_status=status, ended=time.perf_counter())

    async def _stream(self, req: _Request, attempt: _Attempt, receive: Receive, send: Send) -> None:
        response = attempt.response
        assert response is not None
        observer = StreamObserver(req.endpoint.name, req.strip_usage)
        headers = self._response_headers(req, attempt)
        headers.append((b"x-accel-buffering", b"no"))
        pump = asyncio.ensure_future(self._pump(response, observer, send, headers, req))
        watcher = asyncio.ensure_future(_wait_disconnect(receive))
        try:
            await asyncio.wait((pump, watcher), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not pump.done():
                pump.cancel()
                attempt.status, attempt.error_class = (
                    Status.CLIENT_DISCONNECTED,
                    "client_disconnected",
                )
            watcher.cancel()
            with contextlib.suppress(BaseException):
                await pump
            await response.aclose()
        if attempt.status is Status.OK:
            attempt.status, attempt.error_class = _pump_outcome(pump)
        ended = time.perf_counter()
        req.waited += ended - attempt.t_sent
        attempt.extra["observer"] = observer
        self._emit(req, attempt, http_status=response.status_code, ended=ended)

    async def _pump(
        self,
        response: httpx.Response,
        observer: StreamObserver,
        send: Send,
        headers: Headers,
        req: _Request,
    ) -> tuple[Status, str | None]:
        """Forward the stream; return how it ended."""
        await send(
            {"type": "http.response.start", "status": response.status_code, "headers": headers}
        )
        try:
            async for chunk in response.aiter_raw():
                out = observer.feed(chunk)
                if out:
                    await send({"type": "http.response.body", "body": out, "more_body": True})
        except httpx.HTTPError as exc:
            timed_out = isinstance(exc, httpx.TimeoutException)
            failure: GatewayError = (
                UpstreamTimeout("upstream stalled mid-stream")
                if timed_out
                else UpstreamError(f"upstream stream broke: {type(exc).__name__}")
            )
            tail = observer.close() + _stream_error_event(req.endpoint.wire, failure)
            await send({"type": "http.response.body", "body": tail, "more_body": False})
            return (Status.TIMEOUT if timed_out else Status.CONNECT_ERROR), type(exc).__name__
        await send({"type": "http.response.body", "body": observer.close(), "more_body": False})
        if observer.malformed:
            return Status.INVALID_RESPONSE, "malformed_event"
        if observer.error_event is not None:
            return Status.UPSTREAM_ERROR, "stream_error_event"
        if not observer.finished:
            return Status.INVALID_RESPONSE, "stream_incomplete"
        return Status.OK, None

    # --- records ----------------------------------------------------------------------------------

    def _emit(self, req: _Request, attempt: _Attempt, http_status: int, ended: float) -> None:
        """Build the record for one attempt and hand it to every sink. Never raises."""
        try:
            record = self._record(req, attempt, http_status, ended)
        except Exception:
            log.exception("could not build the record for request %s", req.request_id)
            return
        self.metrics.observe(record)
        if attempt.arm is not Arm.SHADOW:
            self.metrics.overhead.labels(record.route).observe(record.overhead_s)
        if self.tracer.enabled:
            self.tracer.record(record, req.start_ns, req.endpoint.operation)
        for sink in self.sinks:
            try:
                sink(record)
            except Exception:
                log.exception("record sink %r failed", sink)

    def _record(
        self, req: _Request, attempt: _Attempt, http_status: int, ended: float
    ) -> ExchangeRecord:
        client = self.clients[attempt.target]
        endpoint = req.endpoint.name
        observer: StreamObserver | None = attempt.extra.get("observer")
        usage: Usage | None
        ttft: float | None = None
        if observer is not None:
            usage, text = observer.usage, observer.text
            if observer.first_token_at is not None:
                ttft = observer.first_token_at - req.t0
            response_raw = None  # streams: bodies are kept as text only
        else:
            usage = response_usage(endpoint, attempt.parsed) if attempt.parsed else None
            text = response_text(endpoint, attempt.parsed) if attempt.parsed else ""
            response_raw = attempt.body
        if usage is None and attempt.status in (Status.OK, Status.CLIENT_DISCONNECTED):
            usage = Usage(
                input_tokens=count_tokens(prompt_text(endpoint, req.payload)),
                output_tokens=count_tokens(text),
                estimated=True,
            )
        usage = usage or Usage()
        duration = ended - req.t0
        return ExchangeRecord(
            request_id=req.request_id,
            route=req.plan.route.name,
            target=attempt.target,
            upstream_model=client.spec.model,
            arm=attempt.arm,
            endpoint=endpoint,
            provider=client.spec.provider,
            streamed=req.stream,
            started_at=req.started_at,
            duration_s=duration,
            ttft_s=ttft,
            overhead_s=max(0.0, duration - req.waited),
            status=attempt.status,
            http_status=http_status,
            usage=usage,
            cost_usd=cost_usd(usage, client.spec.price),
            error_class=attempt.error_class,
            request_body=attempt.upstream_body.decode("utf-8", "replace")
            if self.keep_bodies
            else None,
            response_body=(
                response_raw.decode("utf-8", "replace")
                if self.keep_bodies and response_raw
                else None
            ),
            response_text=text if self.keep_bodies else None,
        )


def _pump_outcome(pump: asyncio.Future[tuple[Status, str | None]]) -> tuple[Status, str | None]:
    exc = pump.exception()
    if exc is None:
        return pump.result()
    if isinstance(exc, OSError):  # the server could not write to the client any more
        return Status.CLIENT_DISCONNECTED, "client_disconnected"
    log.error("stream forwarding failed", exc_info=exc)
    return Status.INVALID_RESPONSE, type(exc).__name__


async def _wait_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


def _stream_error_event(wire: str, exc: GatewayError) -> bytes:
    """An in-stream error, as each provider signals one after the stream has started."""
    body = error_body(exc, "anthropic" if wire == "anthropic" else "openai")
    if wire == "anthropic":
        return b"event: error\ndata: " + body + b"\n\n"
    return b"data: " + body + b"\n\n"
