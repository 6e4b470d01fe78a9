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
from collections.abc import Sequence

from proxy.config import MirrorgateConfig
from proxy.core import (
    Arm,
    Endpoint,
    GatewayError,
    RecordSink,
    RequestError,
    RouteNotFound,
    Status,
    UnsupportedMediaType,
    UpstreamError,
    WrongWireFormat,
    error_body,
    loads_exact,
)
from proxy.observability import ExchangeTracer, GatewayMetrics
from proxy.upstream import (
    HOP_BY_HOP,
    Attempt,
    CallContext,
    ModelCaller,
    StreamObserver,
    UpstreamResponse,
    failure_outcome,
    stream_outcome,
)

from .asgi import ClientGone, Headers, Receive, Scope, Send, header, read_body, send_bytes
from .asgi import send_error as send_gateway_error
from .hooks import ExchangeObserver, FinishedExchange
from .routing import RoutePlan, RouteTable
from .rules import RuleResolver, RuleTracker

log = logging.getLogger("mirrorgate.exchange")


class ProxyHandler:
    """Serves the proxied endpoints: the OpenAI and Anthropic wire formats, `model` naming a
    route.

    `sinks` receive every record of the client path (the recorder, the recent-answers index);
    `observers` hear the hooks of `proxy.gateway.hooks` (shadows, analysis). Both are fixed at
    construction, in the order given.
    """

    def __init__(
        self,
        config: MirrorgateConfig,
        routes: RouteTable,
        caller: ModelCaller,
        metrics: GatewayMetrics,
        tracer: ExchangeTracer,
        *,
        sinks: Sequence[RecordSink] = (),
        observers: Sequence[ExchangeObserver] = (),
        rule_tracker: RuleTracker | None = None,
    ) -> None:
        self.config = config
        self.routes = routes
        self.caller = caller
        self.clients = caller.clients
        self.metrics = metrics
        self.tracer = tracer
        self.sinks = tuple(sinks)
        self.observers = tuple(observers)
        self.max_body = config.server.max_body_bytes
        self.rules = RuleResolver(config)
        self.rule_tracker = rule_tracker
        """Records each rule version's first exchange (None: no rule is tracked)."""

    # --- entry ------------------------------------------------------------------------------------

    async def __call__(
        self, scope: Scope, receive: Receive, send: Send, endpoint: Endpoint
    ) -> None:
        request_id = uuid.uuid4().hex
        ids = [(b"x-mirrorgate-request-id", request_id.encode())]
        self.metrics.inflight.inc()
        try:
            try:
                ctx, plan = await self._prepare(scope, receive, endpoint, request_id)
            except GatewayError as exc:
                self.metrics.rejected.labels(endpoint.name, str(exc.status)).inc()
                await send_gateway_error(send, exc, endpoint.wire, ids)
                return
            except ClientGone:
                return
            for observer in self.observers:
                try:
                    observer.request_planned(ctx, plan)
                except Exception:
                    self._observer_failed(observer, "request_planned")
            try:
                await self._serve(ctx, plan, receive, send)
            finally:
                for observer in self.observers:
                    try:
                        observer.request_closed(ctx)
                    except Exception:
                        self._observer_failed(observer, "request_closed")
        finally:
            self.metrics.inflight.dec()

    async def _prepare(
        self, scope: Scope, receive: Receive, endpoint: Endpoint, request_id: str
    ) -> tuple[CallContext, RoutePlan]:
        ctx_clock = (time.perf_counter(), time.time_ns())
        content_type = header(scope, b"content-type") or b""
        body = await read_body(scope, receive, self.max_body)
        if b"json" not in content_type.lower():
            given = content_type.decode("latin-1")[:100]
            raise UnsupportedMediaType(f"content-type must be application/json, not '{given}'")
        try:
            payload = loads_exact(body)  # integers beyond 64 bits stay integers
        except ValueError as exc:  # orjson.JSONDecodeError, or nested too deeply
            reason = "not valid UTF-8" if "UTF-8" in str(exc) else f"not valid JSON ({exc})"
            raise RequestError(f"request body is {reason}") from None
        if not isinstance(payload, dict):
            raise RequestError("request body must be a JSON object")
        model = payload.get("model")
        if not isinstance(model, str) or not model:
            raise RequestError("'model' is required and must name a route")
        plan = self.routes.plan(model, scope["headers"], payload, request_id)
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
        match = self.rules.resolve(plan.route.name, endpoint.name, payload, scope["headers"])
        if match is not None and self.rule_tracker is not None:
            match = self.rule_tracker.observe(match, plan.route.name, request_id)
        ctx = CallContext(
            request_id, plan.route.name, endpoint, payload, stream, strip, scope["headers"],
            t0=ctx_clock[0], start_ns=ctx_clock[1],
            rule=match.rule if match else None, rule_version=match.version if match else None,
            system_prompt=match.system_prompt if match else None,
        )  # fmt: skip
        return ctx, plan

    # --- client -----------------------------------------------------------------------------------

    async def _open(self, ctx: CallContext, target: str, arm: Arm) -> Attempt:
        attempt = await self.caller.open(ctx, target, arm)
        if not attempt.streaming:
            ctx.waited += time.perf_counter() - attempt.t_sent
        return attempt

    async def _serve(
        self,
        ctx: CallContext,
        plan: RoutePlan,
        receive: Receive,
        send: Send,
    ) -> None:
        attempt = await self._open(ctx, plan.target, plan.arm)
        fallback = plan.route.fallback
        if plan.arm is Arm.CANARY:
            fallback = fallback or plan.route.primary  # the client never sees the canary fail
        if attempt.retryable and fallback is not None and fallback != attempt.target:
            # Recorded with the status the client would have seen, though it never did.
            abandoned = (
                attempt.response.status_code
                if attempt.response is not None
                else attempt.error.status
                if attempt.error is not None
                else 0
            )
            self._emit(ctx, attempt, http_status=abandoned, ended=time.perf_counter(), final=False)
            attempt = await self._open(ctx, fallback, Arm.FALLBACK)
        if attempt.streaming:
            await self._stream(ctx, attempt, receive, send)
            return
        if attempt.error is not None:
            status = attempt.error.status
            headers = [(b"content-type", b"application/json"), *_ids(ctx, attempt)]
            body = error_body(attempt.error, ctx.endpoint.wire)
        else:
            response = attempt.response
            assert response is not None
            status = response.status_code
            headers = _response_headers(ctx, attempt, response)
            body = attempt.body or b""
        try:
            await send_bytes(send, status, body, headers)
        except OSError:
            attempt.status, attempt.error_class = Status.CLIENT_DISCONNECTED, "client_disconnected"
        self._emit(ctx, attempt, http_status=status, ended=time.perf_counter())

    async def _stream(
        self,
        ctx: CallContext,
        attempt: Attempt,
        receive: Receive,
        send: Send,
    ) -> None:
        response = attempt.response
        assert response is not None
        observer = attempt.observer = StreamObserver(ctx.endpoint.name, ctx.strip_usage)
        headers = _response_headers(ctx, attempt, response)
        headers.append((b"x-accel-buffering", b"no"))
        pump = asyncio.ensure_future(_pump(attempt, observer, send, headers, ctx.endpoint.wire))
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
            await response.aclose()  # closes the upstream connection unless the answer was complete
        if attempt.status is Status.OK:
            attempt.status, attempt.error_class = _pump_outcome(pump)
        ended = time.perf_counter()
        ctx.waited += ended - attempt.t_sent
        self._emit(ctx, attempt, http_status=response.status_code, ended=ended)

    # --- records ----------------------------------------------------------------------------------

    def _emit(
        self,
        ctx: CallContext,
        attempt: Attempt,
        http_status: int,
        ended: float,
        *,
        final: bool = True,
    ) -> None:
        """Build the record for one client-path attempt and hand it to the metrics, the tracer,
        the sinks and the observers. Never raises."""
        try:
            record = self.caller.record(ctx, attempt, http_status, ended, own_clock=False)
        except Exception:
            log.exception("could not build the record for request %s", ctx.request_id)
            self.metrics.internal_errors.labels("exchange").inc()
            return
        self.metrics.observe(record)
        self.metrics.observe_overhead(record.route, record.overhead_s)
        span = None
        if self.tracer.enabled:
            span = self.tracer.record(record, ctx.start_ns, ctx.endpoint.operation)
        for sink in self.sinks:
            try:
                sink(record)
            except Exception:
                log.exception("record sink %r failed", sink)
                self.metrics.internal_errors.labels("sink").inc()
        if self.observers:
            done = FinishedExchange(
                ctx, record, self.caller.answer_text(ctx, attempt), attempt.parsed, span, final
            )
            for observer in self.observers:
                try:
                    observer.exchange_finished(done)
                except Exception:
                    self._observer_failed(observer, "exchange_finished")

    def _observer_failed(self, observer: ExchangeObserver, hook: str) -> None:
        log.exception("observer %s failed in %s", type(observer).__name__, hook)
        self.metrics.internal_errors.labels("hook").inc()


