"""Peers that push: slow or silent clients, huge headers, too many connections, and upstreams
whose answers are huge, endless, or carry a flood of headers. Every limit of `server.limits` is
set small here so that each scenario takes a fraction of a second; each asserts the answer the
peer gets, that nothing was forwarded (or what was recorded), and that other clients are served
meanwhile."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client import CollectorRegistry

from proxy.app import GatewayServer
from proxy.core.records import Status
from proxy.mock_upstream.behavior import parse_behavior
from proxy.mock_upstream.server import MockUpstreamServer
from tests.conftest import gateway_config, wait_until

pytestmark = pytest.mark.e2e  # a real uvicorn server on 127.0.0.1, raw sockets, real timeouts

CHAT = {"model": "echo", "messages": [{"role": "user", "content": "hello"}]}
LIMITS = {
    "header_timeout_s": 0.3,
    "body_timeout_s": 0.3,
    "max_header_bytes": 4096,
    "max_headers": 30,
    "max_response_bytes": 1024 * 1024,
    "max_stream_bytes": 256 * 1024,
    "max_stream_duration_s": 0.5,
    "max_upstream_header_bytes": 8192,
    "max_upstream_headers": 50,
}
HOSTILE_MODELS: dict[str, dict[str, Any]] = {
    "huge": {"huge_body": {"bytes": 100 * 1024 * 1024}},
    "huge-chunked": {"huge_body": {"bytes": 5 * 1024 * 1024, "chunked": True}},
    "endless": {"endless_stream": {}},
    "endless-slow": {"endless_stream": {"interval_ms": 50}},
    "flood": {"header_flood": {"count": 200, "value_bytes": 10}},
    "flood-one": {"header_flood": {"count": 1, "value_bytes": 100_000}},
}


@pytest.fixture(scope="module")
def hostile_upstream() -> Iterator[MockUpstreamServer]:
    with MockUpstreamServer(parse_behavior({"models": HOSTILE_MODELS})) as server:
        yield server


@pytest.fixture
def limited_gateway(
    hostile_upstream: MockUpstreamServer, tmp_path: Path
) -> Iterator[Callable[..., GatewayServer]]:
    """Start gateways with `LIMITS` (overridden by keyword) in front of the hostile mock."""
    started: list[GatewayServer] = []

    def start(**limits: Any) -> GatewayServer:
        models: dict[str, Any] = {}
        for name in HOSTILE_MODELS:
            for wire, base in (("openai", "/v1"), ("anthropic", "")):
                models[name if wire == "openai" else f"{name}-claude"] = {
                    "provider": wire, "base_url": hostile_upstream.url + base, "model": name,
                    "timeout_s": 5,
                }  # fmt: skip
        extra = {
            "server": {"limits": {**LIMITS, **limits}},
            "models": models,
            "routes": {name: {"primary": name} for name in models},
        }
        db = f"sqlite:///{tmp_path / f'gw-{len(started)}.db'}"
        config = gateway_config(hostile_upstream.url, db, extra)
        server = GatewayServer(config, registry=CollectorRegistry()).__enter__()
        started.append(server)
        return server

    yield start
    for server in reversed(started):
        server.stop()


def closed_count(gw: GatewayServer, reason: str) -> float:
    value = gw.gateway.registry.get_sample_value(
        "mirrorgate_connections_closed_total", {"reason": reason}
    )
    return value or 0.0


def upstream_saw(upstream: MockUpstreamServer, marker: str) -> bool:
    """Whether any request the mock received carried header `x-marker: <marker>`."""
    return any(
        dict(request["headers"]).get("x-marker") == marker
        for request in upstream.app.recorder.requests()
    )


async def read_to_close(reader: asyncio.StreamReader) -> bytes:
    """Everything the gateway sends until it closes the connection."""
    data = b""
    while chunk := await reader.read(65536):
        data += chunk
    return data


def answer_of(raw: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"connection: close" in head.lower()
    return int(head.split()[1]), orjson.loads(body)


def records_of(gw: GatewayServer, request_id: str) -> list[Any]:
    store = gw.gateway.store
    return wait_until(  # type: ignore[no-any-return]
        lambda: store.query(request_id=request_id), what=f"the record of {request_id}"
    )


# --- client side ---------------------------------------------------------------------------


def test_slowloris_connections_are_closed_at_the_header_timeout_while_others_are_served(
    limited_gateway: Callable[..., GatewayServer],
) -> None:
    gw = limited_gateway()
    head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"

    async def slowloris() -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        sender = asyncio.ensure_future(_drip(writer, head + b"x-slow: " + b"a" * 100_000))
        try:
            return await read_to_close(reader)
        finally:
            sender.cancel()
            writer.close()

    async def scenario() -> tuple[list[bytes], int, int]:
        loris = [asyncio.ensure_future(slowloris()) for _ in range(100)]
        async with httpx.AsyncClient(base_url=gw.url) as client:
            served = await client.post("/v1/chat/completions", json=CHAT)
        still_open = sum(not task.done() for task in loris)
        async with asyncio.timeout(20):  # a deadline for the whole scenario, not a measure
            answers = await asyncio.gather(*loris)
        return answers, served.status_code, still_open

    answers, status, still_open = asyncio.run(scenario())
    assert status == 200 and still_open > 0  # served while the slow ones were still held
    for raw in answers:
        code, body = answer_of(raw)
        assert code == 408 and body["error"]["code"] == "request_timeout"
    assert closed_count(gw, "header_timeout") == 100


async def _drip(writer: asyncio.StreamWriter, data: bytes) -> None:
    """Send `data` a byte at a time, as slowly as a slowloris does."""
    for i in range(len(data)):
        writer.write(data[i : i + 1])
        await writer.drain()
        await asyncio.sleep(0.02)


def test_connections_that_never_send_a_byte_are_closed_without_an_answer(
    limited_gateway: Callable[..., GatewayServer],
) -> None:
    gw = limited_gateway()

    async def silent() -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        try:
            return await read_to_close(reader)
        finally:
            writer.close()

    async def scenario() -> list[bytes]:
        async with asyncio.timeout(20):
            return await asyncio.gather(*(silent() for _ in range(300)))

    assert asyncio.run(scenario()) == [b""] * 300
    assert closed_count(gw, "header_timeout") == 300
    wait_until(
        lambda: gw.gateway.registry.get_sample_value("mirrorgate_client_connections") == 0,
        what="every connection closed",
    )


@pytest.mark.parametrize(
    ("path", "wire"), [("/v1/chat/completions", "openai"), ("/v1/messages", "anthropic")]
)
def test_a_body_shorter_than_its_content_length_gets_408_in_the_wire_format(
    limited_gateway: Callable[..., GatewayServer],
    hostile_upstream: MockUpstreamServer,
    path: str,
    wire: str,
) -> None:
    gw = limited_gateway()
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            "x-marker: short-body\r\ncontent-length: 1000\r\n\r\n".encode()
            + b'{"model": "echo"'
        )
        raw = _recv_all(sock)
    status, body = answer_of(raw)
    assert status == 408
    if wire == "anthropic":
        assert body["type"] == "error" and "body not received" in body["error"]["message"]
    else:
        assert body["error"]["code"] == "request_timeout"
    assert closed_count(gw, "body_timeout") == 1
    assert not upstream_saw(hostile_upstream, "short-body")


def test_the_admin_api_body_is_under_the_same_body_timeout(
    limited_gateway: Callable[..., GatewayServer],
) -> None:
    gw = limited_gateway()
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/feedback HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: 500\r\n\r\n{"
        )
        status, _ = answer_of(_recv_all(sock))
    assert status == 408
    # The feedback handler hears the client gone: not a bug, no traceback, nothing counted.
    errors = gw.gateway.registry.get_sample_value(
        "mirrorgate_internal_errors_total", {"component": "api"}
    )
    assert not errors


def _recv_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


@pytest.mark.parametrize(
    "head",
    [
        b"x-big: " + b"a" * 10_000 + b"\r\n\r\n",  # one header too large
        b"x-big: " + b"a" * 10_000,  # a header line that never ends
        b"".join(b"x-h%d: 1\r\n" % i for i in range(40)) + b"\r\n",  # too many lines
    ],
    ids=["large", "endless-line", "many"],
)
def test_too_large_request_headers_get_431_and_nothing_goes_upstream(
    limited_gateway: Callable[..., GatewayServer],
    hostile_upstream: MockUpstreamServer,
    head: bytes,
) -> None:
    gw = limited_gateway()
    body = orjson.dumps(CHAT)
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"x-marker: big-head\r\ncontent-length: %d\r\n" % len(body) + head
        )
        if head.endswith(b"\r\n\r\n"):
            sock.sendall(body)
        status, answer = answer_of(_recv_all(sock))
    assert status == 431
    assert answer["error"]["code"] == "request_header_fields_too_large"
    assert closed_count(gw, "headers_too_large") == 1
    assert not upstream_saw(hostile_upstream, "big-head")


def test_headers_within_the_limits_are_served(
    limited_gateway: Callable[..., GatewayServer],
) -> None:
    gw = limited_gateway()
    headers = {f"x-h{i}": "v" * 50 for i in range(20)}
    response = httpx.post(gw.url + "/v1/chat/completions", json=CHAT, headers=headers)
    assert response.status_code == 200


def test_connections_beyond_the_cap_get_503_and_are_served_again_once_under(
    limited_gateway: Callable[..., GatewayServer],
) -> None:
    gw = limited_gateway(max_connections=5, header_timeout_s=30)
    held = [socket.create_connection(("127.0.0.1", gw.port)) for _ in range(5)]
    wait_until(
        lambda: gw.gateway.registry.get_sample_value("mirrorgate_client_connections") == 5,
        what="five connections open",
    )
    try:
        over = httpx.post(gw.url + "/v1/chat/completions", json=CHAT)
        assert over.status_code == 503 and over.headers["connection"] == "close"
        assert over.json()["error"]["type"] == "server_error"
        assert closed_count(gw, "over_capacity") == 1
    finally:
        for sock in held:
            sock.close()
    wait_until(
        lambda: gw.gateway.registry.get_sample_value("mirrorgate_client_connections") == 0,
        what="the held connections closed",
    )
    assert httpx.post(gw.url + "/v1/chat/completions", json=CHAT).status_code == 200


# --- upstream side -------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["huge", "huge-chunked"])
def test_an_upstream_answer_over_max_response_bytes_is_a_502_and_recorded_without_its_body(
    limited_gateway: Callable[..., GatewayServer], model: str
) -> None:
    gw = limited_gateway()
    response = httpx.post(
        gw.url + "/v1/chat/completions", json={**CHAT, "model": model}, timeout=30
    )
    assert response.status_code == 502
    assert "over the limit of 1048576" in response.json()["error"]["message"]
    (record,) = records_of(gw, response.headers["x-mirrorgate-request-id"])
    assert record.status is Status.INVALID_RESPONSE
    assert record.error_class == "UpstreamBodyTooLarge"
    assert record.response_body is None and not record.response_text


@pytest.mark.parametrize(
    ("model", "limits", "error_class"),
    [
        ("endless", {}, "UpstreamStreamTooLarge"),
        ("endless-slow", {"max_stream_bytes": 64 * 1024 * 1024}, "UpstreamStreamTooLong"),
    ],
    ids=["size", "duration"],
)
def test_an_endless_stream_is_cut_at_its_cap_with_an_error_event_and_a_record(
    limited_gateway: Callable[..., GatewayServer],
    model: str,
    limits: dict[str, Any],
    error_class: str,
) -> None:
    gw = limited_gateway(**limits)
    body = {**CHAT, "model": model, "stream": True}
    with httpx.stream("POST", gw.url + "/v1/chat/completions", json=body, timeout=30) as response:
        assert response.status_code == 200
        request_id = response.headers["x-mirrorgate-request-id"]
        data = response.read()
    assert len(data) < 2 * LIMITS["max_stream_bytes"]  # cut, not left to run
    last = data.rstrip().rsplit(b"\n\n", 1)[-1]
    error = orjson.loads(last.removeprefix(b"data: "))["error"]
    assert error["message"].startswith("upstream stream cut")
    (record,) = records_of(gw, request_id)
    assert record.status is Status.INVALID_RESPONSE and record.error_class == error_class


def test_an_endless_anthropic_stream_ends_with_an_anthropic_error_event(
    limited_gateway: Callable[..., GatewayServer],
) -> None:
    gw = limited_gateway()
    body = {
        "model": "endless-claude",
        "max_tokens": 100,
        "stream": True,
        "messages": CHAT["messages"],
    }
    with httpx.stream("POST", gw.url + "/v1/messages", json=body, timeout=30) as response:
        data = response.read()
    last = data.rstrip().rsplit(b"\n\n", 1)[-1]
    assert last.startswith(b"event: error\ndata: ")
    assert orjson.loads(last.split(b"data: ", 1)[1])["type"] == "error"


@pytest.mark.parametrize("model", ["flood", "flood-one"])
def test_an_upstream_header_flood_is_a_502_and_recorded(
    limited_gateway: Callable[..., GatewayServer], model: str
) -> None:
    gw = limited_gateway()
    response = httpx.post(gw.url + "/v1/chat/completions", json={**CHAT, "model": model})
    assert response.status_code == 502
    assert not any(name.startswith("x-mock-flood") for name in response.headers)
    (record,) = records_of(gw, response.headers["x-mirrorgate-request-id"])
    assert record.status is Status.INVALID_RESPONSE
    assert record.error_class == "UpstreamHeadersTooLarge"
