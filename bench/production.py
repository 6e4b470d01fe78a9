"""The production-shaped route's bookkeeping: its configuration and a stand-in OTLP collector.

The route users run is not the bench's bare `bench` route: it has a rule set of five checks on JSON
answers, a shadow sampled at 10 %, a canary at 10 %, rule-flip probes at 2 %, a PostgreSQL store
with `bodies: redacted` and OTLP tracing. `route_config` writes that route's part of a gateway
configuration; `SpanCollector` is the tracing endpoint it points at — a tiny HTTP server on
127.0.0.1 that accepts OTLP/HTTP protobuf POSTs to /v1/traces and counts the spans, so that the
exporter does its real work (encode, POST) and the bench can tell that every request was traced.
"""

from __future__ import annotations

import dataclasses
import threading
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

PRODUCTION_ROUTE = "bench-production"
BARE_ROUTE = "bench-json"
"""The production route's primary with nothing on it: no rule, no shadow, no canary, no probe."""
CHECKS_ROUTE = "bench-json-checks"
"""The production route's primary with its five checks alone (`CHECKS_RULE`: no probes)."""
SHADOW_ROUTE = "bench-json-shadow"
"""The production route's primary with its shadow alone."""
JSON_MODEL = "fake-json"
"""The mock model that answers `{"max_weight": N, ...}` read from the system prompt."""
JSON_CANDIDATE = "cand-json"
"""The same JSON answer under another name: the shadow and the canary."""
RULE = "shipping"
CHECKS_RULE = "shipping-checks"
"""`RULE`'s checks without its probes, on `CHECKS_ROUTE`."""
SHADOW_SAMPLE = 0.1
CANARY_PERCENT = 10
CANARY_STEP_S = 3600
"""The first step lasts longer than a bench run, so the canary stays at `CANARY_PERCENT` while the
judge still looks at it every 5 s (the default `interval_s`)."""
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
        f"    canary: {{model: {JSON_CANDIDATE}, steps: [{CANARY_PERCENT}, 50], "
        f"step_interval_s: {CANARY_STEP_S}}}\n"
    )


_CHECKS = (
    "    checks:\n"
    "      - {name: valid-json, type: json}\n"
    "      - {name: max-weight, type: json_path, path: $.max_weight, min: 0, max: 1000}\n"
    "      - {name: status, type: json_path, path: $.status, in: [shipped, held]}\n"
    "      - {name: prices, type: json_path, path: '$.options[*].price', min: 0, max: 500}\n"
    "      - {name: order-id, type: json_path, path: \"$['order id']\", "
    "regex: '^[A-Z]{2}-\\d+$'}\n"
)


