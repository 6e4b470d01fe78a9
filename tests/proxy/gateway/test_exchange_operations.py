"""Business operations through a gateway (in process): every exchange of a request that names an
operation records it — primary, canary, fallback, shadows, probes and the judge's calls — and an
id that is not one is refused in the caller's wire format before anything is called."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from proxy.core import Arm
from proxy.mock_upstream.server import MockUpstreamServer
from tests.conftest import InProcessGateway, wait_until
from tests.proxy.mirror.test_llm_judge import judged
from tests.proxy.mirror.test_probes import chat, probed, settled

StartGateway = Callable[..., InProcessGateway]
OP = "x-mirrorgate-operation"
TOKEN = "t0ken-for-tests"
AUTH = {"authorization": f"Bearer {TOKEN}"}


def arms_of(gw: InProcessGateway, operation: str, count: int) -> list[Arm]:
    store = gw.gateway.store
    records = wait_until(
        lambda: len(r := [x for x in store.query(limit=10_000) if x.operation_id == operation])
        >= count
        and r,
        what=f"{count} records of {operation}",
    )
    return sorted((r.arm for r in records), key=str)


def test_primary_shadow_and_both_judge_calls_carry_the_operation(
    start_gateway: StartGateway, upstream: MockUpstreamServer
) -> None:
    gw = start_gateway(extra=judged(upstream))
    body = {"model": "shadowed", "messages": [{"role": "user", "content": uuid.uuid4().hex}]}
    answer = gw.http.post("/v1/chat/completions", json=body, headers={OP: "ticket 1"})
    assert answer.status_code == 200
    assert arms_of(gw, "ticket 1", 4) == [Arm.JUDGE, Arm.JUDGE, Arm.PRIMARY, Arm.SHADOW]
    # A request of no operation records none.
    other = gw.http.post("/v1/chat/completions", json=body)
    request_id = other.headers["x-mirrorgate-request-id"]
    records = wait_until(lambda: gw.gateway.store.query(request_id=request_id), what="stored")
    assert {r.operation_id for r in records} == {None}


def test_a_fallback_try_and_the_failed_first_call_both_carry_the_operation(
    start_gateway: StartGateway,
) -> None:
    extra = {"routes": {"saved": {"primary": "broken", "fallback": "echo"}}}
    gw = start_gateway(extra=extra)
    body = {"model": "saved", "messages": [{"role": "user", "content": "hi"}]}
    answer = gw.http.post("/v1/chat/completions", json=body, headers={OP: "ticket-2"})
    assert answer.status_code == 200 and answer.headers["x-mirrorgate-arm"] == "fallback"
    assert arms_of(gw, "ticket-2", 2) == [Arm.FALLBACK, Arm.PRIMARY]


def test_canary_calls_carry_the_operation(start_gateway: StartGateway) -> None:
    canary = {"model": "stale", "steps": [100], "step_interval_s": 3600, "sticky": "none"}
    extra = {"routes": {"bot": {"primary": "echo", "canary": canary}}}
    gw = start_gateway(extra=extra, env={"MIRRORGATE_ADMIN_TOKEN": TOKEN})
    started = gw.http.post("/admin/rollouts/bot/start", headers=AUTH, json={})
    assert started.status_code == 200, started.text
    body = {"model": "bot", "messages": [{"role": "user", "content": "hi"}]}
    answer = gw.http.post("/v1/chat/completions", json=body, headers={OP: "ticket-3"})
    assert answer.headers["x-mirrorgate-arm"] == "canary"
    assert arms_of(gw, "ticket-3", 1) == [Arm.CANARY]


def test_probe_calls_carry_the_operation_of_the_live_request(start_gateway: StartGateway) -> None:
    gw = start_gateway(extra=probed(targets=["stale"]))
    answer = gw.http.post("/v1/chat/completions", json=chat(uuid.uuid4().hex), headers={OP: "t4"})
    assert answer.status_code == 200
    settled(gw)
    assert arms_of(gw, "t4", 2) == [Arm.PRIMARY, Arm.PROBE]


def test_the_routes_body_field_names_the_operation_and_the_header_wins(
    start_gateway: StartGateway,
) -> None:
    extra = {"routes": {"meta": {"primary": "echo", "operation_field": "metadata.operation_id"}}}
    gw = start_gateway(extra=extra)
    body = {
        "model": "meta",
        "messages": [{"role": "user", "content": "hi"}],
        "metadata": {"operation_id": "from-body"},
    }
    assert gw.http.post("/v1/chat/completions", json=body).status_code == 200
    assert arms_of(gw, "from-body", 1) == [Arm.PRIMARY]
    assert gw.http.post("/v1/chat/completions", json=body, headers={OP: "hdr"}).status_code == 200
    assert arms_of(gw, "hdr", 1) == [Arm.PRIMARY]
    # The field went upstream untouched (OpenAI's `metadata` is the client's).
    bad = {**body, "metadata": {"operation_id": 7}}
    refused = gw.http.post("/v1/chat/completions", json=bad)
    assert refused.status_code == 400
    assert "metadata.operation_id" in refused.json()["error"]["message"]


@pytest.mark.parametrize(
    ("path", "model", "value"),
    [
        ("/v1/chat/completions", "echo", "x" * 129),
        ("/v1/chat/completions", "echo", "a\x7fb"),
        ("/v1/messages", "echo-claude", ""),
    ],
)
def test_a_bad_operation_id_is_refused_in_the_callers_format_and_nothing_is_called(
    start_gateway: StartGateway, upstream: MockUpstreamServer, path: str, model: str, value: str
) -> None:
    gw = start_gateway()
    marker = uuid.uuid4().hex
    body = {"model": model, "max_tokens": 10, "messages": [{"role": "user", "content": marker}]}
    refused = gw.http.post(path, json=body, headers={OP: value})
    assert refused.status_code == 400
    answer = refused.json()
    if path == "/v1/messages":
        assert answer["type"] == "error" and "x-mirrorgate-operation" in answer["error"]["message"]
    else:
        assert "x-mirrorgate-operation" in answer["error"]["message"]
    assert refused.headers["x-mirrorgate-request-id"]
    assert not [r for r in upstream.app.recorder.requests() if marker in str(r["body"])]
