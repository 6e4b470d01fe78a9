"""Calling one upstream model and turning the outcome into an `ExchangeRecord`.

Shared by every arm: the client path (primary, canary, fallback) forwards what `ModelCaller.open`
returns to the client (a stream through `Attempt.chunks`); shadows and replays `consume` it
themselves. Either way `record` builds the frozen record from the same facts, so every arm is
measured the same way. Every call into the transport goes through `errors` (`gateway_errors`,
`translated_stream`), so a failure reaches the attempt, and the client path, as the gateway's
`UpstreamError`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from proxy.core import (
    Arm,
    Endpoint,
    ExchangeRecord,
    GatewayError,
    RequestError,
    Status,
    UpstreamError,
    UpstreamTimeout,
    Usage,
    cost_usd,
    dumps_exact,
)

from .client import UpstreamClient
from .errors import LIMIT_ERROR_CLASSES, gateway_errors, translated_stream
from .http11 import UpstreamResponse
from .streaming import StreamObserver
from .tokens import estimate_usage
from .usage import response_text, response_usage

Headers = list[tuple[bytes, bytes]]

TOTAL_TIMEOUT_FACTOR = 10
"""A model without `total_timeout_s` gives a call this many times its `timeout_s` in all."""


@dataclass(slots=True)
class CallContext:
    """One client request, as every arm that serves or shadows it sees it."""

    request_id: str
    route: str
    endpoint: Endpoint
    payload: dict[str, Any]
    """The client's body, parsed; `model` is rewritten per target when a call is made."""
    stream: bool
    strip_usage: bool
    """The gateway asked for a usage chunk the client did not ask for (strip it on the way)."""
    headers: Headers
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    t0: float = field(default_factory=time.perf_counter)
    start_ns: int = field(default_factory=time.time_ns)
    waited: float = 0.0
    """Seconds the client path spent waiting on upstreams (all attempts), for the overhead."""
    tags: tuple[str, ...] = ()
    rule: str | None = None
    """The rule set governing the request (rules issue), if any."""
    rule_version: str | None = None
    system_prompt: str | None = None
    """The request's system prompt, when the rule resolver already extracted it (so that later
    readers do not extract it again); None when nobody needed it yet."""
    feedback_token: str | None = None
    """The signed token answered as `x-mirrorgate-feedback-token` (None: none is issued)."""
    credentials_for: str | None = None
    """The upstream origin the client's credentials were meant for: its route's configured
    primary's (`ModelSpec.origin`). None: no upstream's (the judge's and replays' calls)."""
    models: Mapping[str, UpstreamClient] | None = None
    """The model table this request was planned with (None: the caller's current one). A
    configuration reload swaps the caller's table; a request that started before it keeps
    calling — fallback included — the models it was planned with."""
    operation_id: str | None = None
    """The business operation the request is part of (`proxy.core.request_operation`); every
    record made in this context carries it."""
    experiment_arm: str | None = None
    """The experiment arm the request was assigned to (recorded on each of its calls)."""
    experiment_unit: str | None = None
    """The experiment unit's keyed hash (recorded with `experiment_arm`)."""
    sticky_unit: str | None = None
    """The request's sticky unit (`proxy.core.sticky_unit`), recorded on each of its calls."""


@dataclass(slots=True)
class Attempt:
    """One upstream call. Its clock starts when the call is made unless `own_clock` is False."""

    target: str
    arm: Arm
    upstream_body: bytes
    t_sent: float
    started_at: datetime
    start_ns: int
    client: UpstreamClient
    """The model's client this attempt was prepared with (it stays the same across a reload)."""
    response: UpstreamResponse | None = None
    body: bytes | None = None
    """Non-streamed answers (and error answers): the whole body, already read."""
    parsed: dict[str, Any] | None = None
    observer: StreamObserver | None = None
    status: Status = Status.OK
    error_class: str | None = None
    error: GatewayError | None = None
    pair_id: str | None = None

    @property
    def retryable(self) -> bool:
        """Failed in a way that a fallback may fix (nothing reached the client yet)."""
        if self.error is not None:
            return True
        return self.response is not None and self.response.status_code >= 500

    @property
    def streaming(self) -> bool:
        """A 2xx stream whose body has not been read yet."""
        return self.response is not None and self.body is None and self.error is None

    def chunks(self) -> AsyncIterator[bytes]:
        """The streamed answer's body as it arrives (see `UpstreamResponse.aiter_raw`). A
        transport failure raises the gateway's `UpstreamTimeout`/`UpstreamError`, worded for
        a stream that broke after it started."""
        if self.response is None:
            raise RuntimeError("the attempt has no response to stream")
        return translated_stream(self.response.aiter_raw(), self.target)

    def fail(self, error: UpstreamError) -> None:
        """Note the (translated) failure of the call: status, `error_class` and the error."""
        self.status, self.error_class = failure_outcome(error)
        self.error = error


