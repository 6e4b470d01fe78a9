"""The public routes: the route list in both providers' shapes, health, readiness, metrics."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Counter

from proxy.api.public import PublicParts, public_router
from proxy.gateway.routing import RouteTable
from tests.conftest import gateway_config


def _client(
    *, started: bool = True, store_ok: bool = True, write_problem: str | None = None
) -> httpx.AsyncClient:
    config = gateway_config("http://127.0.0.1:9", "sqlite:///unused.db")
    registry = CollectorRegistry()
    Counter("probe_marker", "A family only this registry has.", registry=registry).inc()
    app = FastAPI(routes=public_router.routes)
    app.state.public_parts = PublicParts(
        RouteTable(config),
        registry,
        started=lambda: started,
        store_ok=lambda: store_ok,
        write_problem=lambda: write_problem,
    )
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw")


@pytest.mark.anyio
async def test_models_lists_every_route_in_the_callers_shape() -> None:
    async with _client() as client:
        openai = (await client.get("/v1/models")).json()
        anthropic = (await client.get("/v1/models", headers={"anthropic-version": "1"})).json()
    names = [m["id"] for m in openai["data"]]
    assert openai["object"] == "list" and "echo" in names and "echo-claude" in names
    assert {m["owned_by"] for m in openai["data"]} == {"mirrorgate"}
    assert [m["id"] for m in anthropic["data"]] == names
    assert anthropic["first_id"] == names[0] and anthropic["last_id"] == names[-1]
    assert anthropic["has_more"] is False and anthropic["data"][0]["type"] == "model"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("started", "store_ok", "status"),
    [(True, True, 200), (False, True, 503), (True, False, 503)],
)
async def test_readiness_needs_a_started_gateway_and_a_reachable_store(
    started: bool, store_ok: bool, status: int
) -> None:
    async with _client(started=started, store_ok=store_ok) as client:
        ready = await client.get("/readyz")
        alive = await client.get("/healthz")
    assert ready.status_code == status
    body = ready.json()
    assert body.pop("reason", None) == (
        None
        if status == 200
        else "the gateway is starting"
        if store_ok
        else "the store does not answer"
    )
    assert body == {
        "status": "ready" if status == 200 else "not ready",
        "store": store_ok,
        "config": started,
        "writes": True,
    }
    assert alive.status_code == 200  # liveness never depends on the store


@pytest.mark.anyio
async def test_readiness_fails_while_records_cannot_be_written() -> None:
    problem = "writing 3 records: OperationalError: database or disk is full"
    async with _client(write_problem=problem) as client:
        ready = await client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json() == {
        "status": "not ready", "store": True, "config": True, "writes": False, "reason": problem,
    }  # fmt: skip


@pytest.mark.anyio
async def test_metrics_exposes_the_registry_it_was_given() -> None:
    async with _client() as client:
        answer = await client.get("/metrics")
    assert answer.headers["content-type"].startswith("text/plain")
    assert "probe_marker_total 1.0" in answer.text
