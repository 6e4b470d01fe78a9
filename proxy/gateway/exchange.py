"""One proxied request, from the client's bytes to the upstream and back, ending in records.

The client path is: read and validate the body → plan the route → call the upstream (once more on
the fallback if the primary fails before any byte was sent) → forward the answer (streams event by
event) → hand the record to the recorder, metrics and tracer. Nothing after the last byte is sent
delays the client; nothing before it waits on the store.

Every planned request ends in exactly one final record (`_serve`), however it ends: the answer,
an upstream failure, the client hanging up (noticed while the upstream call runs, while a stream
is forwarded, or when a write fails: `client_disconnected`, the call cancelled), the gateway
stopping (`cut`: `shutdown`, the client told in its wire format), cancellation, or a bug.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import time
from collections.abc import Callable, Sequence

from proxy.config import MirrorgateConfig
from proxy.core import (
    CUT_SHORT,
    FEEDBACK_TOKEN_HEADER,
    Arm,
    Endpoint,
    ExchangeRecord,
    FeedbackTokens,
    GatewayError,
    RecordSink,
    RequestError,
    RouteNotFound,
    Status,
    Unavailable,
    UnsupportedMediaType,
    UpstreamError,
    WrongWireFormat,
    error_body,
    loads_exact,
    request_operation,
    sticky_key,
    with_system_append,
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

from .asgi import (
    ClientGone,
    ClientSend,
    Headers,
    Receive,
    Scope,
    Send,
    header,
    read_body,
    send_bytes,
)
from .asgi import send_error as send_gateway_error
from .hooks import ExchangeObserver, FinishedExchange, RefusedRequest
from .routing import RoutePlan, RouteTable
from .rules import RuleResolver, RuleTracker

log = logging.getLogger("mirrorgate.exchange")

LAST_WORDS_S = 1.0
"""How long a cut exchange may take to tell its client (a client that stopped reading gets no
more)."""


_TASK_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_UUID_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


def new_request_id() -> str:
    """A new request id: a random UUID (version 4) in hex, as `uuid.uuid4().hex` makes it, at a
    third of its cost (no UUID object, no 128-bit integer)."""
    raw = os.urandom(16).hex()
    return f"{raw[:12]}4{raw[13:16]}{_UUID_VARIANT[raw[16]]}{raw[17:]}"


def task_tags(classifier: str, headers: Sequence[tuple[bytes, bytes]]) -> tuple[str, ...]:
    """`("task:<value>",)` when the route's evalset classifies tasks by a request header
    (`header:<name>`) and the request sent it: the store keeps no headers, so the header's value
    is kept as a tag, cut to 64 characters of `[A-Za-z0-9._-]` (it comes from the client)."""
    if not classifier.startswith("header:"):
        return ()
    raw = sticky_key(classifier, headers, {})  # the one reader of `header:<name>` settings
    if raw is None:
        return ()
    value = _TASK_UNSAFE.sub("_", raw[:256])[:64].strip("_")
    return (f"task:{value}",) if value else ()


class ProxyHandler:
    """Serves the proxied endpoints: the OpenAI and Anthropic wire formats, `model` naming a
    route.

    `sinks` receive every record of the client path (the recorder, the recent-answers index);
    `observers` hear the hooks of `proxy.gateway.hooks` (shadows, analysis). Both are fixed at
    construction, in the order given. `journal` (the crash journal's append) gets each answer's
    record just before the answer's last byte is sent, so that a crash of the process after the
    client has its answer cannot lose the record.
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
        feedback_tokens: FeedbackTokens | None = None,
        journal: RecordSink | None = None,
    ) -> None:
        self.config = config
        self.journal = journal
        self.routes = routes
        self.caller = caller
        self.metrics = metrics
        self.tracer = tracer
        self.sinks = tuple(sinks)
        self.observers = tuple(observers)
        self.max_body = config.server.max_body_bytes
        self.rules = RuleResolver(config)
        self.rule_tracker = rule_tracker
        """Records each rule version's first exchange (None: no rule is tracked)."""
        self.feedback_tokens = feedback_tokens
        """Signs each answer's feedback token (None: answers carry none)."""
        self.closing = False
        """True once `cut` was called: the gateway is stopping."""
        self._cuts: set[asyncio.Future[None]] = set()
        """One future per exchange in flight; `cut` completes them."""
        self._idle: asyncio.Future[None] | None = None
        """Completed when the last exchange in flight ends (`drained` waits for it)."""

    def reconfigure(self, config: MirrorgateConfig) -> None:
        """Plan new requests by `config` (a configuration reload; the route table and the model
        table are swapped by their owners). Requests in flight keep what they were planned with."""
        self.config = config
        self.rules = RuleResolver(config)

    # --- entry ------------------------------------------------------------------------------------

    async def __call__(
        self, scope: Scope, receive: Receive, send: Send, endpoint: Endpoint
    ) -> None:
        received = time.perf_counter()
        request_id = new_request_id()
        ids = [(b"x-mirrorgate-request-id", request_id.encode())]
        out = ClientSend(send)
        self.metrics.inflight.inc()
        try:
            try:
                ctx, plan = await self._prepare(scope, receive, endpoint, request_id)
                variant = (
                    with_system_append(ctx.endpoint.name, ctx.payload, plan.system_append)
                    if plan.system_append is not None
                    else None
                )
                attempt = self.caller.prepare(ctx, plan.target, plan.arm, variant)
            except GatewayError as exc:
                self.metrics.rejected.labels(endpoint.name, str(exc.status)).inc()
                with contextlib.suppress(ClientGone):
                    await send_gateway_error(out, exc, endpoint.wire, ids)
                if self.observers:
                    refusal = RefusedRequest(
                        request_id, endpoint, exc, time.perf_counter() - received
                    )
                    for observer in self.observers:
                        try:
                            observer.request_refused(refusal)
                        except Exception:
                            self._observer_failed(observer, "request_refused")
                return
            except ClientGone:
                return
            for observer in self.observers:
                try:
                    observer.request_planned(ctx, plan)
                except Exception:
                    self._observer_failed(observer, "request_planned")
            try:
                await self._serve(ctx, attempt, out, plan, receive)
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
        # The operation first: an experiment whose unit is the operation assigns by it.
        named = self.routes.get(model)
        operation = request_operation(
            scope["headers"], payload, named.spec.operation_field if named is not None else None
        )
        plan = self.routes.plan(model, scope["headers"], payload, request_id, operation=operation)
        if plan is None:
            known = ", ".join(sorted(self.routes.names())[:20])
            raise RouteNotFound(f"model '{model[:200]}' is not a route of this gateway ({known})")
        # Everything below reads this one generation of the model table and of the rules: a
        # reload swaps them whole, and this request keeps what it was planned with.
        models = self.caller.clients
        provider = models[plan.target].spec.provider
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
            credentials_for=models[plan.route.spec.primary].origin, models=models,
            operation_id=operation,
            experiment_arm=plan.experiment_arm, experiment_unit=plan.experiment_unit,
            sticky_unit=plan.sticky_unit,
            tags=task_tags(plan.route.spec.evalset.task, scope["headers"]),
        )  # fmt: skip
        if self.feedback_tokens is not None:
            ctx.feedback_token = self.feedback_tokens.issue(request_id, time.time())
        return ctx, plan

    # --- shutdown ---------------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Exchanges past their planning and not yet recorded."""
        return len(self._cuts)

    async def drained(self, timeout_s: float) -> bool:
        """Wait until no exchange is in flight, at most `timeout_s`; True if none is."""
        if self._cuts:
            self._idle = asyncio.get_running_loop().create_future()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._idle), timeout_s)
        return not self._cuts

    def cut(self) -> int:
        """The gateway is stopping and its drain time is over: end every exchange still in
        flight now, and any that starts later. Each is recorded as `shutdown`; a stream's client
        gets the provider's error event, a non-stream's a 503. Returns how many were cut."""
        self.closing = True
        cut = 0
        for future in self._cuts:
            if not future.done():
                future.set_result(None)
                cut += 1
        return cut

    # --- client -----------------------------------------------------------------------------------

    async def _serve(
        self, ctx: CallContext, attempt: Attempt, out: ClientSend, plan: RoutePlan, receive: Receive
    ) -> None:
        """Serve one planned request and record how it ended, whatever ends it: the answer, the
        client hanging up (`receive` says so, or `send` fails), the gateway cutting it (`cut`),
        cancellation, or a bug. `_emit` of the final record happens here and only here."""
        cut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._cuts.add(cut)
        if self.closing:
            cut.set_result(None)
        gone = asyncio.ensure_future(_wait_disconnect(receive))
        ex = _Exchange(ctx, attempt, out, gone, cut)
        try:
            await self._answer(ex, plan)
        except _Ended as end:
            await self._end(ex, end.status)
        except ClientGone as gone_while_sending:
            log.info("request %s: the client is gone (%s)", ctx.request_id, gone_while_sending)
            await self._end(ex, Status.CLIENT_DISCONNECTED)
        except asyncio.CancelledError:  # uvicorn's own drain deadline, or the loop going away
            ex.end(Status.SHUTDOWN if self.closing else Status.CLIENT_DISCONNECTED)
            raise
        except BaseException as exc:  # a bug: recorded all the same, then uvicorn logs it
            ex.attempt.error_class = f"internal:{type(exc).__name__}"
            self.metrics.internal_errors.labels("exchange").inc()
            raise
        finally:
            self._cuts.discard(cut)
            if not self._cuts and self._idle is not None and not self._idle.done():
                self._idle.set_result(None)
            gone.cancel()
            self._finish(ex)

    async def _answer(self, ex: _Exchange, plan: RoutePlan) -> None:
        ctx = ex.ctx
        await self._call(ex)
        fallback = plan.route.fallback
        if plan.arm in (Arm.CANARY, Arm.EXPERIMENT):
            fallback = fallback or plan.route.primary  # the client never sees the canary fail
        attempt = ex.attempt
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
            ex.attempt = attempt = self.caller.prepare(ctx, fallback, Arm.FALLBACK)
            await self._call(ex)
        if attempt.streaming:
            await self._stream(ex)
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
        if ex.gone.done():  # hung up while the answer came: nobody to send it to
            raise _Ended(Status.CLIENT_DISCONNECTED)
        ex.http_status = status
        # The record is complete here: what follows only says whether the client got it.
        ex.journaled = self._journal(ctx, attempt, status)
        await send_bytes(ex.out, status, body, headers)
        ex.ended = time.perf_counter()

    async def _call(self, ex: _Exchange) -> None:
        """Make `ex.attempt`'s upstream call, unless the client hangs up or the gateway cuts the
        exchange first: then the call is cancelled (its connection closed) and `_Ended` says
        why."""
        attempt = ex.attempt
        call = asyncio.ensure_future(self.caller.call(ex.ctx, attempt))
        try:
            await asyncio.wait((call, ex.gone, ex.cut), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not call.done():
                call.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await call
        if call.cancelled():
            raise _Ended(Status.SHUTDOWN if ex.cut.done() else Status.CLIENT_DISCONNECTED)
        call.result()  # a bug in the caller is raised here
        if not attempt.streaming:
            ex.ctx.waited += time.perf_counter() - attempt.t_sent

    async def _stream(self, ex: _Exchange) -> None:
        ctx, attempt = ex.ctx, ex.attempt
        response = attempt.response
        assert response is not None
        observer = attempt.observer = StreamObserver(ctx.endpoint.name, ctx.strip_usage)
        headers = _response_headers(ctx, attempt, response)
        headers.append((b"x-accel-buffering", b"no"))
        ex.http_status = response.status_code

        def before_last(outcome: tuple[Status, str | None]) -> None:
            ex.journaled = self._journal(ctx, attempt, response.status_code, outcome)

        pump = asyncio.ensure_future(
            _pump(attempt, observer, ex.out, headers, ctx.endpoint.wire, before_last)
        )
        try:
            await asyncio.wait((pump, ex.gone, ex.cut), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not pump.done():
                pump.cancel()
            with contextlib.suppress(BaseException):
                await pump
            await response.aclose()  # closes the upstream connection unless the answer was complete
            ctx.waited += time.perf_counter() - attempt.t_sent
        if not pump.cancelled():
            attempt.status, attempt.error_class = _pump_outcome(pump)
            ex.ended = time.perf_counter()
        elif ex.cut.done():
            raise _Ended(Status.SHUTDOWN)
        else:
            raise _Ended(Status.CLIENT_DISCONNECTED)

    async def _end(self, ex: _Exchange, status: Status) -> None:
        """The exchange was cut short (`client_disconnected` or `shutdown`): tell a client that
        is still there in its wire format, then mark the attempt."""
        if status is Status.SHUTDOWN and not ex.gone.done():
            error = Unavailable("the gateway is shutting down; retry the request")
            wire = ex.ctx.endpoint.wire
            try:
                async with asyncio.timeout(LAST_WORDS_S):  # a client that reads no more
                    if ex.out.started:
                        tail = _stream_error_event(wire, error)
                        if ex.attempt.observer is not None:
                            tail = ex.attempt.observer.close() + tail
                        body = {"type": "http.response.body", "body": tail, "more_body": False}
                        await ex.out(body)
                    else:
                        ex.http_status = error.status
                        await send_gateway_error(ex.out, error, wire, _ids(ex.ctx, ex.attempt))
            except (ClientGone, TimeoutError):
                pass
        ex.end(status)

    def _finish(self, ex: _Exchange) -> None:
        """The exchange's final record (once per exchange, from `_serve`)."""
        status = ex.attempt.status
        if status in CUT_SHORT:
            self.metrics.exchanges_cut.labels(ex.ctx.route, status.value).inc()
            log.debug("request %s ended early: %s", ex.ctx.request_id, status.value)
        ended = ex.ended if ex.ended is not None else time.perf_counter()
        self._emit(
            ex.ctx, ex.attempt, http_status=ex.http_status, ended=ended, prebuilt=ex.journaled
        )

    # --- records ----------------------------------------------------------------------------------

    def _emit(
        self,
        ctx: CallContext,
        attempt: Attempt,
        http_status: int,
        ended: float,
        *,
        final: bool = True,
        prebuilt: ExchangeRecord | None = None,
    ) -> None:
        """Build the record for one client-path attempt and hand it to the metrics, the tracer,
        the sinks and the observers. Never raises. `prebuilt`: the record journaled before the
        last byte, reused (retimed) when the exchange ended as it said."""
        try:
            if prebuilt is not None and (prebuilt.status, prebuilt.error_class) == (
                attempt.status,
                attempt.error_class,
            ):
                duration = ended - ctx.t0
                record = prebuilt.retimed(duration, max(0.0, duration - ctx.waited))
            else:
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

    def _journal(
        self,
        ctx: CallContext,
        attempt: Attempt,
        http_status: int,
        outcome: tuple[Status, str | None] | None = None,
    ) -> ExchangeRecord | None:
        """The record as it stands before the last byte, handed to the journal (None without
        one). `outcome`: how a stream ended, which the attempt learns only afterwards. The
        store keeps the record `_emit` hands it later; the journal's copy matters only if the
        process dies first. Never raises."""
        if self.journal is None:
            return None
        try:
            now = time.perf_counter()
            record = self.caller.record(ctx, attempt, http_status, now, own_clock=False)
            if outcome is not None:
                waited = ctx.waited + (now - attempt.t_sent)  # the stream's time upstream
                record = dataclasses.replace(
                    record,
                    status=outcome[0],
                    error_class=outcome[1],
                    overhead_s=max(0.0, record.duration_s - waited),
                )
            self.journal(record)
        except Exception:
            log.exception("could not journal the record of request %s", ctx.request_id)
            self.metrics.internal_errors.labels("journal").inc()
            return None
        return record

    def _observer_failed(self, observer: ExchangeObserver, hook: str) -> None:
        log.exception("observer %s failed in %s", type(observer).__name__, hook)
        self.metrics.internal_errors.labels("hook").inc()


def _ids(ctx: CallContext, attempt: Attempt) -> Headers:
    ids = [
        (b"x-mirrorgate-request-id", ctx.request_id.encode()),
        (b"x-mirrorgate-arm", attempt.arm.value.encode()),
    ]
    if ctx.experiment_arm is not None:
        ids.append((b"x-mirrorgate-experiment-arm", ctx.experiment_arm.encode()))
    if ctx.rule_version is not None:
        ids.append((b"x-mirrorgate-rule-version", ctx.rule_version.encode("latin-1", "replace")))
    if ctx.feedback_token is not None:
        ids.append((FEEDBACK_TOKEN_HEADER.encode(), ctx.feedback_token.encode()))
    return ids


def _response_headers(ctx: CallContext, attempt: Attempt, response: UpstreamResponse) -> Headers:
    # No `set-cookie`: cookies never go upstream, so one set by a model (any arm's) would only
    # plant that host's cookie on the gateway's origin.
    out: Headers = [
        (name, value)
        for name, value in response.headers
        if (lowered := name.lower().decode("latin-1")) not in HOP_BY_HOP and lowered != "set-cookie"
    ]
    out.extend(_ids(ctx, attempt))
    return out


async def _pump(
    attempt: Attempt,
    observer: StreamObserver,
    send: Send,
    headers: Headers,
    wire: str,
    before_last: Callable[[tuple[Status, str | None]], object] | None = None,
) -> tuple[Status, str | None]:
    """Forward the stream to the client; return how it ended. `before_last` hears how it
    ended just before the last chunk is sent."""
    response = attempt.response
    assert response is not None
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    held = b""  # the upstream's last bytes, sent with the end of the answer (one write)
    try:
        async for chunk in attempt.chunks():
            out = observer.feed(chunk)
            if response.received_all:
                held = out
                break
            if out:
                await send({"type": "http.response.body", "body": out, "more_body": True})
    except UpstreamError as exc:  # the upstream broke off: the client hears it in the stream
        tail = observer.close() + _stream_error_event(wire, exc)
        if before_last is not None:
            before_last(failure_outcome(exc))
        await send({"type": "http.response.body", "body": tail, "more_body": False})
        return failure_outcome(exc)
    # The record is complete here (but for whether this last write reaches the client).
    tail = held + observer.close()
    if before_last is not None:
        before_last(stream_outcome(observer))
    await send({"type": "http.response.body", "body": tail, "more_body": False})
    return stream_outcome(observer)


def _pump_outcome(pump: asyncio.Future[tuple[Status, str | None]]) -> tuple[Status, str | None]:
    exc = pump.exception()
    if exc is None:
        return pump.result()
    if isinstance(exc, ClientGone):  # the server could not write to the client any more
        return Status.CLIENT_DISCONNECTED, "client_disconnected"
    log.error("stream forwarding failed", exc_info=exc)
    return Status.INVALID_RESPONSE, type(exc).__name__


class _Ended(Exception):
    """The exchange was cut short before its answer was complete (`status` says why)."""

    def __init__(self, status: Status) -> None:
        super().__init__(status.value)
        self.status = status


class _Exchange:
    """One planned client request in flight: the attempt serving it (the fallback replaces the
    primary), the client's side (`out`, and `gone`: done once the client hung up), `cut` (done
    once the gateway cuts it), and what its record says the client got."""

    __slots__ = ("attempt", "ctx", "cut", "ended", "gone", "http_status", "journaled", "out")

    def __init__(
        self,
        ctx: CallContext,
        attempt: Attempt,
        out: ClientSend,
        gone: asyncio.Future[None],
        cut: asyncio.Future[None],
    ) -> None:
        self.ctx = ctx
        self.attempt = attempt
        self.out = out
        self.gone = gone
        self.cut = cut
        self.http_status = 0
        """The status the client received (0: none was sent)."""
        self.ended: float | None = None
        """When the last byte went out (None: it did not)."""
        self.journaled: ExchangeRecord | None = None
        """The record handed to the crash journal before the last byte (None: none was)."""

    def end(self, status: Status) -> None:
        """Record the exchange as cut short: `client_disconnected` or `shutdown`."""
        self.attempt.status, self.attempt.error_class = status, status.value


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
