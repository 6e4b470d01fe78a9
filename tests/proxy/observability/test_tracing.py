"""Traces beyond the basics of test_observability.py: real OTLP/HTTP export configured from the
config or the standard environment variables, the Anthropic wire format, failed exchanges, and the
GenAI attributes of shadow spans."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from proxy.mock_upstream.server import MockUpstreamServer
from tests.conftest import InProcessGateway, wait_until
from tests.proxy.gateway.test_exchange_openai import MESSAGES, records_for
from tests.proxy.mirror.test_shadow import ask, shadowed


class CollectorStub:
    """An OTLP/HTTP endpoint on 127.0.0.1: keeps each POST's path, content type and body."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, str, bytes]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                stub.posts.append((self.path, self.headers.get("content-type", ""), body))
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # shutdown() waits for the loop's next poll: every 10 ms rather than the default 0.5 s.
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        ).start()

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """(resource attributes, span) of every span received, decoded from protobuf."""
        out = []
        for _path, _type, body in self.posts:
            request = ExportTraceServiceRequest.FromString(body)
            for resource_spans in request.resource_spans:
                resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope in resource_spans.scope_spans:
                    out.extend((resource, span) for span in scope.spans)
        return out


@pytest.fixture
def collector() -> Iterator[CollectorStub]:
    stub = CollectorStub()
    yield stub
    stub.server.shutdown()
    stub.server.server_close()


def attributes_of(span: Any) -> dict[str, Any]:
    """An OTLP protobuf span's attributes as plain values."""
    out: dict[str, Any] = {}
    for attribute in span.attributes:
        value = attribute.value
        out[attribute.key] = getattr(value, value.WhichOneof("value"))
    return out


@pytest.mark.parametrize("source", ["config", "env"])
def test_spans_are_exported_by_otlp_http_to_the_configured_endpoint(
    start_gateway: Callable[..., InProcessGateway], collector: CollectorStub, source: str
) -> None:
    if source == "config":
        gw = start_gateway(
            extra={"telemetry": {"otlp_endpoint": collector.url + "/v1/traces",
                                 "service_name": "gw-from-config"}}
        )  # fmt: skip
    else:
        # The standard variable names a base URL; the exporter posts to <base>/v1/traces.
        gw = start_gateway(env={"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url})
    response = gw.http.post("/v1/chat/completions", json={"model": "echo", "messages": MESSAGES})
    (record,) = records_for(gw, response.headers["x-mirrorgate-request-id"])
    gw.stop()  # shutting down flushes the batch processor: nothing is left unexported

    assert {(path, kind) for path, kind, _ in collector.posts} == {
        ("/v1/traces", "application/x-protobuf")
    }
    ((resource, span),) = collector.spans()
    assert resource["service.name"] == ("gw-from-config" if source == "config" else "mirrorgate")
    attributes = attributes_of(span)
    assert span.name == "chat echo"
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.request.model"] == "echo"
    assert attributes["gen_ai.usage.input_tokens"] == record.usage.input_tokens
    assert attributes["gen_ai.usage.output_tokens"] == record.usage.output_tokens
    assert attributes["mirrorgate.request_id"] == record.request_id
    assert span.trace_id and span.span_id


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def finished(exporter: InMemorySpanExporter, count: int = 1) -> tuple[ReadableSpan, ...]:
    return wait_until(  # type: ignore[no-any-return]
        lambda: len(s := exporter.get_finished_spans()) >= count and s, what=f"{count} span(s)"
    )


def test_anthropic_exchanges_carry_the_genai_attributes(
    start_gateway: Callable[..., InProcessGateway],
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    gw = start_gateway(tracer_provider=provider)
    response = gw.http.post(
        "/v1/messages",
        headers={"anthropic-version": "2023-06-01"},
        json={
            "model": "echo-claude",
            "max_tokens": 64,
            "system": "You are terse.",
            "messages": [{"role": "user", "content": "How heavy can my parcel be?"}],
        },
    )
    assert response.status_code == 200
    (record,) = records_for(gw, response.headers["x-mirrorgate-request-id"])
    (span,) = finished(exporter)
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "anthropic"
    assert attributes["gen_ai.request.model"] == "echo"
    assert attributes["gen_ai.usage.input_tokens"] == record.usage.input_tokens
    assert attributes["gen_ai.usage.output_tokens"] == record.usage.output_tokens > 0
    assert attributes["mirrorgate.endpoint"] == "messages"
    assert span.status.status_code is StatusCode.UNSET


def test_a_failed_exchange_is_an_error_span(
    start_gateway: Callable[..., InProcessGateway],
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    gw = start_gateway(tracer_provider=provider)
    response = gw.http.post("/v1/chat/completions", json={"model": "broken", "messages": MESSAGES})
    assert response.status_code >= 500
    (record,) = records_for(gw, response.headers["x-mirrorgate-request-id"])
    (span,) = finished(exporter)
    attributes = dict(span.attributes or {})
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == record.status.value
    assert attributes["http.response.status_code"] == record.http_status
    assert attributes["mirrorgate.status"] == record.status.value


def test_the_shadow_span_describes_the_candidate_and_links_to_the_primary(
    start_gateway: Callable[..., InProcessGateway],
    upstream: MockUpstreamServer,
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    gw = start_gateway(
        extra=shadowed(upstream, [{"model": "cand-stale"}]), tracer_provider=provider
    )
    ask(gw, uuid.uuid4().hex)
    by_arm = {s.attributes["mirrorgate.arm"]: s for s in finished(exporter, 2) if s.attributes}
    primary, shadow = by_arm["primary"], by_arm["shadow"]
    assert shadow.attributes is not None and primary.attributes is not None
    assert shadow.attributes["gen_ai.request.model"] == "stale"  # the candidate's upstream name
    assert shadow.attributes["mirrorgate.target"] == "cand-stale"
    assert shadow.attributes["mirrorgate.route"] == primary.attributes["mirrorgate.route"]
    assert int(shadow.attributes["gen_ai.usage.output_tokens"]) > 0  # type: ignore[arg-type]
    assert [link.context.span_id for link in shadow.links] == [primary.context.span_id]
    assert [link.context.trace_id for link in shadow.links] == [primary.context.trace_id]
