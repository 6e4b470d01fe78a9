"""The routers read bodies with the proxied endpoints' reader: same limits, same 413s."""

from __future__ import annotations

import asyncio

import pytest
from starlette.requests import Request

from proxy.api.admin import read_limited
from proxy.core import PayloadTooLarge
from proxy.gateway import ClientGone
from proxy.gateway.asgi import Message


def request(content_length: bytes | None, *messages: Message) -> Request:
    pending = list(messages)

    async def receive() -> Message:
        return pending.pop(0)

    headers = [(b"content-length", content_length)] if content_length is not None else []
    return Request({"type": "http", "method": "POST", "headers": headers}, receive)


def body(data: bytes) -> Message:
    return {"type": "http.request", "body": data, "more_body": False}


def test_a_body_within_the_limit_is_read() -> None:
    assert asyncio.run(read_limited(request(b"2", body(b"ok")), 10, "feedback")) == b"ok"


def test_bodies_over_the_limit_are_refused_naming_what_was_sent() -> None:
    with pytest.raises(PayloadTooLarge, match=r"^feedback is larger than 10 bytes$"):
        asyncio.run(read_limited(request(b"11", body(b"x" * 11)), 10, "feedback"))
    with pytest.raises(PayloadTooLarge, match=r"^the Alertmanager payload is larger than 10"):
        asyncio.run(read_limited(request(None, body(b"x" * 11)), 10, "the Alertmanager payload"))


def test_a_content_length_of_non_ascii_digits_is_ignored_not_a_crash() -> None:
    # "²" is a digit to str.isdigit() but not to int(): the old reader raised ValueError (a 500).
    assert asyncio.run(read_limited(request(b"\xb2", body(b"ok")), 10, "feedback")) == b"ok"


def test_a_client_gone_before_its_body_arrived_raises_client_gone() -> None:
    with pytest.raises(ClientGone):
        asyncio.run(read_limited(request(None, {"type": "http.disconnect"}), 10, "feedback"))
