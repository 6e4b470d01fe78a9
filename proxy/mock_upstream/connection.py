"""One client request at the ASGI level: read it, answer it, or drop it on purpose.

Dropping a connection (the `reset` and `disconnect_mid_stream` faults) needs the asyncio transport,
which ASGI does not expose; `proxy.mock_upstream.server` puts it in the scope under
`CONNECTION_EXTENSION`. Under another server a drop only ends the response early and leaves the
rest to that server.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from dataclasses import dataclass

from starlette.types import Receive, Scope, Send

CONNECTION_EXTENSION = "mirrorgate.connection"
"""Scope extension holding the connection's asyncio transport (`close()`, `abort()`)."""
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
]
# After closing the socket, uvicorn reports the disconnect within a loop iteration or two.
_GONE_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class ClientConnection:
    """The ASGI scope, receive and send of one request."""

    scope: Scope
    receive: Receive
    send: Send
    extra_headers: tuple[tuple[bytes, bytes], ...] = ()
    """Sent with every answer (the behaviour's `response_headers`)."""

    async def read_body(self) -> bytes | None:
        """The whole request body, or None when the client left before sending it."""
        chunks = []
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                return None
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def send_json(
        self, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        """A complete response; `body` is sent as `application/json` whatever it holds."""
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *_request_ids(),
            *self.extra_headers,
            *(extra or ()),
        ]
        await self.send({"type": "http.response.start", "status": status, "headers": headers})
        await self.send({"type": "http.response.body", "body": body})

    async def start_events(self, extra: list[tuple[bytes, bytes]] | None = None) -> None:
        """Headers of a `text/event-stream` response."""
        headers = [*_SSE_HEADERS, *_request_ids(), *self.extra_headers, *(extra or ())]
        await self.send({"type": "http.response.start", "status": 200, "headers": headers})

    async def send_events(self, data: bytes, more: bool = True) -> None:
        """Part of the event stream; `more=False` ends the response."""
        await self.send({"type": "http.response.body", "body": data, "more_body": more})

    async def wait_gone(self) -> None:
        """Wait until the client disconnects (the request body must already be read)."""
        while (await self.receive())["type"] != "http.disconnect":
            pass

    async def drop(self, reset: bool) -> None:
        """Close the connection now: a TCP reset, or an orderly close in the middle of the body."""
        transport = self.scope.get("extensions", {}).get(CONNECTION_EXTENSION)
        if transport is None:
            return
        if reset:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                # Linger 0 makes close() send RST instead of FIN: the peer sees "connection reset".
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
        else:
            transport.close()
        async with asyncio.timeout(_GONE_TIMEOUT_S):
            await self.wait_gone()


def _request_ids() -> list[tuple[bytes, bytes]]:
    """`x-request-id` (OpenAI) and `request-id` (Anthropic), which the SDKs expose."""
    request_id = b"req_" + os.urandom(12).hex().encode()
    return [(b"x-request-id", request_id), (b"request-id", request_id)]
