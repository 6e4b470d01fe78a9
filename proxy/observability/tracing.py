"""OpenTelemetry spans for exchanges, following the GenAI semantic conventions.

A span is written once per exchange, when it ends, with its real start time: nothing on the hot path
touches OpenTelemetry while the request is in flight. With no endpoint configured there is no tracer
provider at all and `ExchangeTracer.record` returns at once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, Tracer

from proxy.config import TelemetrySpec
from proxy.core import ExchangeRecord
from proxy.core import Status as ExchangeStatus


def build_tracer_provider(
    spec: TelemetrySpec,
    env: Mapping[str, str] | None = None,
    exporter: SpanExporter | None = None,
) -> TracerProvider | None:
    """A tracer provider exporting by OTLP/HTTP, or None when tracing is not configured.

    `exporter` replaces the OTLP exporter (tests pass an in-memory one).
    """
    env = os.environ if env is None else env
    endpoint = (
        spec.otlp_endpoint
        or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or (env["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + "/v1/traces"
            if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") else None)
    )  # fmt: skip
    if exporter is None and not endpoint:
        return None
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=endpoint)
    provider = TracerProvider(resource=Resource.create({"service.name": spec.service_name}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


class ExchangeTracer:
    """Turns finished exchange records into spans."""

    def __init__(self, provider: TracerProvider | None) -> None:
        self._tracer: Tracer | None = provider.get_tracer("mirrorgate") if provider else None

    @property
    def enabled(self) -> bool:
        return self._tracer is not None

    def record(
        self,
        record: ExchangeRecord,
        start_ns: int,
        operation: str,
        server: tuple[str, int] | None = None,
        links: Sequence[SpanContext] = (),
        response_id: str | None = None,
    ) -> SpanContext | None:
        """Write the span for one exchange; return its context (for linking shadow spans)."""
        if self._tracer is None:
            return None
        usage = record.usage
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": record.provider,
            "gen_ai.request.model": record.upstream_model,
            "gen_ai.usage.input_tokens": usage.input_tokens
            + usage.cached_input_tokens
            + usage.cache_write_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
            "mirrorgate.request_id": record.request_id,
            "mirrorgate.route": record.route,
            "mirrorgate.target": record.target,
            "mirrorgate.arm": record.arm.value,
            "mirrorgate.endpoint": record.endpoint,
            "mirrorgate.status": record.status.value,
            "mirrorgate.cost_usd": record.cost_usd,
            "mirrorgate.usage_estimated": usage.estimated,
            "http.response.status_code": record.http_status,
        }
        if usage.cached_input_tokens:
            attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cached_input_tokens
        if record.ttft_s is not None:
            attributes["gen_ai.response.time_to_first_chunk"] = record.ttft_s
        if response_id:
            attributes["gen_ai.response.id"] = response_id
        if record.rule:
            attributes["mirrorgate.rule"] = record.rule
            attributes["mirrorgate.rule_version"] = record.rule_version or ""
        if record.pair_id:
            attributes["mirrorgate.pair_id"] = record.pair_id
        if server:
            attributes["server.address"], attributes["server.port"] = server
        if record.error_class:
            attributes["error.type"] = record.error_class
        span = self._tracer.start_span(
            f"{operation} {record.upstream_model}",
            kind=SpanKind.CLIENT,
            start_time=start_ns,
            attributes=attributes,
            links=[Link(ctx) for ctx in links],
        )
        if record.status is not ExchangeStatus.OK:
            span.set_status(Status(StatusCode.ERROR, record.status.value))
        span.end(end_time=start_ns + int(record.duration_s * 1e9))
        return span.get_span_context()
