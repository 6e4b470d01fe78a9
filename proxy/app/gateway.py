"""Startup wiring: the one place that knows every part of the gateway.

`Gateway` owns the long-lived parts (upstream clients, store, recorder, metrics, tracer) and
exposes an ASGI app. The proxied endpoints are served by raw ASGI (`ProxyHandler`) for speed;
everything else (/v1/models, health, metrics, admin) goes through a FastAPI app.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.metadata
import logging
import os
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import httpx
from fastapi import FastAPI
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry, disable_created_metrics

from alerts.dispatcher import AlertDispatcher
from alerts.sink_types import build_sink
from analyzers.plugins import ENTRY_POINT_GROUP, available_analyzers, load_analyzers
from proxy.api import (
    AdminAuth,
    AdminParts,
    ExperimentStatuses,
    FeedbackAuth,
    FeedbackService,
    OutcomeService,
    PublicParts,
    RecentExchanges,
    RecentOperations,
    RolloutParts,
    StateChangeGuard,
    TokenBuckets,
    admin_router,
    experiment_router,
    feedback_router,
    install_error_handling,
    outcome_router,
    public_router,
    rollout_router,
)
from proxy.config import (
    MirrorgateConfig,
    config_warnings,
    feedback_app_tokens,
    feedback_open,
    reviewer_tokens,
)
from proxy.console import ConsoleAuth, ConsoleParts, console_routes, install_console_errors
from proxy.core import ENDPOINTS, FeedbackTokens, RecordSink, StoredRecord, TaskSet
from proxy.gateway import (
    AccessLog,
    ExchangeObserver,
    ProxyHandler,
    Receive,
    RouteTable,
    RuleTracker,
    RuleValues,
    Scope,
    Send,
    version_policies,
)
from proxy.mirror import AnalysisWorker, CompiledRules, Judge, ProbeDispatcher, ShadowDispatcher
from proxy.observability import (
    AlertDeliveryMetrics,
    ConnectionMetrics,
    ExchangeTracer,
    GatewayMetrics,
    build_tracer_provider,
    gcpause,
)
from proxy.rollout import (
    ExperimentDecider,
    ExperimentManager,
    RolloutController,
    RolloutManager,
    RuleGuard,
)
from proxy.store import (
    EvalStore,
    ExperimentStore,
    FeedbackStore,
    GuardStore,
    Journal,
    JudgeWindows,
    Leadership,
    OutcomeStore,
    ProbeStore,
    Recorder,
    ReviewStore,
    RolloutStore,
    RuleEventStore,
    SigningKeyStore,
    Store,
    StoreUnavailableError,
)
from proxy.upstream import (
    TOTAL_TIMEOUT_FACTOR,
    ModelCaller,
    UpstreamClient,
    load_encoding,
    shared_ssl_context,
)

from .reload import ConfigReloader, ReloadResult
from .siblings import WorkerSiblings

log = logging.getLogger("mirrorgate")


def _entry_points() -> list[Any]:
    """Third-party analyzers installed in this environment (discovery is I/O: it stays here)."""
    return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


@functools.cache
def _alert_tls() -> ssl.SSLContext:
    """The alert sinks' TLS context: httpx's default (certifi's CA bundle, or `SSL_CERT_FILE` /
    `SSL_CERT_DIR`), made once per process. Loading the bundle costs ~10 ms per context, and
    every gateway of the process (each worker's, each test's) can verify with the same one."""
    return httpx.create_ssl_context()


class Gateway:
    """A configured gateway. Call `app` from an ASGI server; `lifespan` starts and drains it."""

    def __init__(
        self,
        config: MirrorgateConfig,
        *,
        registry: CollectorRegistry | None = None,
        env: Mapping[str, str] | None = None,
        tracer_provider: TracerProvider | None = None,
        cpu_clock: Callable[[], float] = time.thread_time,
        freeze_gc: bool = False,
        source: Callable[[], MirrorgateConfig] | None = None,
        reload_siblings: Callable[[], None] | None = None,
        siblings: WorkerSiblings | None = None,
    ) -> None:
        """`cpu_clock`: the CPU time the overload monitor counts as the gateway's. The event
        loop thread's by default; `mirrorgate serve`, alone in its process, passes the process's
        (its recorder and analysis threads compete with the loop for the same GIL).
        `freeze_gc`: after start-up, freeze the objects alive then out of the cyclic collector
        (`mirrorgate serve`, one gateway per process; see `proxy.observability.gcpause`).
        `source`: reads and checks the configuration file anew, for reloads (None: this
        gateway was not started from a file and cannot reload).
        `reload_siblings`: asks the other workers of `serve --workers` to reload too, after
        `POST /admin/reload` reloaded this one (None: no siblings).
        `siblings`: where the other workers answer privately, for a merged `/metrics`."""
        self.config = config
        self.env = os.environ if env is None else env
        self._reload_siblings = reload_siblings
        self._siblings = siblings
        # No `_created` series beside every counter and histogram: no dashboard or alert reads
        # them, and they double the exposition. prometheus_client's switch is process-wide.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = registry if registry is not None else CollectorRegistry()
        self.metrics = GatewayMetrics(self.registry)
        self.connection_metrics = ConnectionMetrics(self.registry)
        provider = tracer_provider or build_tracer_provider(config.telemetry, self.env)
        self.tracer_provider = provider
        self.tracer = ExchangeTracer(provider)
        self.routes = RouteTable(config)
        self._tls: ssl.SSLContext | None = None
        self.clients = self._clients(config)
        self.retired_clients: list[UpstreamClient] = []
        """Clients of models a reload removed or changed: requests planned before it may still
        use them, so they are closed when the gateway stops."""
        self.store = Store(config.store.url, bodies=config.store.bodies)
        self.journal = Journal.from_spec(config.store, registry=self.registry)
        self.recorder = Recorder.from_spec(
            self.store,
            config.store,
            registry=self.registry,
            on_settled=self.journal.settled if self.journal is not None else None,
        )
        self.recent = RecentExchanges()
        self.recent_operations = RecentOperations()
        """The calls of recent business operations, so outcomes join them before the store has."""
        self.sinks: tuple[RecordSink, ...] = (
            self.recorder.submit,
            self.recent,
            self.recent_operations,
        )
        self.caller = ModelCaller(self.clients, keep_bodies=config.store.bodies != "none")
        plugins = (  # reading the installed entry points costs time: only when one is named
            load_analyzers(config.analyzers, available_analyzers(_entry_points()))
            if config.analyzers
            else []
        )
        self.rule_values = RuleValues.from_config(config)
        """Each rule version's value: the rule tracker fills it, phantom_rule checks read it."""
        self.analysis: AnalysisWorker | None = None
        if plugins or any(
            r.checks or any(v.checks for v in r.versions.values()) for r in config.rules.values()
        ):
            self.analysis = AnalysisWorker(
                CompiledRules(config, self.rule_values), plugins, self.metrics, self.recorder.submit
            )
        self.shadows: ShadowDispatcher | None = None
        if any(r.shadows or r.noise_sample for r in config.routes.values()):
            judge = self._judge(config)
            self.shadows = ShadowDispatcher(
                self.caller,
                self.metrics,
                self.tracer,
                self.sinks,
                analysis=self.analysis,
                judge=judge,
                max_pending=config.server.max_shadow_calls,
                shed_lag_s=config.server.shadow_shed_lag_ms / 1000,
                shed_busy=config.server.shadow_shed_busy_percent / 100,
                cpu_clock=cpu_clock,
            )
        self.probes: ProbeDispatcher | None = None
        if any(r.probes is not None for r in config.rules.values()):
            # One overload monitor for all background traffic: the shadows' when they run.
            self.probes = ProbeDispatcher(
                config,
                self.caller,
                self.metrics,
                self.tracer,
                self.sinks,
                overload=self.shadows.overload if self.shadows is not None else None,
                max_pending=config.server.max_shadow_calls,
                fleet=ProbeStore(self.store),
            )
        self._cpu_clock = cpu_clock
        self._freeze_gc = freeze_gc
        self.rule_events = RuleEventStore(self.store)
        self.probe_results = ProbeStore(self.store)
        """Rule-flip probes' results, read by the rollout judge, the guard and `/admin/rules`."""
        self.reviews = ReviewStore(self.store)
        """Blind review's queue and reviews: the console writes them, the rollout judge reads
        `human_preference` from them."""
        self.rule_tracker = RuleTracker(
            self.rule_events,
            keep_prompts=config.store.bodies != "none",
            metrics=self.metrics,
            policies=version_policies(config),
            values=self.rule_values,
        )
        if self.analysis is not None:
            self.analysis.version_open = self.rule_tracker.is_open
        server = config.server
        self.feedback_tokens = FeedbackTokens(server.feedback_token_ttl_s)
        """Signs the answers' feedback tokens; its key is loaded at start (`lifespan`)."""
        # The client path's observers, in the order they hear each hook.
        self.access_log = AccessLog(server.access_log_sample)
        observers: list[ExchangeObserver] = [
            part
            for part in (self.shadows, self.probes, self.analysis, self.access_log)
            if part is not None
        ]
        self.proxy = ProxyHandler(
            config,
            self.routes,
            self.caller,
            self.metrics,
            self.tracer,
            sinks=self.sinks,
            observers=observers,
            rule_tracker=self.rule_tracker,
            feedback_tokens=self.feedback_tokens,
            journal=self.journal.append if self.journal is not None else None,
        )
        self.feedback = FeedbackService(
            self.store,
            FeedbackStore(self.store),
            self.recent,
            self.metrics,
            FeedbackAuth(
                feedback_app_tokens(self.env.get(server.feedback_tokens_env)),
                self.feedback_tokens,
                open_without_token=feedback_open(config, self.env),
                tokens_env=server.feedback_tokens_env,
            ),
            TokenBuckets(server.feedback_rate_per_s, server.feedback_burst),
        )
        self.outcomes = OutcomeService(
            OutcomeStore(self.store),
            self.recent_operations,
            self.metrics,
            self.feedback.auth,  # outcomes are posted with feedback's credentials
            TokenBuckets(server.outcome_rate_per_s, server.outcome_burst),
        )
        self.alert_client: httpx.AsyncClient | None = None
        self._alert_metrics: AlertDeliveryMetrics | None = None
        self.alerts = self._alert_dispatcher(config)
        self.rollouts = RolloutManager(
            config, RolloutStore(self.store), self.routes, self.metrics, alerts=self.alerts
        )
        self.experiments = ExperimentManager(
            config,
            ExperimentStore(self.store),
            self.routes,
            self.metrics,
            self.rollouts,
            alerts=self.alerts,
        )
        self.controller = RolloutController(
            config,
            self.rollouts,
            JudgeWindows(self.store),
            Leadership(self.store),
            self.metrics,
            # Built whatever the config (it looks at guarded routes only), so a reload can add one.
            guard=RuleGuard(config, self.rollouts, GuardStore(self.store), self.probe_results),
            probes=self.probe_results,
            experiments=ExperimentDecider(self.experiments, reviews=self.reviews),
            reviews=self.reviews,
        )
        self.console_auth = ConsoleAuth(
            self.env.get(server.admin_token_env) or "",
            reviewer_tokens(self.env.get(server.reviewer_tokens_env)),
            StateChangeGuard(config),
            secure_cookies=(server.external_url or "").startswith("https:"),
        )
        """Who signs in on /ui; its shared keys are loaded at start (`lifespan`)."""
        self.console_parts = ConsoleParts(
            config=lambda: self.config,
            auth=self.console_auth,
            store=self.store,
            rollouts=self.rollouts,
            routes=self.routes,
            rule_events=self.rule_events,
            probes=self.probe_results,
            guard=GuardStore(self.store),
            metrics=self.metrics,
            reviews=self.reviews,
            probed_rules=lambda: [
                name for name, rule in self.config.rules.items() if rule.probes is not None
            ],
            experiments=ExperimentStatuses(self.experiments),
            eval_runs=EvalStore(self.store),
        )
        """What the console's pages read and act through."""
        for warning in config_warnings(config, self.env):
            log.warning("config: %s", warning)
        self.background = TaskSet("gateway")
        self._deciding: asyncio.Task[Any] | None = None
        self.reloader = (
            ConfigReloader(source, lambda: self.config, self.apply, self.metrics, self.env)
            if source is not None
            else None
        )
        self.api = self._build_api()
        self.ready = False

    # --- ASGI -------------------------------------------------------------------------------------

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = ENDPOINTS.get(scope["path"])
            if endpoint is not None:
                await self.proxy(scope, receive, send, endpoint)
                return
        await self.api(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: Any = None) -> AsyncIterator[None]:
        await asyncio.to_thread(self._open_store)
        await self.rollouts.refresh()  # come back in the phase and step that were persisted
        await self.experiments.refresh()  # and every experiment as it was persisted
        if self.analysis is not None:
            self.analysis.start()
        self.recorder.start()
        if self.alerts is not None:
            self.alerts.start()
        self.background.spawn(
            self.rollouts.run_refresh(self.config.server.route_refresh_s), "route-refresh"
        )
        self.background.spawn(
            self.experiments.run_refresh(self.config.server.route_refresh_s), "experiment-refresh"
        )
        self._start_deciding()
        if self.shadows is not None:
            self.shadows.start()
        if self.probes is not None:
            server = self.config.server
            self.probes.start(
                server.shadow_shed_lag_ms / 1000,
                server.shadow_shed_busy_percent / 100,
                cpu_clock=self._cpu_clock,
            )
        gcpause.watch(self.metrics.gc_pause)
        if self._freeze_gc:  # the start-up objects leave the collector's walk (gcpause)
            log.info(
                "froze %d start-up objects out of the cyclic collector",
                gcpause.freeze_startup_objects(),
            )
        self.ready = True
        try:
            yield
        finally:
            self.ready = False
            await self.close()

    def _start_deciding(self) -> None:
        """Run the rollout controller while some route has a canary, a guard or an experiment
        (from a reload on too)."""
        wanted = any(
            r.canary is not None or r.guard is not None or r.experiment is not None
            for r in self.config.routes.values()
        )
        if wanted and (self._deciding is None or self._deciding.done()):
            self._deciding = self.background.spawn(self.controller.run(), "rollout-controller")

    def _clients(self, config: MirrorgateConfig) -> dict[str, UpstreamClient]:
        """One client per model of `config`; a model whose spec is unchanged keeps the running
        client and its pool of connections."""
        running: Mapping[str, UpstreamClient] = getattr(self, "clients", {})
        https = any(m.base_url.startswith("https:") for m in config.models.values())
        if self._tls is None and https:
            self._tls = shared_ssl_context()
        clients = {}
        for name, spec in config.models.items():
            client = running.get(name)
            if client is None or client.spec != spec:
                client = UpstreamClient(name, spec, self.env, self._tls, config.server.limits)
            clients[name] = client
        return clients

    async def _retire(self, client: UpstreamClient) -> None:
        """Close a client a reload replaced once no request planned before the reload can still
        start a call on it (a fallback is tried within the first call's total time), so that
        reloads do not pile up open pools. Closing is graceful: an answer still streaming keeps
        its connection until it ends."""
        spec = client.spec
        await asyncio.sleep(spec.total_timeout_s or TOTAL_TIMEOUT_FACTOR * spec.timeout_s)
        await client.aclose()
        self.retired_clients.remove(client)

    def _judge(self, config: MirrorgateConfig) -> Judge | None:
        if config.judge is None:
            return None
        return Judge(config.judge, self.caller, self._judge_sink, self.metrics)

    def _judge_sink(self, record: StoredRecord) -> None:
        """Where the judge's findings and calls go: the recorder, and the recent operations
        (a judge call is part of its operation's cost)."""
        self.recorder.submit(record)
        self.recent_operations(record)

    def _alert_dispatcher(self, config: MirrorgateConfig) -> AlertDispatcher | None:
        """The dispatcher of `config.alerts`' sinks (None: no sink); one HTTP client and one
        set of delivery metrics serve every dispatcher this gateway builds."""
        if not config.alerts.sinks:
            return None
        if self.alert_client is None:
            self.alert_client = httpx.AsyncClient(timeout=httpx.Timeout(5.0), verify=_alert_tls())
        if self._alert_metrics is None:
            self._alert_metrics = AlertDeliveryMetrics(self.registry)
        return AlertDispatcher(
            [build_sink(s.type, s.url, s.headers) for s in config.alerts.sinks],
            self.alert_client,
            self._alert_metrics,
            retries=config.alerts.retries,
            backoff_initial_s=config.alerts.backoff_initial_s,
            backoff_max_s=config.alerts.backoff_max_s,
            dedupe_window_s=config.alerts.dedupe_window_s,
        )

    # --- reloading --------------------------------------------------------------------------------

    async def _reload_answer(self, reloader: ConfigReloader) -> tuple[int, dict[str, Any]]:
        """`POST /admin/reload`'s status and body."""
        outcome = await reloader.reload("POST /admin/reload")
        if self._reload_siblings is not None:
            # Each worker reads the file itself: one call reloads them all (each logs its outcome).
            self._reload_siblings()
        return (422 if outcome.result is ReloadResult.REJECTED else 200), outcome.answer()

    async def apply(self, config: MirrorgateConfig) -> list[str]:
        """Serve `config` from now on (its fixed sections are the running ones, see
        `proxy.app.reload.merged`). Every part is handed its new generation here, on the event
        loop and without an await between the swaps, so no request is planned on a mix; requests
        already planned keep their route state, model table and rule match. Returns what of
        `config` cannot run without a restart (a part this gateway did not start with)."""
        clients = self._clients(config)
        retired = [c for n, c in self.clients.items() if clients.get(n) is not c]
        self.retired_clients += retired
        for client in retired:
            self.background.spawn(self._retire(client), f"retire:{client.name}")
        self.clients = clients
        self.caller.clients = clients
        self.rollouts.reconfigure(config)  # and the route table, from the rollout states
        self.experiments.reconfigure(config)  # and the experiments on the rebuilt table
        self.controller.config = config
        if self.controller.guard is not None:
            self.controller.guard.config = config
        self.proxy.reconfigure(config)
        self.rule_tracker.reconfigure(version_policies(config))
        self.rule_values.reconfigure(config)
        if self.analysis is not None:
            self.analysis.rules = CompiledRules(config, self.rule_values)
        if self.probes is not None:  # the hour's probe counts and spend carry over
            self.probes.configure(config)
        drain_s = config.server.drain_timeout_s / 4
        if self.shadows is not None and config.judge != self.config.judge:
            retired_judge, self.shadows.judge = self.shadows.judge, self._judge(config)
            if retired_judge is not None:
                if self.shadows.judge is not None:  # the hour's judge budget carries over
                    self.shadows.judge.spend = retired_judge.spend
                self.background.spawn(retired_judge.stop(drain_s), "retired-judge")
        if config.alerts != self.config.alerts:
            retired_alerts, self.alerts = self.alerts, self._alert_dispatcher(config)
            self.rollouts.alerts = self.alerts
            self.experiments.alerts = self.alerts
            if self.alerts is not None and self.ready:
                self.alerts.start()
            if retired_alerts is not None:  # what it queued is still delivered
                self.background.spawn(retired_alerts.stop(drain_s), "retired-alerts")
        self.config = config
        self._start_deciding()
        with contextlib.suppress(StoreUnavailableError):  # the periodic refresh catches up
            await self.rollouts.refresh()  # rows the store holds for routes that are new here
        missing = []
        if self.shadows is None:
            missing += [
                f"routes.{name}.shadows (no shadow dispatcher runs: restart to start one)"
                for name, r in config.routes.items()
                if r.shadows or r.noise_sample
            ]
        if self.analysis is None:
            missing += [
                f"rules.{name}.checks (no analysis worker runs: restart to start one)"
                for name, r in config.rules.items()
                if r.checks or any(v.checks for v in r.versions.values())
            ]
        if self.probes is None:
            missing += [
                f"rules.{name}.probes (no probe dispatcher runs: restart to start one)"
                for name, r in config.rules.items()
                if r.probes is not None
            ]
        return missing

    def _open_store(self) -> None:
        """Start-up's blocking part, in one trip to a worker thread (each trip costs the event
        loop a hand-over): the schema, the shared keys, the journal, the rule versions."""
        self.store.migrate()
        self._load_keys()
        if self.journal is not None:  # before serving: what a killed process left, then ours
            self.journal.replay(self.store)
            self.journal.open()
        self.rule_tracker.load()
        load_encoding()  # the token vocabulary, never on the event loop

    def _load_keys(self) -> None:
        """The keys every replica of the store shares (made by the first replica that asks),
        read together: the feedback tokens' (unless the variable gives one: then it stays out
        of the store), the console's session and reviewer-id keys, and the experiments' (every
        replica assigns a unit to the same arm, and hashes it the same)."""
        given = self.env.get(self.config.server.feedback_signing_key_env)
        names = ["console-sessions", "console-reviewer-ids", "experiment-units"]
        keys = SigningKeyStore(self.store).shared_many(
            names if given else ["feedback-tokens", *names]
        )
        self.feedback_tokens.load(given.encode() if given else keys["feedback-tokens"])
        self.console_auth.load(keys["console-sessions"], keys["console-reviewer-ids"])
        self.routes.experiment_secret = keys["experiment-units"]

    async def close(self) -> None:
        """Drain the recorder and close every client (SIGTERM lands here through uvicorn)."""
        gcpause.unwatch(self.metrics.gc_pause)
        await self.background.cancel_all()
        if self.alerts is not None:
            await self.alerts.stop(self.config.server.drain_timeout_s / 4)
        if self.alert_client is not None:
            await self.alert_client.aclose()
        if self.shadows is not None:
            await self.shadows.stop(self.config.server.drain_timeout_s / 2)
        if self.probes is not None:
            await self.probes.stop(self.config.server.drain_timeout_s / 2)
        if self.analysis is not None:
            await asyncio.to_thread(self.analysis.stop, self.config.server.drain_timeout_s / 2)
        for client in [*self.clients.values(), *self.retired_clients]:
            await client.aclose()
        # The rule tracker's writes (rule events, learned templates) run on worker threads:
        # they end before the store closes, or are cancelled, never left holding a connection.
        await self.rule_tracker.tasks.wait(self.config.server.drain_timeout_s / 4)
        await self.rule_tracker.tasks.cancel_all()
        await asyncio.to_thread(self._close_store)
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()

    def _close_store(self) -> None:
        """Shutdown's blocking end, in one trip to a worker thread: drain the recorder, then
        close the journal and the store."""
        self.recorder.stop(self.config.server.drain_timeout_s)
        if self.journal is not None:
            self.journal.close()
        self.store.close()

    # --- everything but the proxied endpoints -----------------------------------------------------

    def _build_api(self) -> FastAPI:
        api = FastAPI(
            title="mirrorgate",
            lifespan=self.lifespan,
            docs_url=None,
            redoc_url=None,
            openapi_url=None,
            # The shared routers' own routes, not includes of them: FastAPI builds an include's
            # routes again, per app, on its first request.
            routes=[
                *admin_router.routes,
                *rollout_router.routes,
                *experiment_router.routes,
                *feedback_router.routes,
                *outcome_router.routes,
                *public_router.routes,
                *console_routes,
            ],
        )
        install_error_handling(api, self.metrics)
        # The routers are built once per process; each app carries its own gateway's parts.
        api.state.public_parts = PublicParts(
            self.routes,
            self.registry,
            started=lambda: self.ready,
            store_ok=self.store.ping,
            write_problem=lambda: self.recorder.write_problem or self.store.file_problem(),
            exposition=(
                functools.partial(self._siblings.exposition, registry=self.registry)
                if self._siblings is not None
                else None
            ),
        )
        admin_auth = AdminAuth(
            self.config.server.admin_token_env, self.env, StateChangeGuard(self.config)
        )
        api.state.admin_parts = AdminParts(
            admin_auth,
            self.routes,
            self.rule_events,
            reload=(
                functools.partial(self._reload_answer, self.reloader)
                if self.reloader is not None
                else None
            ),
            probes=self.probe_results,
            probed_rules=lambda: [
                name for name, rule in self.config.rules.items() if rule.probes is not None
            ],
            rule_tracker=self.rule_tracker,
            rule_settings=lambda: self.config.rules,
            keep_prompts=self.config.store.bodies != "none",
            redact_prompts=self.config.store.bodies == "redacted",
        )
        api.state.rollout_parts = RolloutParts(
            self.rollouts,
            self.routes,
            replica=f"{socket.gethostname()}:{os.getpid()}",
            decider=lambda: self.controller.leading,
            windows=self.controller.windows,
            eval_runs=EvalStore(self.store),
            probes=self.probe_results,
            plans={},
        )
        api.state.experiment_manager = self.experiments
        api.state.feedback_service = self.feedback
        api.state.outcome_service = self.outcomes
        api.state.console_parts = self.console_parts
        install_console_errors(api)

        return api
