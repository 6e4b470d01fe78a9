"""The startup wiring: each part exists only when the config asks for it, and the app sends the
proxied endpoints to the raw handler and everything else to the API."""

from __future__ import annotations

import ssl
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from proxy.app.gateway import Gateway
from proxy.upstream import tokens
from tests.conftest import InProcessGateway, gateway_config

CHECKED = {
    "rules": {"r": {"routes": ["echo"], "checks": [{"name": "json", "type": "json"}]}},
}


def built(**extra: object) -> Gateway:
    config = gateway_config("http://127.0.0.1:9", "sqlite:///unused.db", dict(extra))
    return Gateway(config, registry=CollectorRegistry(), env={})


def test_optional_parts_are_built_only_when_configured() -> None:
    plain = built()
    assert plain.shadows is None and plain.analysis is None and plain.alerts is None
    assert plain.proxy.observers == (plain.access_log,)
    assert set(plain.clients) == set(plain.config.models)

    shadowed = built(routes={"echo": {"primary": "echo", "shadows": [{"model": "stale"}]}})
    assert shadowed.shadows is not None and shadowed.analysis is None
    assert shadowed.proxy.observers == (shadowed.shadows, shadowed.access_log)

    checked = built(**CHECKED)
    assert checked.analysis is not None and checked.shadows is None
    assert checked.proxy.observers == (checked.analysis, checked.access_log)

    alerting = built(alerts={"sinks": [{"type": "webhook", "url": "http://127.0.0.1:9/hook"}]})
    assert alerting.alerts is not None and alerting.alert_client is not None
    # One verifying TLS context for every gateway's alert client (loading a CA bundle is slow).
    again = built(alerts={"sinks": [{"type": "webhook", "url": "http://127.0.0.1:9/other"}]})
    assert again.alert_client is not None
    contexts = [
        gateway.alert_client._transport._pool._ssl_context  # httpx keeps it on the pool
        for gateway in (alerting, again)
    ]
    assert contexts[0] is contexts[1] and contexts[0].verify_mode is ssl.CERT_REQUIRED


def test_models_are_listed_in_both_wire_formats(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway()
    names = gw.gateway.routes.names()
    openai = gw.http.get("/v1/models").json()
    assert openai["object"] == "list"
    assert [m["id"] for m in openai["data"]] == names
    anthropic = gw.http.get("/v1/models", headers={"anthropic-version": "2023-06-01"}).json()
    assert [m["id"] for m in anthropic["data"]] == names
    assert anthropic["first_id"] == names[0] and anthropic["last_id"] == names[-1]
    assert anthropic["has_more"] is False and anthropic["data"][0]["type"] == "model"


def test_the_lifespan_starts_and_drains_the_parts(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway(extra=CHECKED)
    assert gw.http.get("/readyz").json() == {
        "status": "ready",
        "store": True,
        "config": True,
        "writes": True,
    }
    assert gw.gateway.ready
    # Only the proxied endpoints take POSTs outside the API: anything else is the API's 404/405.
    assert gw.http.post("/v1/nothing-here", json={}).status_code == 404
    messages = [{"role": "user", "content": "hi"}]
    response = gw.http.post("/v1/chat/completions", json={"model": "echo", "messages": messages})
    assert response.status_code == 200
    gw.stop()  # at once: the record may still be queued
    assert not gw.gateway.ready
    assert gw.gateway.recorder.pending() == 0  # drained: what was accepted was written
    assert gw.gateway.store.count(route="echo") == 1


def test_the_token_vocabulary_is_loaded_at_start_not_by_the_first_estimate(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    tokens._encoding.cache_clear()
    gw = start_gateway()
    assert gw.gateway.ready
    assert tokens._encoding.cache_info().currsize == 1  # loaded before any request
