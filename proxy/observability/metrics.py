"""Prometheus metrics (a contract, listed in docs/reference.md: names and labels are what
dashboards and alert rules query).

Every family is registered on the registry passed in. Label values come from config names and fixed
vocabularies only, never from client strings, so cardinality is bounded by the config.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from proxy.core import ExchangeRecord

from .rollout_gauges import RolloutGauges

GC_PAUSE_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
)  # fmt: skip
"""From 0.1 ms (a young collection) to 1 s; 5 ms is the bound a p99 goal is held to."""
LATENCY_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0,
    30.0, 60.0, 120.0,
)  # fmt: skip
OPERATION_COST_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
)  # fmt: skip
"""Dollars per business operation: from a hundredth of a cent (one small call) to $10."""
JUDGE_SCORE_BUCKETS = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0)
"""The LLM judge's 1-10 scale (a score is the mean of two, so halves fall between buckets)."""
OVERHEAD_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1,
)  # fmt: skip


def status_class(http_status: int) -> str:
    """`2xx` … `5xx`, or `none` when no response was sent (disconnects, failures before headers)."""
    return f"{http_status // 100}xx" if 100 <= http_status < 600 else "none"


class GatewayMetrics:
    """The gateway's families, on one registry (the recorder's and the alert dispatcher's are the
    two classes below; docs/reference.md lists all of them)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        arm = ("route", "target", "arm")
        self.requests = Counter(
            "mirrorgate_requests", "Upstream exchanges, by how they ended.",
            (*arm, "status_class"), registry=registry,
        )  # fmt: skip
        self.duration = Histogram(
            "mirrorgate_request_duration_seconds",
            "From receiving the request to the last byte of the answer.",
            arm, buckets=LATENCY_BUCKETS, registry=registry,
        )  # fmt: skip
        self.ttft = Histogram(
            "mirrorgate_time_to_first_token_seconds",
            "From receiving the request to the first generated token (streams only).",
            arm, buckets=LATENCY_BUCKETS, registry=registry,
        )  # fmt: skip
        self.overhead = Histogram(
            "mirrorgate_overhead_seconds",
            "Time spent in mirrorgate itself per client request (excludes waiting on upstream).",
            ("route",), buckets=OVERHEAD_BUCKETS, registry=registry,
        )  # fmt: skip
        self.tokens = Counter(
            "mirrorgate_tokens", "Tokens by type (input excludes cached input).",
            (*arm, "type"), registry=registry,
        )  # fmt: skip
        self.cost = Counter(
            "mirrorgate_cost_usd", "Spend computed from the price table.", arm, registry=registry
        )
        self.internal_errors = Counter(
            "mirrorgate_internal_errors",
            "Bugs caught where they would otherwise end a task or a request: a hook, a sink, the "
            "decider or an API handler that raised (the traceback is in the log).",
            ("component",), registry=registry,
        )  # fmt: skip
        self.config_reloads = Counter(
            "mirrorgate_config_reloads",
            "Configuration reloads (SIGHUP or POST /admin/reload), by result: applied, unchanged "
            "(the file says what runs), rejected (the running configuration stays; the log says "
            "why).",
            ("result",), registry=registry,
        )  # fmt: skip
        self.config_generation = Gauge(
            "mirrorgate_config_generation",
            "The configuration this process serves: 1 at start, one more for each applied reload.",
            registry=registry,
        )
        self.config_generation.set(1)
        self.shadow_dropped = Counter(
            "mirrorgate_shadow_dropped", "Shadow calls not made, by reason.",
            ("route", "target", "reason"), registry=registry,
        )  # fmt: skip
        self.probe_results = Counter(
            "mirrorgate_probe_results",
            "Rule-flip probes scored, by result: followed (the flipped value), stuck (the "
            "original value: the old rule) or other.",
            ("route", "target", "rule", "result"), registry=registry,
        )  # fmt: skip
        self.probe_dropped = Counter(
            "mirrorgate_probe_dropped", "Rule-flip probes not made, by reason.",
            ("route", "target", "reason"), registry=registry,
        )  # fmt: skip
        # The overload monitor's readings (proxy.mirror.overload), read when scraped; measured only
        # while a route has shadows or a noise floor.
        self.loop_lag = Gauge(
            "mirrorgate_event_loop_lag_seconds",
            "How late the event loop runs ready work (moving average).", registry=registry,
        )  # fmt: skip
        self.loop_busy = Gauge(
            "mirrorgate_event_loop_busy_ratio",
            "Share of the time the event loop's thread is on the CPU (moving average).",
            registry=registry,
        )  # fmt: skip
        self.shadow_overloaded = Gauge(
            "mirrorgate_shadow_overloaded",
            "1 while new shadow calls are dropped because the event loop is overloaded.",
            registry=registry,
        )  # fmt: skip
        self.check_results = Counter(
            "mirrorgate_check_results", "Rule check outcomes.",
            (*arm, "rule", "rule_version", "check", "result"), registry=registry,
        )  # fmt: skip
        self.agreement = Counter(
            "mirrorgate_agreement", "Candidate answers compared with the primary's.",
            ("route", "target", "result"), registry=registry,
        )  # fmt: skip
        self.feedback = Counter(
            "mirrorgate_feedback", "User feedback joined to exchanges.",
            (*arm, "kind"), registry=registry,
        )  # fmt: skip
        self.reviews = Counter(
            "mirrorgate_reviews", "Blind reviews stored, by the reviewed candidate's side.",
            arm, registry=registry,
        )  # fmt: skip
        """One per review stored (skips are not counted), labelled with the target and arm of the
        pair's non-primary side: the shadow (arm `shadow`) whose answer was compared with the
        answer the client received."""
        self.feedback_rejected = Counter(
            "mirrorgate_feedback_rejected", "Feedback posts refused before they were stored.",
            ("reason",), registry=registry,
        )  # fmt: skip
        """reason: `unauthenticated` (no token), `bad_token` (an application token that is not
        one, a signed token forged or for another request), `expired` (a signed token past its
        expiry), `rate_limited` (the caller is over `server.feedback_rate_per_s`)."""
        self.operations = Counter(
            "mirrorgate_operations", "Business operations' outcomes, once per operation and kind.",
            ("route", "arm", "outcome"), registry=registry,
        )  # fmt: skip
        """Counted when an operation's first outcome of a kind is posted (`POST /v1/outcomes`).
        outcome: `completed`/`not_completed`, `adopted`/`not_adopted`, `corrected`/
        `not_corrected`. route and arm: the operation's first client call's (arm: the
        experiment arm when it ran in one, else primary, canary or fallback)."""
        self.operation_cost = Histogram(
            "mirrorgate_operation_cost_usd",
            "Summed cost of a business operation (its client calls, fallbacks and judge calls), "
            "observed when its first completed outcome arrives.",
            ("route", "arm"), buckets=OPERATION_COST_BUCKETS, registry=registry,
        )  # fmt: skip
        self.outcomes_rejected = Counter(
            "mirrorgate_outcomes_rejected", "Outcome posts refused before they were stored.",
            ("reason",), registry=registry,
        )  # fmt: skip
        """reason: as `mirrorgate_feedback_rejected_total`'s (`unauthenticated`, `bad_token`,
        `expired`, `rate_limited`)."""
        self.rollouts = RolloutGauges(registry)
        """`mirrorgate_rollout_weight_percent` (route, target) and `mirrorgate_rollout_phase`
        (route, target, phase)."""
        self.rollbacks = Counter(
            "mirrorgate_rollbacks", "Rollbacks, by reason.",
            ("route", "target", "reason"), registry=registry,
        )  # fmt: skip
        self.verdicts = Counter(
            "mirrorgate_analysis_verdicts", "Judge verdicts per metric.",
            ("route", "target", "metric", "verdict"), registry=registry,
        )  # fmt: skip
        self.experiment_running = Gauge(
            "mirrorgate_experiment_running", "1 while the route's A/B experiment runs.",
            ("route",), registry=registry,
        )  # fmt: skip
        self.experiment_weight = Gauge(
            "mirrorgate_experiment_weight_percent",
            "Share of the experiment's units an arm serves (0 once the arm is stopped).",
            ("route", "arm"), registry=registry,
        )  # fmt: skip
        self.experiment_srm = Gauge(
            "mirrorgate_experiment_srm",
            "1 while the sample-ratio-mismatch check flags the experiment's assignment.",
            ("route",), registry=registry,
        )  # fmt: skip
        self.experiment_arm_stopped = Counter(
            "mirrorgate_experiment_arm_stopped",
            "Experiment arms stopped by a guardrail breach, by the guardrail metric.",
            ("route", "arm", "metric"), registry=registry,
        )  # fmt: skip
        self.rejected = Counter(
            "mirrorgate_rejected_requests",
            "Client requests refused before reaching any upstream, by endpoint and HTTP status.",
            ("endpoint", "status"), registry=registry,
        )  # fmt: skip
        self.rule_changes = Counter(
            "mirrorgate_rule_changes",
            "Rule-change events: a new rule version opened (a Grafana annotation).",
            ("rule",), registry=registry,
        )  # fmt: skip
        self.rule_versions_overflow = Counter(
            "mirrorgate_rule_versions_overflow",
            "Requests whose new rule version found its rule at max_versions (carried as overflow).",
            ("rule",), registry=registry,
        )  # fmt: skip
        # The analysis worker's (proxy.mirror.analysis): rule checks and analyzer plugins.
        self.analysis_dropped = Counter(
            "mirrorgate_analysis_dropped",
            "Answers not analysed because the analysis queue was full.", registry=registry,
        )  # fmt: skip
        self.analyzer_errors = Counter(
            "mirrorgate_analyzer_errors",
            "Analyzer plugin calls that raised or returned something that is not findings.",
            ("analyzer",), registry=registry,
        )  # fmt: skip
        self.analyzer_findings = Counter(
            "mirrorgate_analyzer_findings", "Findings produced by analyzer plugins.",
            ("analyzer", "finding"), registry=registry,
        )  # fmt: skip
        self.judge_score = Histogram(
            "mirrorgate_judge_score",
            "LLM-judge scores of shadow pairs (1-10, both answer orders averaged), of the "
            "candidate's answer and of the primary's (answer).",
            ("route", "candidate", "answer"), buckets=JUDGE_SCORE_BUCKETS, registry=registry,
        )  # fmt: skip
        self.inflight = Gauge(
            "mirrorgate_inflight_requests", "Client requests being served now.", registry=registry
        )
        self.exchanges_cut = Counter(
            "mirrorgate_exchanges_cut",
            "Client requests ended before their answer was complete, by reason: the client went "
            "away (client_disconnected) or the gateway stopped (shutdown). Each has its record.",
            ("route", "reason"), registry=registry,
        )  # fmt: skip
        self.gc_pause = Histogram(
            "mirrorgate_gc_pause_seconds",
            "Time the process stood still in a garbage collection, by generation collected.",
            ("generation",), buckets=GC_PAUSE_BUCKETS, registry=registry,
        )  # fmt: skip
        """Fed while the gateway runs (`proxy.observability.gcpause.watch`)."""
        self._children: dict[tuple[str, str, str], _ArmChildren] = {}
        self._overhead: dict[str, Histogram] = {}

    def observe_overhead(self, route: str, seconds: float) -> None:
        """Count the time mirrorgate itself spent on one client request of `route`."""
        child = self._overhead.get(route)
        if child is None:
            child = self._overhead[route] = self.overhead.labels(route)
        child.observe(seconds)

    def observe(self, record: ExchangeRecord) -> None:
        """Count one finished exchange."""
        key = (record.route, record.target, record.arm.value)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = _ArmChildren(self, *key)
        children.observe(record)


class _ArmChildren:
    """Label children for one (route, target, arm), resolved once; `labels()` is not free."""

    def __init__(self, metrics: GatewayMetrics, route: str, target: str, arm: str) -> None:
        labels = (route, target, arm)
        self._requests = {
            cls: metrics.requests.labels(*labels, cls)
            for cls in ("1xx", "2xx", "3xx", "4xx", "5xx", "none")
        }
        self._duration = metrics.duration.labels(*labels)
        self._ttft = metrics.ttft.labels(*labels)
        self._tokens = {
            kind: metrics.tokens.labels(*labels, kind)
            for kind in ("input", "output", "cached_input", "reasoning")
        }
        self._cost = metrics.cost.labels(*labels)

    def observe(self, record: ExchangeRecord) -> None:
        self._requests[status_class(record.http_status)].inc()
        self._duration.observe(record.duration_s)
        if record.ttft_s is not None:
            self._ttft.observe(record.ttft_s)
        usage = record.usage
        if usage.input_tokens or usage.cache_write_tokens:
            self._tokens["input"].inc(usage.input_tokens + usage.cache_write_tokens)
        if usage.output_tokens:
            self._tokens["output"].inc(usage.output_tokens)
        if usage.cached_input_tokens:
            self._tokens["cached_input"].inc(usage.cached_input_tokens)
        if usage.reasoning_tokens:
            self._tokens["reasoning"].inc(usage.reasoning_tokens)
        if record.cost_usd:
            self._cost.inc(record.cost_usd)


class RecorderMetrics:
    """The recorder's families (`proxy.store.Recorder`), on the registry it is given."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.dropped = Counter(
            "mirrorgate_recorder_dropped",
            "Exchange records not stored, by reason (queue_full, queue_bytes, shutdown, rejected).",
            ("reason",), registry=registry,
        )  # fmt: skip
        self.written = Counter(
            "mirrorgate_recorder_written", "Exchange records committed to the store.",
            registry=registry,
        )  # fmt: skip
        self.write_errors = Counter(
            "mirrorgate_recorder_write_errors",
            "Failed attempts to write a batch to the store (each retry counts).",
            registry=registry,
        )  # fmt: skip
        self.queue_depth = Gauge(
            "mirrorgate_recorder_queue_depth", "Exchange records waiting to be written.",
            registry=registry,
        )  # fmt: skip
        self.file_reopened = Counter(
            "mirrorgate_store_file_reopened",
            "Times the SQLite file at store.url was found deleted or replaced and opened anew.",
            registry=registry,
        )  # fmt: skip
        self.queue_bytes = Gauge(
            "mirrorgate_recorder_queue_bytes",
            "Estimated bytes of the records held by the recorder, queued or being written.",
            registry=registry,
        )  # fmt: skip
        self.bodies_dropped = Counter(
            "mirrorgate_recorder_bodies_dropped",
            "Exchange records stored without their bodies: the queue was at queue_max_bytes.",
            registry=registry,
        )  # fmt: skip


