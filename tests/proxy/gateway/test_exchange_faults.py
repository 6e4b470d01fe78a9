"""Bad input and failing upstreams: a clear error in the caller's format, nothing forwarded
that should not be, a record for everything that reached an upstream. In process; what needs a
real socket (a client hanging up mid-stream, a body that never comes) is in
tests/e2e/test_gateway_server.py."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

import openai
import orjson
import pytest
from prometheus_client import generate_latest

from proxy.core.records import Arm, Status
from proxy.mock_upstream.server import MockUpstreamServer
from tests.conftest import InProcessGateway, sdk_client
from tests.proxy.gateway.test_exchange_openai import MESSAGES, records_for

CHAT = {"model": "echo", "messages": MESSAGES}


MARKER = "x-test-marker"


def forwarded(upstream: MockUpstreamServer, marker: str) -> int:
    """Requests the mock received that carry this test's marker header (other tests' background
    shadow calls may still arrive while this one runs)."""
    return sum(r["headers"].get(MARKER) == marker for r in upstream.app.recorder.requests())


BAD_REQUESTS = [
        (b'{"model": "echo", "messages": [', "application/json", 400, "not valid JSON"),
        (b'["model", "echo"]', "application/json", 400, "must be a JSON object"),
        (b'{"messages": []}', "application/json", 400, "'model' is required"),
        (b'{"model": 42}', "application/json", 400, "'model' is required"),
        (b'{"model": "nope", "messages": []}', "application/json", 404, "not a route"),
        (b'{"model": "echo", "x": "\xff\xfe"}', "application/json", 400, "not valid UTF-8"),
        (b"model=echo", "application/x-www-form-urlencoded", 415, "application/json"),
        (b'{"model": "echo", "stream": "yes"}', "application/json", 400, "'stream' must be"),
        (b'{"model": "echo", "stream": true, "stream_options": 3}', "application/json", 400,
         "'stream_options'"),
        (b'{"model": "echo", "n": 1e999}', "application/json", 400, "not valid JSON"),
        (b"", "application/json", 400, "not valid JSON"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("wire", "body", "content_type", "status", "message"),
    [
        (wire, *case)
        for wire in ("openai", "anthropic")
        for case in BAD_REQUESTS
        if wire == "openai" or b"stream_options" not in case[0]  # an OpenAI-only field
    ],
)
def test_malformed_requests_are_refused_in_the_callers_format_and_never_forwarded(
    start_gateway: Callable[..., InProcessGateway],
    upstream: MockUpstreamServer,
    body: bytes,
    content_type: str,
    status: int,
    message: str,
    wire: str,
) -> None:
    gw = start_gateway()
    path = "/v1/chat/completions" if wire == "openai" else "/v1/messages"
    if wire == "anthropic":
        body = body.replace(b'"echo"', b'"echo-claude"')
    marker = uuid.uuid4().hex
    headers = {"content-type": content_type, MARKER: marker}
    response = gw.http.post(path, content=body, headers=headers)
    assert response.status_code == status
    assert response.headers["x-mirrorgate-request-id"]
    error = response.json()
    if wire == "anthropic":
        assert error["type"] == "error"
        assert message in error["error"]["message"]
    else:
        assert message in error["error"]["message"]
        assert error["error"]["type"] == "invalid_request_error"
    assert forwarded(upstream, marker) == 0
    metrics = generate_latest(gw.gateway.registry).decode()
    assert 'mirrorgate_rejected_requests_total{endpoint="' in metrics


def test_oversized_bodies_get_413_without_being_read(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    gw = start_gateway(extra={"server": {"max_body_bytes": 4096}})
    marker = uuid.uuid4().hex
    headers = {"content-type": "application/json", MARKER: marker}
    big = orjson.dumps({**CHAT, "pad": "x" * 10_000})
    response = gw.http.post("/v1/chat/completions", content=big, headers=headers)
    assert response.status_code == 413
    assert "larger than 4096" in response.json()["error"]["message"]

    def chunks():  # no content-length: the limit is enforced while reading
        yield big[:3000]
        yield big[3000:]

    response = gw.http.post("/v1/chat/completions", content=chunks(), headers=headers)
    assert response.status_code == 413
    # A client that declares 10 GB and sends nothing gets its answer at once: the gateway
    # answers without waiting for a body that never comes.
    declared = [(b"content-type", b"application/json"), (b"content-length", b"10000000000")]
    assert gw.status_without_body("POST", "/v1/chat/completions", declared) == 413
    assert forwarded(upstream, marker) == 0


@pytest.mark.parametrize(
    ("route", "status", "record_status"),
    [
        ("garbage", 502, Status.INVALID_RESPONSE),
        ("reset", 502, Status.CONNECT_ERROR),
        ("stall", 504, Status.TIMEOUT),
    ],
)
def test_failing_upstreams_map_to_502_and_504(
    start_gateway: Callable[..., InProcessGateway], route: str, status: int, record_status: Status
) -> None:
    gw = start_gateway()
    response = gw.http.post("/v1/chat/completions", json={**CHAT, "model": route})
    assert response.status_code == status
    assert response.json()["error"]["type"] in ("upstream_error", "timeout")
    (record,) = records_for(gw, response.headers["x-mirrorgate-request-id"])
    assert record.status is record_status and record.http_status == status


def test_upstream_http_errors_pass_through_unchanged(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway()
    sdk = sdk_client(
        openai.OpenAI(
            base_url=gw.url + "/v1", api_key="k", max_retries=0, http_client=gw.sdk_http()
        )
    )
    with pytest.raises(openai.InternalServerError) as info:
        sdk.chat.completions.create(model="broken", messages=MESSAGES)
    assert info.value.status_code == 503
    assert "injected error" in info.value.message
    (record,) = records_for(gw, info.value.response.headers["x-mirrorgate-request-id"])
    assert record.status is Status.UPSTREAM_ERROR and record.error_class == "http_503"


@pytest.mark.parametrize("primary", ["broken", "reset", "stall"])
@pytest.mark.parametrize("stream", [False, True])
def test_fallback_serves_when_the_primary_fails_before_any_byte(
    start_gateway: Callable[..., InProcessGateway], primary: str, stream: bool
) -> None:
    gw = start_gateway(extra={"routes": {"guarded": {"primary": primary, "fallback": "echo"}}})
    sdk = sdk_client(
        openai.OpenAI(
            base_url=gw.url + "/v1", api_key="k", max_retries=0, http_client=gw.sdk_http()
        )
    )
    raw = sdk.chat.completions.with_raw_response.create(
        model="guarded", messages=MESSAGES, stream=stream
    )
    assert raw.headers["x-mirrorgate-arm"] == "fallback"
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)  # type: ignore[union-attr]
    else:
        text = raw.parse().choices[0].message.content  # type: ignore[union-attr]
    assert "How heavy can my parcel be?" in (text or "")
    by_arm = {r.arm: r for r in records_for(gw, raw.headers["x-mirrorgate-request-id"], 2)}
    assert by_arm[Arm.PRIMARY].target == primary and by_arm[Arm.PRIMARY].status is not Status.OK
    assert by_arm[Arm.FALLBACK].target == "echo" and by_arm[Arm.FALLBACK].status is Status.OK
    # The abandoned attempt counts as the 5xx its caller would have got (alert rules read it).
    expected = {"broken": 503, "reset": 502, "stall": 504}[primary]
    assert by_arm[Arm.PRIMARY].http_status == expected


def test_broken_streams_end_with_an_error_event_and_a_record(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway()
    sdk = sdk_client(
        openai.OpenAI(
            base_url=gw.url + "/v1", api_key="k", max_retries=0, http_client=gw.sdk_http()
        )
    )
    raw = sdk.chat.completions.with_raw_response.create(
        model="mid-disconnect", messages=MESSAGES, stream=True
    )
    with pytest.raises(openai.APIError, match="stream broke"):
        list(raw.parse())  # type: ignore[call-overload]
    (record,) = records_for(gw, raw.headers["x-mirrorgate-request-id"])
    assert record.status is Status.CONNECT_ERROR
    with gw.http.stream(
        "POST", "/v1/chat/completions", json={**CHAT, "model": "bad-chunk", "stream": True}
    ) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data:")]
        request_id = response.headers["x-mirrorgate-request-id"]
    assert "data: {this is not json" in lines  # forwarded as the upstream sent it
    (record,) = records_for(gw, request_id)
    assert record.status is Status.INVALID_RESPONSE and record.error_class == "malformed_event"


def test_secrets_never_reach_records_logs_or_errors(
    start_gateway: Callable[..., InProcessGateway],
    upstream: MockUpstreamServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "sk-proj-TOPSECRET0123456789abcdef"
    env = {"MG_TEST_KEY": secret}
    extra = {
        "models": {
            "keyed": {"provider": "openai", "base_url": upstream.url + "/v1", "model": "echo",
                      "api_key_env": "MG_TEST_KEY"},
            "keyed-down": {"provider": "openai", "base_url": "http://127.0.0.1:9/v1",
                           "model": "echo", "api_key_env": "MG_TEST_KEY", "timeout_s": 1},
        },
        "routes": {"keyed": {"primary": "keyed"}, "keyed-down": {"primary": "keyed-down"}},
        "store": {"bodies": "redacted"},
    }  # fmt: skip
    caplog.set_level(logging.DEBUG)
    gw = start_gateway(extra=extra, env=env)
    ok = gw.http.post(
        "/v1/chat/completions",
        json={**CHAT, "model": "keyed",
              "messages": [{"role": "user", "content": f"key {secret}, mail me@example.com"}]},
        headers={"authorization": "Bearer client-own-key"},
    )  # fmt: skip
    assert ok.status_code == 200
    sent = upstream.app.recorder.requests()[-1]["headers"]
    assert sent["authorization"] == f"Bearer {secret}"  # the configured key, not the client's
    down = gw.http.post("/v1/chat/completions", json={**CHAT, "model": "keyed-down"})
    assert down.status_code == 502 and secret not in down.text
    records = records_for(gw, ok.headers["x-mirrorgate-request-id"]) + records_for(
        gw, down.headers["x-mirrorgate-request-id"]
    )
    for record in records:
        for text in (record.request_body, record.response_body, record.response_text):
            assert secret not in (text or "")
            assert "me@example.com" not in (text or "")
    assert secret not in caplog.text
