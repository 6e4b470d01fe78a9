"""The gateway under a real uvicorn on 127.0.0.1: what only a socket shows. The client path's
logic is tested in process (tests/proxy/gateway); here, a client hanging up mid-stream, a body
that never arrives, and the headers uvicorn itself would add."""

from __future__ import annotations

import socket
from collections.abc import Callable

import httpx
import openai
import orjson
import pytest

from proxy.app.serve import GatewayServer
from proxy.core.records import Arm, Status
from proxy.mock_upstream.server import MockUpstreamServer
from tests.conftest import sdk_client, wait_until
from tests.proxy.gateway.test_exchange_openai import MESSAGES

CHAT = {"model": "echo", "messages": MESSAGES}
StartGatewayServer = Callable[..., GatewayServer]

pytestmark = pytest.mark.e2e


def records_for(gw: GatewayServer, request_id: str) -> list[object]:
    store = gw.gateway.store
    return wait_until(  # type: ignore[no-any-return]
        lambda: store.query(request_id=request_id), what=f"the record of {request_id}"
    )


def test_client_disconnect_cancels_upstream_and_still_records(
    start_gateway_server: StartGatewayServer,
) -> None:
    gw = start_gateway_server()
    body = {**CHAT, "model": "slow-stream", "stream": True}
    with httpx.stream("POST", gw.url + "/v1/chat/completions", json=body) as response:
        request_id = response.headers["x-mirrorgate-request-id"]
        next(response.iter_raw())  # one chunk, then hang up
    (record,) = records_for(gw, request_id)
    assert record.status is Status.CLIENT_DISCONNECTED  # type: ignore[attr-defined]
    assert record.arm is Arm.PRIMARY and record.streamed  # type: ignore[attr-defined]
    gauge = wait_until(
        lambda: gw.gateway.registry.get_sample_value("mirrorgate_inflight_requests") == 0,
        what="no request in flight",
    )
    assert gauge


def test_a_declared_oversized_body_is_refused_before_it_is_sent(
    start_gateway_server: StartGatewayServer,
) -> None:
    gw = start_gateway_server(extra={"server": {"max_body_bytes": 4096}})
    # A client that declares 10 GB and sends nothing gets its answer at once.
    with socket.create_connection(("127.0.0.1", gw.port)) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: 10000000000\r\n\r\n"
        )
        assert sock.recv(4096).startswith(b"HTTP/1.1 413")


def test_answers_carry_the_upstreams_date_once_and_stream_chunk_by_chunk(
    start_gateway_server: StartGatewayServer, upstream: MockUpstreamServer
) -> None:
    gw = start_gateway_server()
    sdk = sdk_client(openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0))
    raw = sdk.chat.completions.with_raw_response.create(model="echo", messages=MESSAGES)
    assert raw.headers.get_list("date") == [raw.headers["date"]]  # the upstream's, once
    body = {**CHAT, "model": "slow-stream", "stream": True}

    def deltas(base_url: str) -> list[str | None]:
        with httpx.stream("POST", base_url + "/v1/chat/completions", json=body) as response:
            assert "content-length" not in response.headers  # streamed, not buffered
            events = [line for line in response.iter_lines() if line.startswith("data:")]
        assert events[-1] == "data: [DONE]"
        chunks = [orjson.loads(event[5:]) for event in events[:-1]]
        return [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]

    # Through uvicorn, the same chunks in the same order as from the model itself.
    through_gateway = deltas(gw.url)
    assert len(through_gateway) > 1
    assert through_gateway == deltas(upstream.url)
