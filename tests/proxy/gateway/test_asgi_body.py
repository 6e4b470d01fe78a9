"""The hot path's raw ASGI pieces: reading a body within a limit, headers, whole responses."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest

from proxy.core.errors import PayloadTooLarge, RouteNotFound
from proxy.gateway.asgi import ClientGone, header, read_body, send_bytes, send_error


def receiver(
    *messages: dict[str, Any],
) -> tuple[Callable[[], Awaitable[dict[str, Any]]], list[int]]:
    """A `receive` that hands out `messages` in order, and a counter of the calls made."""
    calls: list[int] = []

    async def receive() -> dict[str, Any]:
        calls.append(1)
        return messages[len(calls) - 1]

    return receive, calls


def scope(*headers: tuple[bytes, bytes]) -> dict[str, Any]:
    return {"type": "http", "headers": list(headers)}


def test_a_body_in_chunks_is_joined() -> None:
    receive, _ = receiver(
        {"type": "http.request", "body": b'{"a":', "more_body": True},
        {"type": "http.request", "body": b"", "more_body": True},
        {"type": "http.request", "body": b" 1}", "more_body": False},
    )
    assert asyncio.run(read_body(scope(), receive, limit=100)) == b'{"a": 1}'


def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    receive, calls = receiver()
    with pytest.raises(PayloadTooLarge, match="larger than 10 bytes"):
        asyncio.run(read_body(scope((b"content-length", b"11")), receive, limit=10))
    assert calls == []  # not one receive(): the answer does not wait for the body


def test_an_undeclared_body_is_refused_as_soon_as_it_passes_the_limit() -> None:
    receive, calls = receiver(
        {"type": "http.request", "body": b"x" * 8, "more_body": True},
        {"type": "http.request", "body": b"x" * 8, "more_body": True},
        {"type": "http.request", "body": b"never read", "more_body": False},
    )
    with pytest.raises(PayloadTooLarge):
        asyncio.run(read_body(scope((b"content-length", b"not a number")), receive, limit=10))
    assert len(calls) == 2


def test_a_client_gone_before_its_body_is_read() -> None:
    receive, _ = receiver({"type": "http.disconnect"})
    with pytest.raises(ClientGone):
        asyncio.run(read_body(scope(), receive, limit=10))


def test_header_is_the_first_value_of_a_lowercase_name() -> None:
    s = scope((b"x-user", b"alice"), (b"x-user", b"bob"))
    assert header(s, b"x-user") == b"alice"
    assert header(s, b"x-other") is None


def sent_by(send_something: Callable[[Any], Awaitable[None]]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    asyncio.run(send_something(send))
    return messages


def test_send_bytes_is_one_start_and_one_body_with_its_length() -> None:
    start, body = sent_by(lambda send: send_bytes(send, 201, b"hello", [(b"x-a", b"1")]))
    assert start == {
        "type": "http.response.start",
        "status": 201,
        "headers": [(b"x-a", b"1"), (b"content-length", b"5")],
    }
    assert body == {"type": "http.response.body", "body": b"hello"}


def test_errors_go_out_in_the_callers_wire_format() -> None:
    error = RouteNotFound("'nope' is not a route")
    for wire in ("openai", "anthropic"):
        start, body = sent_by(lambda send, wire=wire: send_error(send, error, wire))  # type: ignore[misc]
        assert start["status"] == 404
        assert (b"content-type", b"application/json") in start["headers"]
        parsed = orjson.loads(body["body"])
        if wire == "anthropic":
            assert parsed["type"] == "error" and "nope" in parsed["error"]["message"]
        else:
            assert "nope" in parsed["error"]["message"] and "type" in parsed["error"]
