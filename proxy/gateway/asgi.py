"""Small pieces of raw ASGI used on the proxy's hot path (no framework in between).

`read_body` is the one size-limited body reader: the proxied endpoints call it with their ASGI
scope and receive, the FastAPI routers (`proxy.api`) with their request's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from proxy.core import GatewayError, PayloadTooLarge, WireFormat, error_body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]


class ClientGone(Exception):
    """The client disconnected: before its request was read, or while the answer was sent."""


class ClientSend:
    """A request's `send`, for a client that may be gone: whatever the server raises when it
    cannot write any more (uvloop's RuntimeError on a closed transport, an OSError) becomes
    `ClientGone`, so that the exchange records the hang-up instead of dying of it. `started`
    says whether the response head went out."""

    __slots__ = ("_send", "started")

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False

    async def __call__(self, message: Message) -> None:
        try:
            await self._send(message)
        except Exception as exc:
            raise ClientGone(f"{type(exc).__name__}: {exc}") from exc
        if message["type"] == "http.response.start":
            self.started = True


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of a (lower-case) request header."""
    for key, value in scope["headers"]:
        if key == name:
            return value  # type: ignore[no-any-return]
    return None


async def read_body(
    scope: Scope, receive: Receive, limit: int, what: str = "request body"
) -> bytes:
    """The whole request body, refused with `PayloadTooLarge` (413, "<what> is larger than
    <limit> bytes") as soon as it is known to exceed `limit` bytes: by its declared length before
    a byte is read, else while reading. Only plain ASCII digits are a declared length (HTTP's
    `1*DIGIT`); any other content-length is ignored here and the bytes are counted as they come.
    Raises `ClientGone` when the client disconnects first."""
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"{what} is larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        body = message.get("body", b"")
        size += len(body)
        if size > limit:
            raise PayloadTooLarge(f"{what} is larger than {limit} bytes")
        chunks.append(body)
        if not message.get("more_body", False):
            return b"".join(chunks) if len(chunks) != 1 else chunks[0]


async def send_bytes(
    send: Send, status: int, body: bytes, headers: Iterable[tuple[bytes, bytes]]
) -> None:
    """A complete response in one go."""
    out = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": body})


async def send_error(
    send: Send, exc: GatewayError, wire: WireFormat, extra: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    """A mirrorgate error in the caller's wire format."""
    headers = [(b"content-type", b"application/json"), *extra]
    await send_bytes(send, exc.status, error_body(exc, wire), headers)
