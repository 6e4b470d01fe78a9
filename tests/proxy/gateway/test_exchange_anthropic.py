"""The gateway in front of the mock upstream, driven by the official anthropic SDK (in process)."""

from __future__ import annotations

from collections.abc import Callable

import anthropic
import pytest

from proxy.core.records import Status
from proxy.mock_upstream.server import MockUpstreamServer
from tests.conftest import InProcessGateway, sdk_client
from tests.proxy.gateway.test_exchange_openai import records_for

SYSTEM = "You answer in JSON. max_weight = 150"


def client(gw: InProcessGateway) -> anthropic.Anthropic:
    return sdk_client(  # type: ignore[no-any-return]
        anthropic.Anthropic(
            base_url=gw.url, api_key="client-key", max_retries=0, http_client=gw.sdk_http()
        )
    )


def test_messages_stream_and_not_agree_and_are_recorded(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    gw = start_gateway()
    sdk = client(gw)
    kwargs = {
        "model": "echo-claude",
        "max_tokens": 256,
        "system": SYSTEM,
        "messages": [{"role": "user", "content": "What is the limit?"}],
    }
    raw = sdk.messages.with_raw_response.create(**kwargs)  # type: ignore[call-overload]
    message = raw.parse()
    assert raw.headers["x-mirrorgate-arm"] == "primary"
    text = "".join(b.text for b in message.content if b.type == "text")
    with sdk.messages.stream(**kwargs) as stream:  # type: ignore[arg-type]
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
        request_id = stream.response.headers["x-mirrorgate-request-id"]
    assert streamed == text
    assert final.usage.output_tokens == message.usage.output_tokens
    (plain,) = records_for(gw, raw.headers["x-mirrorgate-request-id"])
    (record,) = records_for(gw, request_id)
    for rec in (plain, record):
        assert rec.status is Status.OK and rec.provider == "anthropic"
        assert rec.usage.input_tokens == message.usage.input_tokens
        assert rec.usage.output_tokens == message.usage.output_tokens
        expected = (message.usage.input_tokens * 3.0 + message.usage.output_tokens * 15.0) / 1e6
        assert rec.cost_usd == pytest.approx(expected, rel=1e-12)
    assert record.streamed and record.ttft_s is not None
    sent = upstream.app.recorder.requests()[-1]
    assert sent["path"] == "/v1/messages"
    assert sent["headers"]["anthropic-version"] == sdk.default_headers["anthropic-version"]
    # A client that sends no version gets the stable default rather than an upstream 400.
    gw.http.post("/v1/messages", json={**kwargs, "max_tokens": 8}).raise_for_status()
    assert upstream.app.recorder.requests()[-1]["headers"]["anthropic-version"] == "2023-06-01"


def test_rule_follower_and_stale_model_answer_differently(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway()
    sdk = client(gw)

    def ask(route: str) -> str:
        message = sdk.messages.create(
            model=route, max_tokens=64, system=SYSTEM,
            messages=[{"role": "user", "content": "limit?"}],
        )  # fmt: skip
        return "".join(b.text for b in message.content if b.type == "text")

    assert ask("rule-follower-claude") == '{"max_weight": 150}'
    assert ask("stale-claude") == '{"max_weight": 100}'


def test_errors_use_the_anthropic_wire_format(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway()
    with pytest.raises(anthropic.NotFoundError) as info:
        client(gw).messages.create(
            model="nope", max_tokens=8, messages=[{"role": "user", "content": "x"}]
        )
    assert info.value.body["type"] == "error"  # type: ignore[index]
    assert info.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    # An OpenAI-format route called on the Anthropic endpoint is refused, not mistranslated.
    response = gw.http.post(
        "/v1/messages",
        json={"model": "echo", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]},
    )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert "speaks anthropic" in response.json()["error"]["message"]
