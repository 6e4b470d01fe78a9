"""One write per answer: a response's head waits for its body, so that both leave in one send.

uvicorn's protocol writes an answer's head on `http.response.start` and its body on
`http.response.body`: two `send` system calls and two TCP segments for every answer whose body
follows at once, as the gateway's plain (non-streamed) answers do. On loopback each send also
runs the receiving side's TCP path in the sender's system call, so the second one costs about as
much as the first.

`HeldHeadTransport` stands in for the connection's transport, for the protocol and for each
request's cycle alike. When the protocol says a response is starting (`hold_next`), the next write
— the head — is held; the write after it goes out together with it, in one `writelines` (one
`writev`, nothing copied). A head whose body does not follow in the same turn of the event loop
(a stream waiting for its first event, an answer without a body) is written on its own at the end
of that turn, so nothing waits longer than it did. Closing, ending the write side and every later
write send the held head first: the bytes leave in the order they were written.
"""

from __future__ import annotations

import asyncio
from typing import Any

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
"""What uvicorn writes before reading a body the client asked to send (`expect: 100-continue`):
not a response's head, never held."""


class HeldHeadTransport:
    """A connection's transport, holding each response's head for its body (see the module
    docstring). Everything it does not define is the real transport's."""

    __slots__ = ("_held", "_hold_next", "_loop", "_release", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._hold_next = False
        self._held: bytes | None = None
        self._release: asyncio.Handle | None = None

    def hold_next(self) -> None:
        """The next write (but the `CONTINUE` interim answer) is a response's head: hold it."""
        self._hold_next = True

    def write(self, data: bytes) -> None:
        held = self._held
        if self._hold_next and data != CONTINUE:
            self._hold_next = False
            if held is not None:  # an earlier head that had no body (pipelined requests)
                self._transport.write(held)
            self._held = data
            if self._release is None:
                self._release = self._loop.call_soon(self._release_held)
        elif held is not None:
            self._held = None
            self._transport.writelines((held, data))
        else:
            self._transport.write(data)

    def flush(self) -> None:
        """Write the held head now, if there is one (and the connection is still open)."""
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():
                self._transport.write(held)

    def _release_held(self) -> None:
        self._release = None
        self.flush()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
