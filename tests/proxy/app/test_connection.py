"""The client connection's limits, on the parts the attack scenarios (tests/hostile/test_limits.py)
do not reach: the uvicorn it was written against, the wiring, and pipelined requests."""

from __future__ import annotations

import socket
from collections.abc import Callable

import orjson
import uvicorn
from prometheus_client import CollectorRegistry

from proxy.app.connection import UVICORN_TESTED, LimitedHttpToolsProtocol, connection_cap_warning
from proxy.app.gateway import Gateway
from proxy.app.serve import GatewayServer, _uvicorn_config
from proxy.config import LimitsSpec
from tests.conftest import gateway_config

StartGatewayServer = Callable[..., GatewayServer]
CHAT = orjson.dumps({"model": "echo", "messages": [{"role": "user", "content": "hi"}]})


def test_uvicorn_is_a_version_the_protocol_was_read_against() -> None:
    # The protocol overrides uvicorn internals; a new uvicorn must be read again before use.
    assert uvicorn.__version__ in UVICORN_TESTED


def test_serve_runs_the_limited_protocol_with_the_configured_keep_alive() -> None:
    extra = {"server": {"limits": {"keep_alive_s": 12, "max_headers": 50}}}
    config = gateway_config("http://127.0.0.1:9", "sqlite:///unused.db", extra)
    gateway = Gateway(config, registry=CollectorRegistry(), env={})
    uv = _uvicorn_config(gateway, "127.0.0.1", 0)
    assert isinstance(uv.http, type) and issubclass(uv.http, LimitedHttpToolsProtocol)
    assert uv.http.limits.max_headers == 50 and uv.timeout_keep_alive == 12


def test_a_connection_cap_above_the_open_file_limit_is_named_at_start() -> None:
    assert connection_cap_warning(LimitsSpec(max_connections=500), open_files=1024) is None
    warning = connection_cap_warning(LimitsSpec(), open_files=1024)
    assert warning is not None and "max_connections (10000)" in warning
    assert "1024 files" in warning and "beyond about 768" in warning


def _request(body: bytes, extra_head: bytes = b"") -> bytes:
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n" % len(body) + extra_head + b"\r\n" + body
    )


def test_a_pipelined_request_with_too_large_headers_is_refused_after_the_answer_before_it(
    start_gateway_server: StartGatewayServer,
) -> None:
    gw = start_gateway_server(extra={"server": {"limits": {"max_header_bytes": 2048}}})
    big = b"x-big: " + b"a" * 4096 + b"\r\n"
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        sock.sendall(_request(CHAT) + _request(CHAT, big))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    first, _, rest = data.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200")  # the first request is answered whole
    assert b"HTTP/1.1 431" in rest and rest.endswith(b'"request_header_fields_too_large"}}')


def test_keep_alive_requests_within_the_limits_share_a_connection(
    start_gateway_server: StartGatewayServer,
) -> None:
    gw = start_gateway_server(extra={"server": {"limits": {"header_timeout_s": 5}}})
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        reader = sock.makefile("rb")
        for _ in range(3):
            sock.sendall(_request(CHAT))
            assert reader.readline().startswith(b"HTTP/1.1 200")
            length = 0
            while (line := reader.readline()) != b"\r\n":
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            assert orjson.loads(reader.read(length))["object"] == "chat.completion"


def test_a_keep_alive_request_whose_head_stops_halfway_gets_408(
    start_gateway_server: StartGatewayServer,
) -> None:
    # The second request's head starts in a read of its own and never ends: its own timer,
    # counted from its first byte, answers it (the connection's opening timer is long gone).
    gw = start_gateway_server(extra={"server": {"limits": {"header_timeout_s": 0.3}}})
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        reader = sock.makefile("rb")
        sock.sendall(_request(CHAT))
        assert reader.readline().startswith(b"HTTP/1.1 200")
        length = 0
        while (line := reader.readline()) != b"\r\n":
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        reader.read(length)
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
        rest = reader.read()
    assert rest.startswith(b"HTTP/1.1 408") and rest.endswith(b'"request_timeout"}}')
    closed = gw.gateway.registry.get_sample_value(
        "mirrorgate_connections_closed_total", {"reason": "header_timeout"}
    )
    assert closed == 1