class JournalMetrics:
    """The crash journal's families (`proxy.store.Journal`), on the registry it is given."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.appended = Counter(
            "mirrorgate_journal_appended",
            "Exchange records appended to the crash journal before their answer's last byte.",
            registry=registry,
        )  # fmt: skip
        self.skipped = Counter(
            "mirrorgate_journal_skipped",
            "Exchange records not journaled, by reason (full: journal_max_bytes; error: the "
            "write failed).",
            ("reason",), registry=registry,
        )  # fmt: skip
        self.bodies_omitted = Counter(
            "mirrorgate_journal_bodies_omitted",
            "Exchange records journaled without their bodies (over journal_max_body_bytes).",
            registry=registry,
        )  # fmt: skip
        self.replayed = Counter(
            "mirrorgate_journal_replayed",
            "Journaled records written to the store at start (a previous process never did).",
            registry=registry,
        )  # fmt: skip
        self.torn = Counter(
            "mirrorgate_journal_torn",
            "Journal frames found incomplete or corrupt at start (a write cut by the crash).",
            registry=registry,
        )  # fmt: skip
        self.lost = Counter(
            "mirrorgate_journal_lost",
            "Journal entries known to have been flushed to disk but missing at start.",
            registry=registry,
        )  # fmt: skip
        self.unclean = Counter(
            "mirrorgate_journal_unclean",
            "Journals of processes that ended without closing them, found at start.",
            registry=registry,
        )  # fmt: skip
        self.unsynced = Gauge(
            "mirrorgate_journal_unsynced",
            "Journal entries written but not yet flushed to disk (a machine crash loses these).",
            registry=registry,
        )  # fmt: skip
        self.bytes = Gauge(
            "mirrorgate_journal_bytes", "Bytes held in the crash journal's segment files.",
            registry=registry,
        )  # fmt: skip


class AlertDeliveryMetrics:
    """The alert dispatcher's families (`alerts.AlertDispatcher` takes them: alerts never import
    the gateway, so their definitions live here with the rest of the catalogue)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.sent = Counter(
            "mirrorgate_alerts_sent", "Alerts a sink accepted.", ("sink", "kind"),
            registry=registry,
        )  # fmt: skip
        self.failures = Counter(
            "mirrorgate_alert_failures",
            "Alerts a sink never accepted, after retries (down, rejected, or sink error).",
            ("sink",), registry=registry,
        )  # fmt: skip
        self.dropped = Counter(
            "mirrorgate_alerts_dropped",
            "Alerts not queued for delivery: queue_full (a sink's queue) or deduplicated.",
            ("reason",), registry=registry,
        )  # fmt: skip


class ConnectionMetrics:
    """The client connections, as the HTTP protocol (`proxy.app.connection`) sees them."""

    CLOSE_REASONS = (
        "header_timeout", "body_timeout", "headers_too_large", "over_capacity",
    )  # fmt: skip
    """Why mirrorgate closed a client connection by itself (a limit of `server.limits`)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.open = Gauge(
            "mirrorgate_client_connections", "Client connections open now.", registry=registry
        )
        self.closed = Counter(
            "mirrorgate_connections_closed",
            "Client connections closed by mirrorgate because they broke a limit, by reason "
            "(header_timeout, body_timeout, headers_too_large, over_capacity).",
            ("reason",), registry=registry,
        )  # fmt: skip
        for reason in self.CLOSE_REASONS:
            self.closed.labels(reason)


class WorkerMetrics:
    """What the merged `/metrics` of `serve --workers` adds to its workers' families (each of
    their samples gets a `worker` label there; `proxy.observability.merging`)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.up = Gauge(
            "mirrorgate_worker_up",
            "1 for each worker whose samples this scrape includes, 0 for one that did not "
            "answer its sibling in time or answered something that is not an exposition.",
            ("worker",), registry=registry,
        )  # fmt: skip
