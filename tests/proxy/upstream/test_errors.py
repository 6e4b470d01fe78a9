"""The upstream layer's error tree, and its one translation into the gateway's."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import pkgutil
from collections.abc import AsyncIterator

import pytest

import alerts
import analyzers
import proxy
import proxy.upstream
from proxy.core import UpstreamError, UpstreamTimeout, error_body
from proxy.upstream import errors
from proxy.upstream.errors import (
    UpstreamConnectError,
    UpstreamConnectTimeout,
    UpstreamPoolTimeout,
    UpstreamProtocolError,
    UpstreamReadTimeout,
    UpstreamTransportError,
    UpstreamTransportTimeout,
    UpstreamWriteTimeout,
    gateway_errors,
    translated_stream,
)

TIMEOUTS = (UpstreamConnectTimeout, UpstreamPoolTimeout, UpstreamWriteTimeout, UpstreamReadTimeout)


def test_error_tree() -> None:
    for error in (UpstreamConnectError, UpstreamTransportTimeout, UpstreamProtocolError):
        assert issubclass(error, UpstreamTransportError)
    assert issubclass(UpstreamConnectTimeout, UpstreamTransportTimeout)
    assert issubclass(UpstreamPoolTimeout, UpstreamTransportTimeout)
    assert [t.phase for t in TIMEOUTS] == ["connect", "pool", "write", "read"]
    # The transport's errors are not the gateway's: nothing outside this package catches them.
    assert not issubclass(UpstreamTransportError, UpstreamError)


def translated(exc: Exception, *, mid_stream: bool = False) -> UpstreamError:
    with pytest.raises(UpstreamError) as caught, gateway_errors("cand", mid_stream=mid_stream):
        raise exc
    assert caught.value.__cause__ is exc  # chained, so the log shows what really happened
    return caught.value


@pytest.mark.parametrize("timeout", TIMEOUTS)
def test_every_transport_timeout_becomes_the_gateways_504(
    timeout: type[UpstreamTransportTimeout],
) -> None:
    error = translated(timeout("upstream stalled"))
    assert type(error) is UpstreamTimeout and error.status == 504
    assert error.message == "upstream model 'cand' timed out"
    assert error.error_class == timeout.__name__
    streamed = translated(timeout("upstream stalled"), mid_stream=True)
    assert type(streamed) is UpstreamTimeout
    assert streamed.message == "upstream stalled mid-stream"
    assert streamed.error_class == timeout.__name__


@pytest.mark.parametrize(
    ("exc", "message", "mid_stream_message"),
    [
        (UpstreamConnectError("refused"), "upstream model 'cand' failed",
         "upstream stream broke: UpstreamConnectError"),
        (UpstreamProtocolError("garbage"), "upstream model 'cand' broke off its answer",
         "upstream stream broke: UpstreamProtocolError"),
    ],
)  # fmt: skip
def test_other_transport_failures_become_the_gateways_502(
    exc: UpstreamTransportError, message: str, mid_stream_message: str
) -> None:
    error = translated(exc)
    assert type(error) is UpstreamError and error.status == 502
    assert (error.message, error.error_class) == (message, type(exc).__name__)
    assert translated(exc, mid_stream=True).message == mid_stream_message
    assert b"upstream_error" in error_body(error, "openai")


async def _chunks_then(failure: Exception | None) -> AsyncIterator[bytes]:
    yield b"data: 1\n\n"
    yield b"data: 2\n\n"
    if failure is not None:
        raise failure


@pytest.mark.parametrize(
    ("failure", "kind", "message"),
    [
        (UpstreamReadTimeout("stalled"), UpstreamTimeout, "upstream stalled mid-stream"),
        (UpstreamProtocolError("cut"), UpstreamError,
         "upstream stream broke: UpstreamProtocolError"),
    ],
)  # fmt: skip
def test_a_translated_stream_hands_out_chunks_then_the_gateways_error(
    failure: UpstreamTransportError, kind: type[UpstreamError], message: str
) -> None:
    async def read() -> tuple[list[bytes], BaseException]:
        received = []
        try:
            async for chunk in translated_stream(_chunks_then(failure), "cand"):
                received.append(chunk)
        except UpstreamError as exc:
            return received, exc
        raise AssertionError("the stream ended without an error")

    received, error = asyncio.run(read())
    assert received == [b"data: 1\n\n", b"data: 2\n\n"]
    assert type(error) is kind and str(error) == message and error.__cause__ is failure
    assert isinstance(error, UpstreamError) and error.error_class == type(failure).__name__


def test_a_translated_stream_ends_when_its_source_ends() -> None:
    async def read() -> list[bytes]:
        return [chunk async for chunk in translated_stream(_chunks_then(None), "cand")]

    assert asyncio.run(read()) == [b"data: 1\n\n", b"data: 2\n\n"]


def test_misuse_and_success_pass_through_untranslated() -> None:
    with pytest.raises(ValueError, match="CR or LF"), gateway_errors("cand"):
        raise ValueError("CR or LF in the request line or a header")
    with gateway_errors("cand"):
        pass


def test_the_package_face_exports_no_transport_error() -> None:
    exported = [getattr(proxy.upstream, name) for name in proxy.upstream.__all__]
    assert not [
        item
        for item in exported
        if inspect.isclass(item) and issubclass(item, UpstreamTransportError)
    ]


def _error_classes() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for package in (proxy, alerts, analyzers):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith(".__main__") or info.name.startswith("proxy.mock_upstream"):
                continue  # the fake model is a program of its own, not part of the gateway
            module = importlib.import_module(info.name)
            for _, item in inspect.getmembers(module, inspect.isclass):
                if issubclass(item, BaseException) and item.__module__ == module.__name__:
                    found[f"{item.__module__}.{item.__qualname__}"] = item
    return list(found.values())


def test_no_upstream_error_shares_its_name_with_another_error_class() -> None:
    ours = {
        name
        for name, item in vars(errors).items()
        if inspect.isclass(item) and issubclass(item, BaseException)
        and item.__module__ == errors.__name__
    }  # fmt: skip
    clashes = [
        f"{item.__module__}.{item.__qualname__}"
        for item in _error_classes()
        if item.__name__ in ours and item.__module__ != errors.__name__
    ]
    assert not clashes