class ModelCaller:
    """Makes upstream calls and builds their records."""

    def __init__(self, clients: dict[str, UpstreamClient], keep_bodies: bool) -> None:
        self.clients = clients
        self.keep_bodies = keep_bodies

    async def open(self, ctx: CallContext, target: str, arm: Arm) -> Attempt:
        """Send the request to `target`: `prepare`, then `call`. Never raises for upstream
        failures: the attempt says."""
        attempt = self.prepare(ctx, target, arm)
        await self.call(ctx, attempt)
        return attempt

    def client_for(self, ctx: CallContext, target: str) -> UpstreamClient:
        """The client of model `target` for a call in `ctx` (its planned table, if it has one)."""
        return (ctx.models if ctx.models is not None else self.clients)[target]

    def prepare(
        self,
        ctx: CallContext,
        target: str,
        arm: Arm,
        payload: dict[str, Any] | None = None,
    ) -> Attempt:
        """The attempt of a call to `target`, its body encoded and its clock started, before
        anything is sent: whoever cancels `call` still holds what to record. `payload`: sent
        instead of the client's (an experiment arm's prompt variant). Raises `RequestError`
        when the body cannot be encoded."""
        client = self.client_for(ctx, target)
        ctx.payload["model"] = client.spec.model
        body = ctx.payload
        if payload is not None:
            payload["model"] = client.spec.model
            body = payload
        try:
            upstream_body = dumps_exact(body)
        except (TypeError, ValueError) as exc:
            raise RequestError(f"request body cannot be forwarded: {exc}") from None
        return Attempt(
            target,
            arm,
            upstream_body,
            time.perf_counter(),
            datetime.now(UTC),
            time.time_ns(),
            client,
        )

    async def call(self, ctx: CallContext, attempt: Attempt) -> None:
        """Make the prepared call, within the model's total deadline. Non-streamed (and error)
        answers are read whole; a 2xx stream is left unread in `attempt.response`. Never raises
        for upstream failures: the attempt says (a deadline that ran out is `UpstreamTimeout`
        with `error_class` "UpstreamTotalTimeout")."""
        spec = attempt.client.spec
        total = spec.total_timeout_s or TOTAL_TIMEOUT_FACTOR * spec.timeout_s
        try:
            async with asyncio.timeout(total):
                await self._call(ctx, attempt)
        except TimeoutError:
            if attempt.response is not None:
                await attempt.response.aclose()
                attempt.response = None
            attempt.body = None
            attempt.fail(
                UpstreamTimeout(
                    f"upstream model '{attempt.target}' did not answer within {total:g}s",
                    error_class="UpstreamTotalTimeout",
                )
            )

    async def _call(self, ctx: CallContext, attempt: Attempt) -> None:
        target = attempt.target
        client = attempt.client
        try:
            with gateway_errors(target):
                response = await client.send(
                    ctx.endpoint.upstream_path,
                    attempt.upstream_body,
                    ctx.headers,
                    ctx.credentials_for,
                )
        except UpstreamError as exc:
            attempt.fail(exc)
            return
        attempt.response = response
        if ctx.stream and response.status_code < 300:
            return
        try:
            with gateway_errors(target):
                attempt.body = await response.aread()
        except UpstreamError as exc:
            attempt.fail(exc)
            return
        finally:
            await response.aclose()
        if response.status_code >= 300:
            attempt.status = Status.UPSTREAM_ERROR
            attempt.error_class = f"http_{response.status_code}"
            return
        try:
            parsed = orjson.loads(attempt.body)
        except orjson.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict):
            attempt.status = Status.INVALID_RESPONSE
            attempt.error_class = "invalid_json"
            attempt.error = UpstreamError(f"upstream model '{target}' returned an invalid response")
        else:
            attempt.parsed = parsed

    async def consume(self, ctx: CallContext, attempt: Attempt) -> None:
        """Read a streamed answer to its end without a client (shadows, replays)."""
        response = attempt.response
        if not attempt.streaming or response is None:
            return
        observer = attempt.observer = StreamObserver(ctx.endpoint.name, strip_usage=False)
        try:
            with gateway_errors(attempt.target):
                async for chunk in response.aiter_raw():
                    observer.feed(chunk)
            observer.close()
        except UpstreamError as exc:
            attempt.fail(exc)
        finally:
            await response.aclose()
        if attempt.status is Status.OK:
            attempt.status, attempt.error_class = stream_outcome(observer)

    @staticmethod
    def answer_text(ctx: CallContext, attempt: Attempt) -> str:
        """The answer's text, whatever the bodies policy (for comparisons, never stored)."""
        if attempt.observer is not None:
            return attempt.observer.text
        return response_text(ctx.endpoint.name, attempt.parsed) if attempt.parsed else ""

    def record(
        self, ctx: CallContext, attempt: Attempt, http_status: int, ended: float, *, own_clock: bool
    ) -> ExchangeRecord:
        """The record of one attempt. `own_clock`: time it from its own start (shadows) rather
        than from the client request's arrival (client-path arms)."""
        client = attempt.client
        endpoint = ctx.endpoint.name
        observer = attempt.observer
        ttft: float | None = None
        t0 = attempt.t_sent if own_clock else ctx.t0
        if observer is not None:
            usage, text, raw = observer.usage, observer.text, None
            if observer.first_token_at is not None:
                ttft = observer.first_token_at - t0
        else:
            parsed = attempt.parsed
            usage = response_usage(endpoint, parsed) if parsed else None
            text = response_text(endpoint, parsed) if parsed else ""
            raw = attempt.body
        if usage is None and attempt.status in _BILLED_UNREPORTED:
            usage = estimate_usage(endpoint, ctx.payload, text)  # bounded: on the loop
        usage = usage or Usage()
        duration = ended - t0
        waited = ended - attempt.t_sent if own_clock else ctx.waited
        keep = self.keep_bodies
        return ExchangeRecord(
            request_id=ctx.request_id,
            route=ctx.route,
            target=attempt.target,
            upstream_model=client.spec.model,
            arm=attempt.arm,
            endpoint=endpoint,
            provider=client.spec.provider,
            streamed=ctx.stream,
            started_at=attempt.started_at if own_clock else ctx.started_at,
            duration_s=duration,
            ttft_s=ttft,
            overhead_s=max(0.0, duration - waited),
            status=attempt.status,
            http_status=http_status,
            usage=usage,
            cost_usd=cost_usd(usage, client.spec.price),
            error_class=attempt.error_class,
            rule=ctx.rule,
            rule_version=ctx.rule_version,
            pair_id=attempt.pair_id,
            tags=ctx.tags,
            request_body=attempt.upstream_body.decode("utf-8", "replace") if keep else None,
            response_body=raw.decode("utf-8", "replace") if keep and raw else None,
            response_text=text if keep else None,
            operation_id=ctx.operation_id,
            experiment_arm=ctx.experiment_arm,
            experiment_unit=ctx.experiment_unit,
            sticky_unit=ctx.sticky_unit,
        )


_BILLED_UNREPORTED = (Status.OK, Status.CLIENT_DISCONNECTED, Status.SHUTDOWN)
"""Ends of a call the upstream bills whether or not it said how much: counted when unreported."""


def failure_outcome(error: UpstreamError) -> tuple[Status, str | None]:
    """How a failed upstream call is recorded: a timeout, else a connection failure, with the
    transport's error class as the cause. An answer that broke a size or duration limit is an
    invalid response."""
    if error.error_class in LIMIT_ERROR_CLASSES:
        return Status.INVALID_RESPONSE, error.error_class
    status = Status.TIMEOUT if isinstance(error, UpstreamTimeout) else Status.CONNECT_ERROR
    return status, error.error_class


def stream_outcome(observer: StreamObserver) -> tuple[Status, str | None]:
    """How a stream that ended without a transport error went."""
    if observer.malformed:
        return Status.INVALID_RESPONSE, "malformed_event"
    if observer.error_event is not None:
        return Status.UPSTREAM_ERROR, "stream_error_event"
    if not observer.finished:
        return Status.INVALID_RESPONSE, "stream_incomplete"
    return Status.OK, None
