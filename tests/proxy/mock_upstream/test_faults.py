"""Injected faults are observable the way a real broken upstream's would be."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anthropic
import httpx
import openai
import orjson
import pytest

from proxy.mock_upstream.behavior import ModelBehaviorSpec, parse_behavior
from proxy.mock_upstream.faults import FaultSchedule

if TYPE_CHECKING:  # the SDKs load on first use (tests/sdk_imports.py)
    from anthropic.types import MessageParam
    from openai.types.chat import ChatCompletionMessageParam

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]


def chat(model: str, stream: bool = False) -> dict[str, object]:
    return {"model": model, "messages": MESSAGES, "stream": stream}


@pytest.mark.parametrize(  # the SDK's exceptions by name: the SDK loads when a test runs
    ("model", "status", "error_name"),
    [("down", 503, "InternalServerError"), ("limited", 429, "RateLimitError")],
)
def test_error_has_the_status_and_the_sdk_exception(
    oai: openai.OpenAI, model: str, status: int, error_name: str
) -> None:
    error: type[openai.APIStatusError] = getattr(openai, error_name)
    with pytest.raises(error) as caught:
        oai.chat.completions.create(model=model, messages=MESSAGES)
    assert caught.value.status_code == status
    with pytest.raises(error):
        oai.responses.create(model=model, input="hello")
    with pytest.raises(error):
        oai.embeddings.create(model=model, input="hello")


@pytest.mark.parametrize(
    ("model", "error_name", "kind"),
    [
        ("down", "ServiceUnavailableError", "overloaded_error"),
        ("overloaded", "OverloadedError", "overloaded_error"),
        ("limited", "RateLimitError", "rate_limit_error"),
    ],
)
def test_anthropic_errors_have_the_anthropic_shape(
    claude: anthropic.Anthropic, model: str, error_name: str, kind: str
) -> None:
    error: type[anthropic.APIStatusError] = getattr(anthropic, error_name)
    with pytest.raises(error) as caught:
        claude.messages.create(
            model=model, max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["type"] == "error" and caught.value.body["error"]["type"] == kind


def test_rate_fails_every_fifth_request_reproducibly(raw: httpx.Client) -> None:
    raw.post("/_mock/reset")
    statuses = [
        raw.post("/v1/chat/completions", json=chat("every-fifth")).status_code for _ in range(15)
    ]
    assert [i + 1 for i, s in enumerate(statuses) if s == 500] == [5, 10, 15]
    assert raw.get("/_mock/stats").json()["faults"] == {"error": 3}


def test_garbage_is_a_200_that_is_not_json(raw: httpx.Client, oai: openai.OpenAI) -> None:
    response = raw.post("/v1/chat/completions", json=chat("junk"))
    assert response.status_code == 200
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(response.content)
    with pytest.raises(ValueError, match="Expecting value"):  # the SDK's json.JSONDecodeError
        oai.chat.completions.create(model="junk", messages=MESSAGES)


def test_malformed_chunk_arrives_after_k_events_and_the_stream_goes_on(raw: httpx.Client) -> None:
    text = raw.post("/v1/chat/completions", json=chat("broken", stream=True)).text
    data = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    assert data[2] == "{oops"
    assert all(orjson.loads(d) for d in data[:2] + data[3:-1])
    assert data[-1] == "[DONE]"


def test_disconnect_mid_stream_cuts_the_body_after_k_events(raw: httpx.Client) -> None:
    events: list[str] = []
    with (
        pytest.raises(httpx.RemoteProtocolError),
        raw.stream("POST", "/v1/chat/completions", json=chat("cut", stream=True)) as response,
    ):
        assert response.status_code == 200
        events.extend(line for line in response.iter_lines() if line.startswith("data: "))
    assert len(events) == 3


def test_disconnect_mid_stream_breaks_the_sdk_stream(claude: anthropic.Anthropic) -> None:
    messages: list[MessageParam] = [{"role": "user", "content": "x"}]
    # The SDK lets the transport's own error through (its httpx fork's RemoteProtocolError).
    with pytest.raises(Exception, match="incomplete chunked read"):
        list(claude.messages.create(model="cut", max_tokens=9, messages=messages, stream=True))


def test_reset_closes_the_connection_without_a_response(raw: httpx.Client) -> None:
    with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
        raw.post("/v1/chat/completions", json=chat("reset"))
    assert raw.post("/v1/chat/completions", json=chat("ok")).status_code == 200


def test_timeout_stalls_until_the_client_gives_up(raw: httpx.Client) -> None:
    with pytest.raises(httpx.ReadTimeout):
        raw.post("/v1/chat/completions", json=chat("hang"), timeout=0.05)
    url = str(raw.base_url) + "/v1"
    with (
        openai.OpenAI(base_url=url, api_key="k", max_retries=0, timeout=0.05) as client,
        pytest.raises(openai.APITimeoutError),
    ):
        client.chat.completions.create(model="hang", messages=MESSAGES)


def test_a_finite_stall_then_answers_normally(raw: httpx.Client) -> None:
    response = raw.post("/v1/chat/completions", json=chat("late", stream=True))
    assert response.status_code == 200 and response.text.endswith("data: [DONE]\n\n")


def test_each_fault_counts_only_the_requests_it_applies_to() -> None:
    spec = parse_behavior(
        {"default": {"garbage": {"rate": 0.5}, "disconnect_mid_stream": {"rate": 0.5}}}
    ).default
    schedule = FaultSchedule()
    picks = [schedule.pick("m", spec, stream) for stream in (True, False, True, False)]
    assert [type(p).__name__ if p else None for p in picks] == [
        None,
        None,
        "DisconnectFault",
        "GarbageFault",
    ]


def test_the_first_due_fault_wins_but_every_counter_advances() -> None:
    spec = ModelBehaviorSpec.model_validate(
        {"reset": {"rate": 0.5}, "error": {"rate": 1.0, "status": 502}}
    )
    schedule = FaultSchedule()
    picks = [type(schedule.pick("m", spec, stream=False)).__name__ for _ in range(4)]
    assert picks == ["ErrorFault", "ResetFault", "ErrorFault", "ResetFault"]
    assert schedule.injected == {"error": 2, "reset": 2}
    schedule.reset()
    assert type(schedule.pick("m", spec, stream=False)).__name__ == "ErrorFault"


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.35, 0.7, 1 / 3])
def test_rates_hit_exactly_their_share(rate: float) -> None:
    spec = ModelBehaviorSpec.model_validate({"error": {"rate": rate}})
    schedule = FaultSchedule()
    hits = sum(schedule.pick("m", spec, stream=False) is not None for _ in range(600))
    assert hits == round(600 * rate)
