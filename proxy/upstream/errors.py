"""The upstream layer's errors, and the one place they become the gateway's.

The HTTP/1.1 transport (`http11.py`) raises one of these for every failed exchange:

    UpstreamTransportError            base
    ├── UpstreamConnectError          refused, DNS, TLS handshake, or the connection closed/reset
    │                                 before the first byte of the response
    ├── UpstreamTransportTimeout      `.phase` says which wait ran out
    │   ├── UpstreamConnectTimeout    connecting took over connect_timeout_s
    │   ├── UpstreamPoolTimeout       every connection stayed busy for read_timeout_s
    │   ├── UpstreamWriteTimeout      the upstream stopped reading the body for read_timeout_s
    │   └── UpstreamReadTimeout       no response head, or no next body byte, for read_timeout_s
    ├── UpstreamProtocolError         unparseable response, or the connection closed after the
    │                                 response started but before it was complete
    └── UpstreamLimitExceeded         the answer broke a `server.limits` cap (connection closed)
        ├── UpstreamHeadersTooLarge   response head over max_upstream_header_bytes/_headers
        ├── UpstreamBodyTooLarge      non-streamed body over max_response_bytes
        ├── UpstreamStreamTooLarge    streamed body over max_stream_bytes
        └── UpstreamStreamTooLong     stream still going after max_stream_duration_s

None of them leaves this package: this module is the one boundary. `gateway_errors` wraps every
call into the transport (sending, reading a whole body, reading a stream to its end) and
`translated_stream` the chunks of a stream forwarded as they come; both re-raise a failure as
the most specific error of the gateway's tree (`proxy.core`), chained with `from`:

    UpstreamTransportTimeout (any)  →  UpstreamTimeout  504
    UpstreamProtocolError           →  UpstreamError    502  "… broke off its answer"
    UpstreamConnectError            →  UpstreamError    502  "… failed"
    UpstreamLimitExceeded (any)     →  UpstreamError    502  "… <which limit>"

The gateway error keeps the transport class's name as its `error_class` (`UpstreamReadTimeout`),
which is what records store; the names of the leaves are therefore part of the stored data and
do not change. Misuse is not translated: `ValueError` (a bad base URL, CR/LF in a header) and
`RuntimeError` (a closed client, a body read twice) are bugs, not upstream failures.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import TracebackType
from typing import ClassVar

from proxy.core import UpstreamError, UpstreamTimeout


class UpstreamTransportError(Exception):
    """Base of every error raised for a failed exchange with the upstream."""


class UpstreamConnectError(UpstreamTransportError):
    """No response started: connecting failed, or the connection closed before the first byte."""


class UpstreamTransportTimeout(UpstreamTransportError):
    """A wait on the upstream ran out; `phase` is "connect", "pool", "write" or "read"."""

    phase: ClassVar[str] = ""


class UpstreamConnectTimeout(UpstreamTransportTimeout):
    phase = "connect"


class UpstreamPoolTimeout(UpstreamTransportTimeout):
    phase = "pool"


class UpstreamWriteTimeout(UpstreamTransportTimeout):
    phase = "write"


class UpstreamReadTimeout(UpstreamTransportTimeout):
    phase = "read"


class UpstreamProtocolError(UpstreamTransportError):
    """The response was not valid HTTP/1.1, or ended before it was complete."""


class UpstreamLimitExceeded(UpstreamTransportError):
    """The answer is larger, or longer, than the gateway accepts; the message names the limit."""


class UpstreamHeadersTooLarge(UpstreamLimitExceeded):
    pass


class UpstreamBodyTooLarge(UpstreamLimitExceeded):
    pass


class UpstreamStreamTooLarge(UpstreamLimitExceeded):
    pass


class UpstreamStreamTooLong(UpstreamLimitExceeded):
    pass


LIMIT_ERROR_CLASSES = frozenset(
    cls.__name__
    for cls in (
        UpstreamHeadersTooLarge, UpstreamBodyTooLarge, UpstreamStreamTooLarge,
        UpstreamStreamTooLong,
    )
)  # fmt: skip
"""The `error_class` of a call that broke a limit (recorded as `invalid_response`)."""


def _translate(exc: UpstreamTransportError, target: str, mid_stream: bool) -> UpstreamError:
    """The gateway's error for a transport failure (the table in the module docstring)."""
    cause = type(exc).__name__
    timed_out = isinstance(exc, UpstreamTransportTimeout)
    if isinstance(exc, UpstreamLimitExceeded):
        where = "upstream stream cut" if mid_stream else f"upstream model '{target}' refused"
        return UpstreamError(f"{where}: {exc}", error_class=cause)
    if mid_stream:
        if timed_out:
            return UpstreamTimeout("upstream stalled mid-stream", error_class=cause)
        return UpstreamError(f"upstream stream broke: {cause}", error_class=cause)
    if timed_out:
        return UpstreamTimeout(f"upstream model '{target}' timed out", error_class=cause)
    what = "broke off its answer" if isinstance(exc, UpstreamProtocolError) else "failed"
    return UpstreamError(f"upstream model '{target}' {what}", error_class=cause)


class _GatewayErrors:
    """The context manager `gateway_errors` returns (a class with slots: it is entered on every
    upstream call, so it must cost next to nothing)."""

    __slots__ = ("_mid_stream", "_target")

    def __init__(self, target: str, mid_stream: bool) -> None:
        self._target = target
        self._mid_stream = mid_stream

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if isinstance(exc, UpstreamTransportError):
            raise _translate(exc, self._target, self._mid_stream) from exc


def gateway_errors(target: str, *, mid_stream: bool = False) -> _GatewayErrors:
    """A context manager that re-raises a transport failure inside it as the gateway's
    `UpstreamTimeout` or `UpstreamError` (see the module docstring), chained to it. The message
    names the model `target`, or says the stream broke when `mid_stream` (the client already
    has the response head, so the error reaches it as an in-stream error event)."""
    return _GatewayErrors(target, mid_stream)


class _TranslatedStream:
    """The iterator `translated_stream` returns. Per chunk a `try` costs nothing until it
    raises, where entering a context manager costs a call each way; a class rather than an async
    generator, like `aiter_raw`'s, so that nothing is left to finalize when the reader stops."""

    __slots__ = ("_raw", "_target")

    def __init__(self, raw: AsyncIterator[bytes], target: str) -> None:
        self._raw = raw
        self._target = target

    def __aiter__(self) -> _TranslatedStream:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self._raw.__anext__()
        except UpstreamTransportError as exc:
            raise _translate(exc, self._target, True) from exc


def translated_stream(raw: AsyncIterator[bytes], target: str) -> AsyncIterator[bytes]:
    """`raw` (a response's `aiter_raw`), its transport failures re-raised as the gateway's
    errors worded for a stream that broke after it started (`gateway_errors(mid_stream=True)`)."""
    return _TranslatedStream(raw, target)
