"""What the mock received can be read back, reset, counted, switched off and locked by a key."""

from __future__ import annotations

import httpx
import openai
import pytest

from proxy.mock_upstream.behavior import parse_behavior
from proxy.mock_upstream.server import MockUpstreamServer
from tests.conftest import wait_until


def test_requests_are_recorded_with_lowercased_headers_and_parsed_body(
    oai: openai.OpenAI, raw: httpx.Client
) -> None:
    raw.post("/_mock/reset")
    oai.chat.completions.create(
        model="gpt-x",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"X-Rule-Version": "v2"},
    ).close()
    (request,) = raw.get("/_mock/requests").json()
    assert request["method"] == "POST" and request["path"] == "/v1/chat/completions"
    assert request["headers"]["authorization"] == "Bearer sk-test"
    assert request["headers"]["x-rule-version"] == "v2"
    assert request["body"]["model"] == "gpt-x"
    assert request["body"]["stream_options"] == {"include_usage": True}


def test_a_request_nested_as_deep_as_the_gateway_forwards_can_be_read_back(
    raw: httpx.Client,
) -> None:
    raw.post("/_mock/reset")
    # 254 levels inside the body: the gateway forwards it (orjson writes up to 255), and the
    # recorder's own levels put it beyond what orjson writes back.
    deep = b"[" * 254 + b"]" * 254
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "x": %s}' % deep
    raw.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    answer = raw.get("/_mock/requests")
    assert answer.status_code == 200
    (request,) = answer.json()
    depth, value = 0, request["body"]["x"]
    while value:
        depth, value = depth + 1, value[0]
    assert depth == 253  # every level came back (the innermost list is empty)


def test_stats_count_per_path_and_reset_clears_everything(
    oai: openai.OpenAI, raw: httpx.Client
) -> None:
    raw.post("/_mock/reset")
    oai.embeddings.create(model="e", input="a")
    oai.embeddings.create(model="e", input="b")
    oai.completions.create(model="c", prompt="p")
    stats = raw.get("/_mock/stats").json()
    assert stats == {
        "total": 3,
        "paths": {"/v1/embeddings": 2, "/v1/completions": 1},
        "faults": {},
        "abandoned": 0,
        "memorised": 0,
    }
    assert raw.post("/_mock/reset").json() == {"reset": True}
    assert raw.get("/_mock/requests").json() == []
    assert raw.get("/_mock/stats").json()["total"] == 0


def test_a_client_that_hangs_up_on_a_delayed_answer_is_counted_as_abandoned(
    raw: httpx.Client,
) -> None:
    raw.post("/_mock/reset")
    body = {"model": "slow", "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(httpx.ReadTimeout):  # httpx closes the connection: the mock sees it go
        raw.post("/v1/chat/completions", json=body, timeout=0.2)
    wait_until(lambda: raw.get("/_mock/stats").json()["abandoned"] == 1, what="abandoned")


def test_unparseable_bodies_are_recorded_as_text(raw: httpx.Client) -> None:
    raw.post("/_mock/reset")
    raw.post("/v1/messages", content=b"not json")
    assert raw.get("/_mock/requests").json()[0]["body"] == "not json"


def test_recording_off_keeps_counts_but_no_requests() -> None:
    behavior = parse_behavior({"record_requests": False})
    with MockUpstreamServer(behavior) as server, httpx.Client(base_url=server.url) as client:
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
        assert client.post("/v1/chat/completions", json=body).status_code == 200
        assert client.get("/_mock/requests").json() == []
        assert client.get("/_mock/stats").json()["total"] == 1


def test_recording_is_bounded_to_the_latest_requests() -> None:
    behavior = parse_behavior({"max_recorded_requests": 3})
    with MockUpstreamServer(behavior) as server, httpx.Client(base_url=server.url) as client:
        for n in range(5):
            client.post("/v1/embeddings", json={"model": f"m{n}", "input": "x"})
        models = [r["body"]["model"] for r in client.get("/_mock/requests").json()]
    assert models == ["m2", "m3", "m4"]


def test_an_api_key_is_enforced_when_configured() -> None:
    behavior = parse_behavior({"api_key": "sk-right"})
    with MockUpstreamServer(behavior) as server:
        url = server.url + "/v1"
        with (
            openai.OpenAI(base_url=url, api_key="sk-wrong", max_retries=0) as wrong,
            pytest.raises(openai.AuthenticationError),
        ):
            wrong.embeddings.create(model="m", input="x")
        with openai.OpenAI(base_url=url, api_key="sk-right", max_retries=0) as right:
            assert right.embeddings.create(model="m", input="x").data
        headers = {"x-api-key": "sk-right", "anthropic-version": "2023-06-01"}
        body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
        assert (
            httpx.post(server.url + "/v1/messages", json=body, headers=headers).status_code == 200
        )


def test_control_surface(raw: httpx.Client) -> None:
    assert raw.get("/healthz").json() == {"status": "ok"}
    behavior = raw.get("/_mock/behavior").json()
    stale = {"type": "fixed", "text": '{"max_weight": 100}', "repeat": 1}
    assert behavior["models"]["stale"]["answer"] == stale
    assert raw.get("/_mock/nothing").status_code == 404
