"""bench/production.py: the production-shaped route's configuration is one the gateway accepts, with
the parts the bench claims, and the stand-in collector counts the spans of OTLP/HTTP exports."""

from __future__ import annotations

import importlib.util
import sys
import urllib.error
import urllib.request
from pathlib import Path
from types import ModuleType

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from proxy.config import parse_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def production() -> ModuleType:
    spec = importlib.util.spec_from_file_location("production", ROOT / "bench" / "production.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["production"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_production_route_config_is_accepted_with_its_parts(production: ModuleType) -> None:
    text = production.gateway_config(
        "http://127.0.0.1:9/v1", 8080, "postgresql://127.0.0.1:5432/bench_production",
        "http://127.0.0.1:4318/v1/traces",
    )  # fmt: skip
    config = parse_config(text, env={})
    route = config.routes[production.PRODUCTION_ROUTE]
    assert [s.sample for s in route.shadows] == [production.SHADOW_SAMPLE]
    assert route.canary is not None and route.canary.steps[0] == production.CANARY_PERCENT
    rule = config.rules[production.RULE]
    assert len(rule.checks) == 5
    assert rule.probes is not None and rule.probes.sample == production.PROBE_SAMPLE
    assert config.store.bodies == "redacted"
    assert config.telemetry.otlp_endpoint == "http://127.0.0.1:4318/v1/traces"
    assert "bench" in config.routes


def export(spans: int) -> bytes:
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for i in range(spans):
        span = scope.spans.add()
        span.name = f"chat {i}"
    return request.SerializeToString()


def post(url: str, body: bytes) -> int:
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"content-type": "application/x-protobuf"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_the_collector_counts_spans_and_rejects_what_is_not_an_export(
    production: ModuleType,
) -> None:
    with production.SpanCollector() as collector:
        assert post(collector.endpoint, export(3)) == 200
        assert post(collector.endpoint, export(2)) == 200
        assert post(collector.endpoint.replace("/v1/traces", "/v1/logs"), export(1)) == 404
        assert post(collector.endpoint, b"\xff\xff\xff") == 400
        count = collector.snapshot()
    assert (count.posts, count.spans, count.rejected) == (2, 5, 2)
