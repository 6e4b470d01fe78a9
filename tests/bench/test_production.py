"""bench/production.py: the production-shaped route's configuration is one the gateway accepts, with
the parts the bench claims, the stand-in collector counts the spans of OTLP/HTTP exports, and the
production stage's setup really starts the canary, fires probes and traces every call."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from types import ModuleType

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from proxy.config import parse_config
from tests.conftest import PG_ADMIN_URL, _port_open, require_service, wait_until
from tests.e2e.conftest import free_port

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
    bare = config.routes[production.BARE_ROUTE]
    assert bare.primary == production.JSON_MODEL and not bare.shadows and bare.canary is None
    assert production.BARE_ROUTE not in rule.routes
    checks = config.rules[production.CHECKS_RULE]
    assert checks.routes == [production.CHECKS_ROUTE] and checks.probes is None
    assert [c.name for c in checks.checks] == [c.name for c in rule.checks]
    shadowed = config.routes[production.SHADOW_ROUTE]
    assert [s.sample for s in shadowed.shadows] == [production.SHADOW_SAMPLE]
    assert shadowed.canary is None and production.SHADOW_ROUTE not in rule.routes
    assert {m.base_url for m in config.models.values()} == {"http://127.0.0.1:9/v1"}


def test_the_candidate_can_have_a_mock_of_its_own(production: ModuleType) -> None:
    text = production.gateway_config(
        "http://127.0.0.1:9/v1", 8080, "postgresql://127.0.0.1:5432/bench_production",
        "http://127.0.0.1:4318/v1/traces", "http://127.0.0.1:10/v1",
    )  # fmt: skip
    urls = {name: m.base_url for name, m in parse_config(text, env={}).models.items()}
    assert urls.pop(production.JSON_CANDIDATE) == "http://127.0.0.1:10/v1"
    assert set(urls.values()) == {"http://127.0.0.1:9/v1"}


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


@pytest.mark.e2e
def test_the_stage_setup_starts_the_canary_probes_fire_and_every_call_is_traced(
    tmp_path: Path,
) -> None:
    """The production stage's own setup (`suite.production_gateway`: database, collector,
    gateway, canary through the admin API) against a real mock and PostgreSQL, a few hundred
    requests of the bench's load generator with the route's system prompt."""
    require_service("PostgreSQL at 127.0.0.1:5432", _port_open("127.0.0.1", 5432))
    from bench import loadgen, suite, targets

    production = suite.production
    rig = targets.Rig(
        ROOT, tmp_path, Path(sys.executable), tmp_path / "no-litellm", targets.CpuLayout("", "", "")
    )
    mock_port, port = free_port(), free_port()
    database = f"bench_production_{uuid.uuid4().hex[:8]}"
    sent = 400
    with (
        targets.mock_upstream(rig, port=mock_port),
        suite.production_gateway(rig, PG_ADMIN_URL, database, port, mock_port) as setup,
    ):
        _server, collector, rollout = setup
        assert rollout["phase"] == "progressing"
        assert rollout["weight_percent"] == production.CANARY_PERCENT
        spec = loadgen.LoadSpec(
            "127.0.0.1", port, "/v1/chat/completions", production.PRODUCTION_ROUTE, False,
            concurrency=2, seconds=0, requests=sent, warmup_s=0, system=production.SYSTEM_PROMPT,
        )  # fmt: skip
        load = asyncio.run(loadgen.run_load(spec))
        assert (load.requests, load.errors) == (sent, 0)

        def probed() -> production.RouteTally | None:
            tally = suite.production_tally(port)
            return tally if tally.probes_scored > 0 else None

        tally = wait_until(probed, timeout_s=30, what="a scored probe")

        def traced() -> production.SpanCount | None:
            # every upstream call (client, shadow, probe) is one span; probes still running
            # when the tally was read add calls, so the tally is read again
            now = suite.production_tally(port)
            spans = collector.snapshot()
            return spans if spans.spans == now.upstream_calls else None

        spans = wait_until(traced, timeout_s=30, what="a span for every upstream call")
        tally = suite.production_tally(port)
    assert tally.client_requests == sent
    assert 0 < tally.canary < sent * 0.3  # ~10 %: the rollout serves its first step
    assert tally.probe > 0 and tally.probes_scored > 0
    assert spans.rejected == 0
    assert spans.spans - tally.shadow - tally.probe == sent  # one span per client request