def rules_config() -> str:
    """The top-level `rules:` section: five checks on JSON answers and probes at 2 % on the
    production route; the same checks alone on `CHECKS_ROUTE`."""
    checks_rule = f"  {CHECKS_RULE}:\n    routes: [{CHECKS_ROUTE}]\n{_CHECKS}"
    return (
        f"rules:\n{checks_rule}  {RULE}:\n    routes: [{PRODUCTION_ROUTE}]\n{_CHECKS}"
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


def gateway_config(
    mock_url: str, port: int, database_url: str, otlp_endpoint: str, candidate_url: str = ""
) -> str:
    """A whole gateway configuration with the plain `bench` route beside the production-shaped one.

    `mock_url` is the mock upstream's OpenAI base URL (`http://127.0.0.1:PORT/v1`);
    `candidate_url`, when given, is another mock's, which then serves the candidate alone (its
    shadows and its canary share).
    """
    urls = {"fake": mock_url, JSON_MODEL: mock_url, JSON_CANDIDATE: candidate_url or mock_url}
    models = "".join(
        f'  {name}: {{provider: openai, base_url: "{url}", model: {name}, '
        "price: {input_per_mtok: 0.15, output_per_mtok: 0.6}}\n"
        for name, url in urls.items()
    )
    return (
        f"server: {{host: 127.0.0.1, port: {port}}}\n"
        + store_and_telemetry(database_url, otlp_endpoint)
        + f"models:\n{models}"
        + "routes:\n  bench: {primary: fake}\n"
        + f"  {BARE_ROUTE}: {{primary: {JSON_MODEL}}}\n"
        + f"  {CHECKS_ROUTE}: {{primary: {JSON_MODEL}}}\n"
        + f"  {SHADOW_ROUTE}: {{primary: {JSON_MODEL}, "
        + f"shadows: [{{model: {JSON_CANDIDATE}, sample: {SHADOW_SAMPLE}}}]}}\n"
        + route_config()
        + rules_config()
    )


def start_canary(base_url: str, route: str = PRODUCTION_ROUTE) -> dict[str, Any]:
    """Start the route's rollout through the admin API (`POST /admin/rollouts/{route}/start`,
    forced past the offline gate: the store has no history yet) and return the new state.

    A loopback gateway without `server.admin_token_env` needs no token."""
    body = orjson.dumps({"reason": "bench: canary at its first step", "force": True})
    request = urllib.request.Request(
        f"{base_url}/admin/rollouts/{route}/start", data=body, method="POST",
        headers={"content-type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as answer:
        state: dict[str, Any] = orjson.loads(answer.read())["rollout"]
    return state


@dataclass(frozen=True)
class RouteTally:
    """A route's counters from /metrics: answered requests by arm, and probes not made.

    Every upstream call the gateway makes (client, shadow, probe) is one span, so a traced run
    has `upstream_calls` spans once the exporter has sent them all."""

    primary: float = 0.0
    canary: float = 0.0
    shadow: float = 0.0
    probe: float = 0.0
    probes_scored: float = 0.0
    probes_dropped: float = 0.0
    shadows_dropped: float = 0.0

    @classmethod
    def parse(cls, text: str, route: str) -> RouteTally:
        arms: dict[str, float] = {}
        scored = dropped = shadows_dropped = 0.0
        label = f'route="{route}"'
        for line in text.splitlines():
            if label not in line or line.startswith("#"):
                continue
            value = float(line.rsplit(" ", 1)[1])
            if line.startswith("mirrorgate_requests_total{"):
                arm = line.split('arm="', 1)[1].split('"', 1)[0]
                arms[arm] = arms.get(arm, 0.0) + value
            elif line.startswith("mirrorgate_probe_results_total{"):
                scored += value
            elif line.startswith("mirrorgate_probe_dropped_total{"):
                dropped += value
            elif line.startswith("mirrorgate_shadow_dropped_total{"):
                shadows_dropped += value
        return cls(
            arms.get("primary", 0.0), arms.get("canary", 0.0), arms.get("shadow", 0.0),
            arms.get("probe", 0.0), scored, dropped, shadows_dropped,
        )  # fmt: skip

    def __sub__(self, other: RouteTally) -> RouteTally:
        return RouteTally(
            *(getattr(self, f.name) - getattr(other, f.name) for f in dataclasses.fields(self))
        )

    def __add__(self, other: RouteTally) -> RouteTally:
        return RouteTally(
            *(getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self))
        )

    @property
    def client_requests(self) -> float:
        return self.primary + self.canary

    @property
    def canary_share(self) -> float:
        return self.canary / self.client_requests if self.client_requests else 0.0

    @property
    def upstream_calls(self) -> float:
        return self.client_requests + self.shadow + self.probe


PLAIN = "plain"
"""The plain `bench` route of the production stage's gateway."""
PRODUCTION = "production"
"""The production-shaped route of that gateway."""
BARE = "bare-json"
"""That gateway's `BARE_ROUTE`, driven as the production route is (its system prompt, its
answers): what the production route costs without its rule, shadow, canary and probes."""
CHECKS = "json-checks"
"""`CHECKS_ROUTE`, driven as the production route is."""
SHADOWED = "json-shadow"
"""`SHADOW_ROUTE`, driven as the production route is."""
DIRECT_JSON = "direct-json"
"""The mock's JSON model called directly with `SYSTEM_PROMPT`: the production route's baseline."""


@dataclass
class StageCell:
    """One (target, mode, load) cell of the production stage."""

    target: str
    stream: bool
    concurrency: int
    requests: int
    errors: int
    rps: float
    p50_ms: float
    p99_ms: float
    gateway_cpu_us: float | None = None
    """CPU (user + system, every thread and child process, from /proc) of the gateway per client
    request, shadows, probes, recorder, exporter and judge included."""
    postgres_cpu_us: float | None = None
    """CPU of every `postgres` process per client request (the recorder's and the judge's
    queries; other clients of the server count too)."""
    added_p50_ms: float | None = None
    added_p99_ms: float | None = None
    tally: RouteTally | None = None
    """The production route's counters over the measured phase."""
    think_s: float = 0.0
    """Each client paused a random 0 to this many seconds before a request (0: a closed loop)."""

    @property
    def mode(self) -> str:
        return "stream" if self.stream else "non-stream"

    @property
    def load(self) -> str:
        """`c=16`, or `c=8 paced` for clients that pause between requests."""
        return f"c={self.concurrency}" + (" paced" if self.think_s else "")


@dataclass
class StageResult:
    """What the production stage measured (results.json `production`)."""

    cells: list[StageCell] = dataclasses.field(default_factory=list)
    rollout: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The rollout state `start_canary` answered."""
    spans: SpanCount = dataclasses.field(default_factory=SpanCount)
    """What the collector received over the whole stage, after the exporter drained."""
    totals: dict[str, RouteTally] = dataclasses.field(default_factory=dict)
    """Each route's counters over the gateway's life (warm-ups included), at the end."""
    loadavg: list[list[str]] = dataclasses.field(default_factory=list)
    """Load average before and after the stage."""
    profile: dict[str, Any] = dataclasses.field(default_factory=dict)
    litellm: str = ""
    """Why LiteLLM is missing from the table (empty when it is there)."""

    def cell(
        self, target: str, stream: bool, concurrency: int, think_s: float = 0.0
    ) -> StageCell | None:
        key = (target, stream, concurrency, think_s)
        return next(
            (c for c in self.cells if (c.target, c.stream, c.concurrency, c.think_s) == key),
            None,
        )

    @property
    def upstream_calls(self) -> float:
        return sum(t.upstream_calls for t in self.totals.values())


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def markdown(result: StageResult) -> str:
    """The stage's section of results.md: one table, then the tracing and rollout checks."""
    lines = [
        "## The production-shaped route, side by side",
        "",
        f"Load average before / after: {' '.join(result.loadavg[0]) if result.loadavg else '?'}"
        f" / {' '.join(result.loadavg[-1]) if result.loadavg else '?'}. "
        "CPU per client request from /proc (all threads); added latency against the direct call "
        f"of the same mode and load (`{DIRECT_JSON}`, with the route's system prompt, for "
        "the production route).",
        "",
        "| mode | load | target | req/s | gateway CPU µs/req | PostgreSQL CPU µs/req "
        "| CPU ÷ plain | added p50 / p99 ms | p99 ÷ plain | canary share | probe calls "
        "| shadow calls |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in result.cells:
        plain = result.cell(PLAIN, c.stream, c.concurrency, c.think_s)
        ratio = p99_ratio = None
        if c.target in (PRODUCTION, "litellm") and plain is not None:
            if c.gateway_cpu_us and plain.gateway_cpu_us:
                ratio = c.gateway_cpu_us / plain.gateway_cpu_us
            p99_ratio = c.p99_ms / plain.p99_ms if plain.p99_ms else None
        added = (
            f"{c.added_p50_ms:.2f} / {c.added_p99_ms:.2f}"
            if c.added_p50_ms is not None and c.added_p99_ms is not None
            else "-"
        )
        tally = c.tally
        lines.append(
            f"| {c.mode} | {c.load} | {c.target} | {c.rps:,.0f} "
            f"| {_num(c.gateway_cpu_us)} | {_num(c.postgres_cpu_us)} | {_num(ratio, 2)} "
            f"| {added} | {_num(p99_ratio, 2)} "
            f"| {f'{100 * tally.canary_share:.1f} %' if tally else '-'} "
            f"| {_num(tally.probe if tally else None)} | {_num(tally.shadow if tally else None)} |"
        )
    spans, calls = result.spans, result.upstream_calls
    lines += [
        "",
        f"Tracing: the collector received {spans.spans:,} spans in {spans.posts:,} exports "
        f"({spans.rejected} rejected); the gateway made {calls:,.0f} upstream calls (client "
        "requests, shadows and probes of both routes, warm-ups included): "
        + ("every call traced." if spans.spans == calls else "**they differ**."),
    ]
    production = result.totals.get(PRODUCTION_ROUTE)
    if production is not None:
        lines.append(
            f"Production route over the stage: {production.client_requests:,.0f} client requests, "
            f"canary {100 * production.canary_share:.1f} % (rollout step weight "
            f"{result.rollout.get('weight_percent')} %), {production.shadow:,.0f} shadow calls "
            f"({production.shadows_dropped:,.0f} shed), {production.probe:,.0f} probe calls "
            f"({production.probes_scored:,.0f} scored, {production.probes_dropped:,.0f} not made)."
        )
    if result.litellm:
        lines.append(f"LiteLLM: {result.litellm}.")
    lines += profile_markdown(result.profile)
    return "\n".join(lines) + "\n"


def profile_markdown(profile: dict[str, Any]) -> list[str]:
    """The py-spy profile of the production route by component (bench/hotpath.py `summary`)."""
    if not profile:
        return []
    if "error" in profile:
        return ["", f"Profile: not taken ({profile['error']})."]
    threads = ", ".join(
        f"{name} {count / profile['samples']:.0%}"
        for name, count in sorted(profile["threads"].items(), key=lambda kv: -kv[1])
    )
    lines = [
        "",
        f"### Profile of the production route, non-stream c=16 ({profile['seconds']} s, "
        f"{profile['rps']:,.0f} req/s, {profile['cpu_us_per_request']:,.0f} µs of gateway CPU "
        "per request)",
        "",
        f"GIL-holding samples by thread: {threads}.",
        "",
        "| component | share | µs/req |",
        "|---|---|---|",
    ]
    lines += [
        f"| {c['component']} | {100 * c['share']:.1f} % | {c['us_per_request']:,.0f} |"
        for c in profile["components"]
    ]
    return lines
