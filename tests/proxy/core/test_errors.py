"""The gateway's errors on the wire: one status and one body per error, in the caller's format
(OpenAI's or Anthropic's), as their SDKs parse them."""

from __future__ import annotations

import orjson
import pytest

from proxy.core import (
    GatewayError,
    PayloadTooLarge,
    RequestError,
    RouteNotFound,
    UpstreamError,
    UpstreamTimeout,
    error_body,
)


@pytest.mark.parametrize(
    ("error", "status", "openai_type", "anthropic_type"),
    [
        (RequestError("bad"), 400, "invalid_request_error", "invalid_request_error"),
        (RouteNotFound("'x' is not a route"), 404, "invalid_request_error", "not_found_error"),
        (PayloadTooLarge("too big"), 413, "invalid_request_error", "request_too_large"),
        (UpstreamError("down"), 502, "upstream_error", "api_error"),
        (UpstreamTimeout("slow"), 504, "timeout", "timeout_error"),
    ],
)
def test_each_error_has_one_status_and_a_type_per_wire_format(
    error: GatewayError, status: int, openai_type: str, anthropic_type: str
) -> None:
    assert error.status == status
    openai = orjson.loads(error_body(error, "openai"))
    assert openai == {
        "error": {"message": error.message, "type": openai_type, "param": None,
                  "code": error.code},
    }  # fmt: skip
    anthropic = orjson.loads(error_body(error, "anthropic"))
    assert anthropic == {"type": "error", "error": {"type": anthropic_type,
                                                    "message": error.message}}  # fmt: skip


def test_an_unknown_route_carries_openais_error_code() -> None:
    body = orjson.loads(error_body(RouteNotFound("'x' is not a route"), "openai"))
    assert body["error"]["code"] == "model_not_found"


def test_the_timeout_is_an_upstream_error_and_every_error_a_gateway_error() -> None:
    assert issubclass(UpstreamTimeout, UpstreamError)
    for cls in (RequestError, RouteNotFound, PayloadTooLarge, UpstreamError):
        assert issubclass(cls, GatewayError)
    assert str(RequestError("what went wrong")) == "what went wrong"
