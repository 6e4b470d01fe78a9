"""The gateway's errors, and the one place they become HTTP responses.

    GatewayError                      every error a client can get from mirrorgate itself
    ├── RequestError                  400: the request is not something we can forward
    │   ├── UnsupportedMediaType      415: not application/json
    │   └── WrongWireFormat           400: the route's models speak another wire format
    ├── AuthError                     401: missing or wrong token (admin, hooks)
    ├── ForbiddenError                403
    ├── RouteNotFound                 404: `model` names no route
    ├── NotFound                      404: anything else unknown (request id, rollout)
    ├── Conflict                      409: an illegal transition
    ├── PayloadTooLarge               413: the body is over `server.max_body_bytes`
    ├── TooManyRequests               429: a caller over its rate (feedback); says when to retry
    ├── RequestTimeout                408: headers or body not received in time (`server.limits`)
    ├── HeadersTooLarge               431: request headers over `server.limits` (size or count)
    └── UpstreamError                 502: the upstream failed (unreachable, reset, garbage)
        └── UpstreamTimeout           504: the upstream did not answer in time

The upstream client's transport errors become `UpstreamError`/`UpstreamTimeout` in one place,
`proxy.upstream.errors`; nothing else sees them. Upstream HTTP errors (a 429 or a 400 from the
model) are not ours: they pass through unchanged, in the upstream's own words, so SDK retry
logic keeps working.
"""

from __future__ import annotations

from typing import Literal

import orjson

WireFormat = Literal["openai", "anthropic"]


class GatewayError(Exception):
    """Base of every error mirrorgate answers by itself."""

    status = 500
    openai_type = "server_error"
    anthropic_type = "api_error"
    code: str | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class RequestError(GatewayError):
    status = 400
    openai_type = "invalid_request_error"
    anthropic_type = "invalid_request_error"


class UnsupportedMediaType(RequestError):
    status = 415


class WrongWireFormat(RequestError):
    pass


class AuthError(GatewayError):
    status = 401
    openai_type = "authentication_error"
    anthropic_type = "authentication_error"


class ForbiddenError(GatewayError):
    status = 403
    openai_type = "permission_error"
    anthropic_type = "permission_error"


class RouteNotFound(GatewayError):
    status = 404
    openai_type = "invalid_request_error"
    anthropic_type = "not_found_error"
    code = "model_not_found"


class NotFound(GatewayError):
    status = 404
    openai_type = "invalid_request_error"
    anthropic_type = "not_found_error"


class Conflict(GatewayError):
    status = 409
    openai_type = "invalid_request_error"
    anthropic_type = "invalid_request_error"


class Unavailable(GatewayError):
    """mirrorgate cannot do this right now (its store is unreachable); retrying later may work."""

    status = 503
    openai_type = "server_error"
    anthropic_type = "overloaded_error"


class PayloadTooLarge(GatewayError):
    status = 413
    openai_type = "invalid_request_error"
    anthropic_type = "request_too_large"


class TooManyRequests(GatewayError):
    """429: the caller is over its rate; `retry_after_s` says when one more call is accepted
    (answered as `Retry-After`, whole seconds rounded up)."""

    status = 429
    openai_type = "rate_limit_error"
    anthropic_type = "rate_limit_error"
    code = "rate_limit_exceeded"

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RequestTimeout(GatewayError):
    status = 408
    openai_type = "invalid_request_error"
    anthropic_type = "invalid_request_error"
    code = "request_timeout"


class HeadersTooLarge(GatewayError):
    status = 431
    openai_type = "invalid_request_error"
    anthropic_type = "invalid_request_error"
    code = "request_header_fields_too_large"


class UpstreamError(GatewayError):
    status = 502
    openai_type = "upstream_error"
    anthropic_type = "api_error"

    def __init__(self, message: str, error_class: str | None = None) -> None:
        super().__init__(message)
        self.error_class = error_class
        """What failed underneath, as the exchange record's `error_class` (`UpstreamReadTimeout`,
        `UpstreamConnectError`); None when the gateway itself decided (a shadow's own timeout)."""


class UpstreamTimeout(UpstreamError):
    status = 504
    openai_type = "timeout"
    anthropic_type = "timeout_error"


def error_body(exc: GatewayError, wire: WireFormat) -> bytes:
    """The JSON error body in the caller's wire format."""
    if wire == "anthropic":
        return orjson.dumps(
            {"type": "error", "error": {"type": exc.anthropic_type, "message": exc.message}}
        )
    return orjson.dumps(
        {
            "error": {
                "message": exc.message,
                "type": exc.openai_type,
                "param": None,
                "code": exc.code,
            }
        }
    )
