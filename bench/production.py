"""The production-shaped route's bookkeeping: its configuration and a stand-in OTLP collector.

The route users run is not the bench's bare `bench` route: it has a rule set of five checks on JSON
answers, a shadow sampled at 10 %, a canary at 10 %, rule-flip probes at 2 %, a PostgreSQL store
with `bodies: redacted` and OTLP tracing. `route_config` writes that route's part of a gateway
configuration; `SpanCollector` is the tracing endpoint it points at — a tiny HTTP server on
127.0.0.1 that accepts OTLP/HTTP protobuf POSTs to /v1/traces and counts the spans, so that the
exporter does its real work (encode, POST) and the bench can tell that every request was traced.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

PRODUCTION_ROUTE = "bench-production"
JSON_MODEL = "fake-json"
"""The mock model that answers `{"max_weight": N, ...}` read from the system prompt."""
JSON_CANDIDATE = "cand-json"
"""The same JSON answer under another name: the shadow and the canary."""
RULE = "shipping"
SHADOW_SAMPLE = 0.1
CANARY_PERCENT = 10
PROBE_SAMPLE = 0.02
SYSTEM_PROMPT = "You are a shipping assistant. max_weight = 100. Answer in JSON."
"""What the load generator sends as the system message on this route (the rule and probe parameter
live in it)."""
ANSWER_TEMPLATE = (
    '{"max_weight": {1}, "status": "shipped", "order id": "FR-{1}", "options": [{"price": 12}]}'
)
"""The mock's JSON answer (`regex_from_system`): `{1}` is the weight found in the prompt."""
DEFAULT_ANSWER = ANSWER_TEMPLATE.replace("{1}", "100")
"""The answer to a prompt without the rule (the bench's standard request): the same JSON shape."""
WEIGHT_PATTERN = r"max_weight\s*=\s*(\d+)"


def mock_behaviour() -> str:
    """The mock upstream's YAML `models:` entries for the JSON-answering models (indented 2)."""
    answer = (
        f"{{answer: {{type: regex_from_system, pattern: '{WEIGHT_PATTERN}', "
        f"template: '{ANSWER_TEMPLATE}', default: '{DEFAULT_ANSWER}'}}}}"
    )
    return "".join(f"  {name}: {answer}\n" for name in (JSON_MODEL, JSON_CANDIDATE))


def route_config() -> str:
    """The YAML of the production-shaped route, under `routes:` (indented 2)."""
    return (
        f"  {PRODUCTION_ROUTE}:\n"
        f"    primary: {JSON_MODEL}\n"
        f"    shadows: [{{model: {JSON_CANDIDATE}, sample: {SHADOW_SAMPLE}}}]\n"
        f"    canary: {{model: {JSON_CANDIDATE}, steps: [{CANARY_PERCENT}, 50]}}\n"
    )


def rules_config() -> str:
    """The top-level `rules:` section: five checks on JSON answers and probes at 2 %."""
    return (
        "rules:\n"
        f"  {RULE}:\n"
        f"    routes: [{PRODUCTION_ROUTE}]\n"
        "    checks:\n"
        "      - {name: valid-json, type: json}\n"
        "      - {name: max-weight, type: json_path, path: $.max_weight, min: 0, max: 1000}\n"
        "      - {name: status, type: json_path, path: $.status, in: [shipped, held]}\n"
        "      - {name: prices, type: json_path, path: '$.options[*].price', min: 0, max: 500}\n"
        "      - {name: order-id, type: json_path, path: \"$['order id']\", "
        "regex: '^[A-Z]{2}-\\d+$'}\n"
        "    probes:\n"
        f"      parameter: '{WEIGHT_PATTERN.replace('(', '(?P<value>', 1)}'\n"
        "      values: [150, 175, 200]\n"
        "      expect:\n"
        '        - {name: follows, type: json_path, path: $.max_weight, equals: "{value}"}\n'
        f"      sample: {PROBE_SAMPLE}\n"
        "      max_per_hour: 1000000\n"
        "      max_usd_per_hour: 1000\n"
    )


def store_and_telemetry(database_url: str, otlp_endpoint: str) -> str:
    """The `store:` (PostgreSQL, redacted bodies) and `telemetry:` sections."""
    return (
        f'store: {{url: "{database_url}", bodies: redacted}}\n'
        f'telemetry: {{otlp_endpoint: "{otlp_endpoint}"}}\n'
    )


@dataclass
class SpanCount:
    """What the collector received so far."""

    posts: int = 0
    spans: int = 0
    rejected: int = 0
    """POSTs that were not an OTLP protobuf export to /v1/traces."""


class SpanCollector:
    """An OTLP/HTTP traces endpoint on 127.0.0.1 that counts spans; a context manager.

    Accepts `POST /v1/traces` with `application/x-protobuf` bodies (what the OTLP/HTTP exporter
    sends), answers an empty `ExportTraceServiceResponse`, and counts posts and spans. Anything
    else gets 404 or 400 and is counted as rejected. Port 0 picks a free port (`endpoint`).
    """

    def __init__(self, port: int = 0) -> None:
        self.count = SpanCount()
        self._lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # the name http.server dispatches to
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                if self.path != "/v1/traces":
                    collector._reject()
                    self.send_error(404)
                    return
                request = ExportTraceServiceRequest()
                try:
                    request.ParseFromString(body)
                except Exception:  # protobuf's DecodeError has no stable import path
                    collector._reject()
                    self.send_error(400)
                    return
                spans = sum(
                    len(scope.spans) for rs in request.resource_spans for scope in rs.scope_spans
                )
                collector._received(spans)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: object) -> None:
                pass  # one line per export would drown the bench's log

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1/traces"

    def _received(self, spans: int) -> None:
        with self._lock:
            self.count.posts += 1
            self.count.spans += spans

    def _reject(self) -> None:
        with self._lock:
            self.count.rejected += 1

    def snapshot(self) -> SpanCount:
        with self._lock:
            return SpanCount(self.count.posts, self.count.spans, self.count.rejected)

    def __enter__(self) -> SpanCollector:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def gateway_config(mock_url: str, port: int, database_url: str, otlp_endpoint: str) -> str:
    """A whole gateway configuration with the plain `bench` route beside the production-shaped one.

    `mock_url` is the mock upstream's OpenAI base URL (`http://127.0.0.1:PORT/v1`).
    """
    models = "".join(
        f'  {name}: {{provider: openai, base_url: "{mock_url}", model: {name}, '
        "price: {input_per_mtok: 0.15, output_per_mtok: 0.6}}\n"
        for name in ("fake", JSON_MODEL, JSON_CANDIDATE)
    )
    return (
        f"server: {{host: 127.0.0.1, port: {port}}}\n"
        + store_and_telemetry(database_url, otlp_endpoint)
        + f"models:\n{models}"
        + "routes:\n  bench: {primary: fake}\n"
        + route_config()
        + rules_config()
    )
