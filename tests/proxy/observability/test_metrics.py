"""/metrics, /healthz, /readyz and OpenTelemetry spans, observed from outside."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from proxy.app.gateway import Gateway
from tests.conftest import InProcessGateway, gateway_config, wait_until
from tests.proxy.gateway.test_exchange_openai import MESSAGES, records_for


def test_metrics_count_exchanges_with_config_labels_only(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway()
    ok = gw.http.post("/v1/chat/completions", json={"model": "echo", "messages": MESSAGES})
    (record,) = records_for(gw, ok.headers["x-mirrorgate-request-id"])
    evil = 'evil"} 1\nmirrorgate_fake 2'
    gw.http.post("/v1/chat/completions", json={"model": evil, "messages": MESSAGES})
    text = gw.http.get("/metrics").text
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    arm = {"route": "echo", "target": "echo", "arm": "primary"}
    assert value("mirrorgate_requests_total", **arm, status_class="2xx") == 1
    assert value("mirrorgate_request_duration_seconds_count", **arm) == 1
    assert value("mirrorgate_tokens_total", **arm, type="output") == record.usage.output_tokens
    assert value("mirrorgate_cost_usd_total", **arm) == record.cost_usd
    assert value("mirrorgate_overhead_seconds_count", route="echo") == 1
    assert (
        value("mirrorgate_rejected_requests_total", endpoint="chat.completions", status="404") == 1
    )
    assert value("mirrorgate_recorder_dropped_total", reason="queue_full") == 0
    assert "evil" not in text and "mirrorgate_fake" not in text


def test_health_and_readiness(start_gateway: Callable[..., InProcessGateway]) -> None:
    gw = start_gateway()
    assert gw.http.get("/healthz").json() == {"status": "ok"}
    ready = gw.http.get("/readyz")
    assert ready.status_code == 200 and ready.json()["store"] is True


def test_readiness_fails_when_the_store_is_unreachable(
    upstream_url: str = "http://127.0.0.1:9",
) -> None:
    dead = "postgresql+psycopg://postgres@127.0.0.1:1/test"
    gateway = Gateway(gateway_config(upstream_url, dead), registry=CollectorRegistry())
    gateway.ready = True  # as if started; the store then went away

    async def probe() -> httpx.Response:
        transport = httpx.ASGITransport(app=gateway.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            return await client.get("/readyz")

    response = asyncio.run(probe())
    assert response.status_code == 503
    assert response.json() == {
        "status": "not ready", "store": False, "config": True, "writes": True,
        "reason": "the store does not answer",
    }  # fmt: skip


def test_spans_follow_the_genai_conventions(start_gateway: Callable[..., InProcessGateway]) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    gw = start_gateway(tracer_provider=provider)
    response = gw.http.post(
        "/v1/chat/completions",
        json={"model": "echo", "messages": MESSAGES, "stream": True},
    )
    (record,) = records_for(gw, response.headers["x-mirrorgate-request-id"])
    (span,) = wait_until(exporter.get_finished_spans, what="the exchange span")
    attributes = dict(span.attributes or {})
    assert span.name == "chat echo"
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.request.model"] == "echo"
    assert attributes["gen_ai.usage.output_tokens"] == record.usage.output_tokens
    assert attributes["gen_ai.usage.input_tokens"] == record.usage.input_tokens
    assert attributes["mirrorgate.request_id"] == record.request_id
    assert attributes["mirrorgate.arm"] == "primary"
    assert span.end_time is not None and span.start_time is not None
    assert span.end_time - span.start_time == int(record.duration_s * 1e9)


def test_tracing_is_off_without_an_endpoint_and_on_with_one() -> None:
    from proxy.config.specs import TelemetrySpec
    from proxy.observability.tracing import build_tracer_provider

    assert build_tracer_provider(TelemetrySpec(), env={}) is None
    provider = build_tracer_provider(
        TelemetrySpec(service_name="gw-a"),
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
    )
    assert provider is not None
    assert provider.resource.attributes["service.name"] == "gw-a"
    provider.shutdown()