def _ids(ctx: CallContext, attempt: Attempt) -> Headers:
    ids = [
        (b"x-mirrorgate-request-id", ctx.request_id.encode()),
        (b"x-mirrorgate-arm", attempt.arm.value.encode()),
    ]
    if ctx.rule_version is not None:
        ids.append((b"x-mirrorgate-rule-version", ctx.rule_version.encode("latin-1", "replace")))
    return ids


def _response_headers(ctx: CallContext, attempt: Attempt, response: UpstreamResponse) -> Headers:
    out: Headers = [
        (name, value)
        for name, value in response.headers
        if name.lower().decode("latin-1") not in HOP_BY_HOP
    ]
    out.extend(_ids(ctx, attempt))
    return out


async def _pump(
    attempt: Attempt,
    observer: StreamObserver,
    send: Send,
    headers: Headers,
    wire: str,
) -> tuple[Status, str | None]:
    """Forward the stream to the client; return how it ended."""
    response = attempt.response
    assert response is not None
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    try:
        async for chunk in attempt.chunks():
            out = observer.feed(chunk)
            if out:
                await send({"type": "http.response.body", "body": out, "more_body": True})
    except UpstreamError as exc:  # the upstream broke off: the client hears it in the stream
        tail = observer.close() + _stream_error_event(wire, exc)
        await send({"type": "http.response.body", "body": tail, "more_body": False})
        return failure_outcome(exc)
    await send({"type": "http.response.body", "body": observer.close(), "more_body": False})
    return stream_outcome(observer)


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
