"""The one place where errors become HTTP answers on the FastAPI side (admin, rollouts, feedback,
the Alertmanager webhook, models, health): routers raise, `install_error_handling` answers.

    GatewayError            its own status, in the OpenAI error format (`error_response`);
                            a `PhaseConflict` (409) also names the route's current phase,
                            a `TooManyRequests` (429) says `Retry-After`
    StoreUnavailableError   503 (`Unavailable`): the call changed nothing, try again later.
                            A router that knows better what became of the call says so with
                            `store_unavailable(exc, outcome)`
    ClientGone              nothing (the client left, or its body timed out and the connection
                            already answered 408): not a bug, not counted
    a request FastAPI       400 (`RequestError`) naming the parameter and what is wrong with it
      cannot validate       (e.g. `?limit=abc`), instead of FastAPI's own 422 `{"detail": ...}`
    no such path/method     Starlette's 404 or 405 (with `Allow`), in the wire format of the
                            path's family (`routing_error`): Anthropic's under /v1/messages,
                            else OpenAI's; another method than POST on a proxied endpoint is 405
    anything else           a bug: 500 in the same format, logged with its traceback and
                            counted in `mirrorgate_internal_errors_total{component="api"}`

The proxied endpoints answer their own errors in the caller's wire format (`proxy.gateway`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.core import (
    ENDPOINTS,
    Conflict,
    GatewayError,
    NotFound,
    RequestError,
    TooManyRequests,
    Unavailable,
    WireFormat,
    error_body,
)
from proxy.gateway import ClientGone
from proxy.observability import GatewayMetrics
from proxy.store import StoreUnavailableError

log = logging.getLogger("mirrorgate.api")

INTERNAL_ERROR_MESSAGE = "mirrorgate failed on this request (an internal error; it is logged)"
"""The message of every 500: the exception's own text may hold anything, so it stays in the log."""


class PhaseConflict(Conflict):
    """409: a rollout action the route cannot take now; the body's `error.phase` says where the
    route is (None: no rollout)."""

    def __init__(self, message: str, phase: str | None) -> None:
        super().__init__(message)
        self.phase = phase


class RoutingError(GatewayError):
    """Starlette's routing answered by itself (no such path, a method the path does not take):
    its status, in our format."""

    openai_type = "invalid_request_error"
    anthropic_type = "invalid_request_error"

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def error_response(exc: GatewayError) -> JSONResponse:
    """`exc` as its HTTP status and OpenAI-format error body."""
    body = orjson.loads(error_body(exc, "openai"))
    if isinstance(exc, PhaseConflict):
        body["error"]["phase"] = exc.phase
    if isinstance(exc, TooManyRequests):
        retry = str(max(1, math.ceil(exc.retry_after_s)))
        return JSONResponse(body, status_code=exc.status, headers={"retry-after": retry})
    return JSONResponse(body, status_code=exc.status)


def path_wire(path: str) -> WireFormat:
    """The wire format of a path's family: Anthropic's under `/v1/messages`, else OpenAI's
    (which is also the gateway's own shape, for the admin API and the rest)."""
    return "anthropic" if path == "/v1/messages" or path.startswith("/v1/messages/") else "openai"


def routing_error(
    path: str, method: str, status: int, headers: Mapping[str, str] | None = None
) -> Response:
    """Starlette's own 404 (no such path) or 405 (a method the path does not take, `Allow`
    kept), in the wire format of the path's family. A proxied endpoint asked with another
    method than POST is a 405 (Starlette, which never sees its POSTs, would say 404)."""
    shown = path[:200]
    endpoint = ENDPOINTS.get(path)
    if status == 404 and endpoint is not None:
        status, headers = 405, {"allow": "POST"}
    error: GatewayError
    if status == 404:
        error = NotFound(f"no such path: {shown}")
    else:
        reason = "Method Not Allowed" if status == 405 else "the request cannot be routed"
        error = RoutingError(f"{method[:20]} {shown}: {reason}", status)
    wire = endpoint.wire if endpoint is not None else path_wire(path)
    return Response(
        error_body(error, wire),
        status_code=error.status,
        headers=dict(headers or {}),
        media_type="application/json",
    )


def store_unavailable(exc: StoreUnavailableError, outcome: str = "nothing changed") -> Unavailable:
    """The API's 503 for a store that cannot be reached: what became of the call (`outcome`),
    then the store's reason."""
    return Unavailable(f"{outcome}: {exc}")


def install_error_handling(app: FastAPI, metrics: GatewayMetrics) -> None:
    """Answer every error a route of `app` raises as the module docstring says."""

    @app.exception_handler(GatewayError)
    async def gateway_error(_request: Request, exc: GatewayError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(ClientGone)
    async def client_gone(_request: Request, _exc: ClientGone) -> JSONResponse:
        # Nobody reads this answer; the server drops it.
        return error_response(RequestError("the client left before its request was read"))

    @app.exception_handler(StoreUnavailableError)
    async def unavailable(_request: Request, exc: StoreUnavailableError) -> JSONResponse:
        return error_response(store_unavailable(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for error in exc.errors()[:5]:
            where = " ".join(str(part) for part in error.get("loc", ()))[:200]
            problems.append(f"{where}: {str(error.get('msg', 'invalid'))[:200]}")
        return error_response(RequestError("; ".join(problems) or "the request is not valid"))

    @app.exception_handler(StarletteHTTPException)
    async def routing(request: Request, exc: StarletteHTTPException) -> Response:
        return routing_error(request.url.path, request.method, exc.status_code, exc.headers)

    app.add_middleware(InternalErrorMiddleware, metrics=metrics)


class InternalErrorMiddleware:
    """Turns an exception no handler answered into the 500 of the module docstring.

    It sits inside Starlette's own error middleware, which would otherwise answer a plain-text
    500 and re-raise the exception to the server.
    """

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception:
            log.exception("%s %s failed", scope.get("method", "?"), scope.get("path", "?"))
            self.metrics.internal_errors.labels("api").inc()
            if started:  # too late for an error answer: let the server drop the connection
                raise
            response = error_response(GatewayError(INTERNAL_ERROR_MESSAGE))
            await response(scope, receive, send)
