"""The one size-limited body reader, driven by hand: what it reads, when it refuses."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proxy.core import PayloadTooLarge
from proxy.gateway import ClientGone, read_body
from proxy.gateway.asgi import Message


class Receiver:
    """An ASGI receive that hands out the given messages and counts how many were asked for."""

    def __init__(self, *messages: Message) -> None:
        self.messages = list(messages)
        self.calls = 0

    async def __call__(self) -> Message:
        self.calls += 1
        return self.messages.pop(0)


def chunks(*parts: bytes) -> list[Message]:
    return [
        {"type": "http.request", "body": part, "more_body": i < len(parts) - 1}
        for i, part in enumerate(parts)
    ]


def scope(content_length: bytes | None = None) -> dict[str, Any]:
    headers = [(b"content-type", b"application/json")]
    if content_length is not None:
        headers.append((b"content-length", content_length))
    return {"type": "http", "headers": headers}


def read(receive: Receiver, content_length: bytes | None = None, **kwargs: Any) -> bytes:
    return asyncio.run(read_body(scope(content_length), receive, 10, **kwargs))


def test_the_body_is_read_whole_from_its_chunks() -> None:
    assert read(Receiver(*chunks(b"12345", b"", b"67890"))) == b"1234567890"
    assert read(Receiver(*chunks(b"exactly 10")), b"10") == b"exactly 10"
    assert read(Receiver({"type": "http.request"})) == b""


def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    receive = Receiver(*chunks(b"x" * 11))
    with pytest.raises(PayloadTooLarge, match=r"^request body is larger than 10 bytes$"):
        read(receive, b"11")
    assert receive.calls == 0


def test_an_undeclared_body_is_refused_as_soon_as_it_passes_the_limit() -> None:
    receive = Receiver(*chunks(b"123456", b"78901", b"never read"))
    with pytest.raises(PayloadTooLarge, match=r"^feedback is larger than 10 bytes$"):
        read(receive, what="feedback")
    assert receive.calls == 2


@pytest.mark.parametrize("declared", [b"\xb2", b"\xc2\xb2", b"+5", b" 5", b"1_0", b"-1", b""])
def test_a_content_length_that_is_not_plain_digits_is_no_declared_length(declared: bytes) -> None:
    # Not trusted either way: the body is counted as it arrives.
    assert read(Receiver(*chunks(b"ok")), declared) == b"ok"
    with pytest.raises(PayloadTooLarge):
        read(Receiver(*chunks(b"x" * 11)), declared)


def test_a_client_that_disconnects_first_is_gone() -> None:
    with pytest.raises(ClientGone):
        read(Receiver(*chunks(b"123", b"45")[:1], {"type": "http.disconnect"}))
