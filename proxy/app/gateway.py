"""Startup wiring: the one place that knows every part of the gateway.

`Gateway` owns the long-lived parts (upstream clients, store, recorder, metrics, tracer) and
exposes an ASGI app. The proxied endpoints are served by raw ASGI (`ProxyHandler`) for speed;
everything else (/v1/models, health, metrics, admin) goes through a FastAPI app.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import httpx
from fastapi import FastAPI
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from alerts.dispatcher import AlertDispatcher
from alerts.sink_types import build_sink
from analyzers.plugins import ENTRY_POINT_GROUP, available_analyzers, load_analyzers
from proxy.api import (
    AdminAuth,
    FeedbackAuth,
    FeedbackService,
    RecentExchanges,
    StateChangeGuard,
    TokenBuckets,
    build_admin_router,
    build_feedback_router,
    build_public_router,
    build_rollout_router,
    install_error_handling,
)
from proxy.config import (
    MirrorgateConfig,
    config_warnings,
    feedback_app_tokens,
    feedback_open,
)
from proxy.core import ENDPOINTS, FeedbackTokens, RecordSink, TaskSet
from proxy.gateway import (
    ExchangeObserver,
    ProxyHandler,
    Receive,
    RouteTable,
    RuleTracker,
    Scope,
    Send,
    version_policies,
)
from proxy.mirror import AnalysisWorker, CompiledRules, Judge, ShadowDispatcher
from proxy.observability import (
    AlertDeliveryMetrics,
    ConnectionMetrics,
    ExchangeTracer,
    GatewayMetrics,
    build_tracer_provider,
)
from proxy.rollout import RolloutController, RolloutManager
from proxy.store import (
    FeedbackStore,
    Journal,
    JudgeWindows,
    Leadership,
    ProbeStore,
    Recorder,
    RolloutStore,
    RuleEventStore,
    SigningKeyStore,
    Store,
)
from proxy.upstream import ModelCaller, UpstreamClient, load_encoding, shared_ssl_context

log = logging.getLogger("mirrorgate")


def _entry_points() -> list[Any]:
    """Third-party analyzers installed in this environment (discovery is I/O: it stays here)."""
    return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


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
    ) -> None:
        """`cpu_clock`: the CPU time the overload monitor counts as the gateway's. The event
        loop thread's by default; `mirrorgate serve`, alone in its process, passes the process's
        (its recorder and analysis threads compete with the loop for the same GIL)."""
        self.config = config
        self.env = os.environ if env is None else env
        self.registry = registry if registry is not None else CollectorRegistry()
        self.metrics = GatewayMetrics(self.registry)
        self.connection_metrics = ConnectionMetrics(self.registry)
        provider = tracer_provider or build_tracer_provider(config.telemetry, self.env)
        self.tracer_provider = provider
        self.tracer = ExchangeTracer(provider)
        self.routes = RouteTable(config)
        tls = (
            shared_ssl_context()
            if any(m.base_url.startswith("https:") for m in config.models.values())
            else None
        )
        self.clients = {
            name: UpstreamClient(name, spec, self.env, tls, config.server.limits)
            for name, spec in config.models.items()
        }
        self.store = Store(config.store.url, bodies=config.store.bodies)
        self.journal = Journal.from_spec(config.store, registry=self.registry)
        self.recorder = Recorder.from_spec(
            self.store,
            config.store,
            registry=self.registry,
            on_settled=self.journal.settled if self.journal is not None else None,
        )
        self.recent = RecentExchanges()
        self.sinks: tuple[RecordSink, ...] = (self.recorder.submit, self.recent)
        self.caller = ModelCaller(self.clients, keep_bodies=config.store.bodies != "none")
        plugins = load_analyzers(config.analyzers, available_analyzers(_entry_points()))
        self.analysis: AnalysisWorker | None = None
        if plugins or any(
            r.checks or any(v.checks for v in r.versions.values()) for r in config.rules.values()
        ):
            self.analysis = AnalysisWorker(
                CompiledRules(config), plugins, self.metrics, self.recorder.submit
            )
        self.shadows: ShadowDispatcher | None = None
        if any(r.shadows or r.noise_sample for r in config.routes.values()):
            judge = (
                Judge(config.judge, self.caller, self.recorder.submit, self.metrics)
                if config.judge is not None
                else None
            )
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
        self.rule_events = RuleEventStore(self.store)
        self.probes = ProbeStore(self.store)
        """Rule-flip probes' results, read by the rollout judge and `/admin/rules`."""
        self.rule_tracker = RuleTracker(
            self.rule_events,
            keep_prompts=config.store.bodies != "none",
            metrics=self.metrics,
            policies=version_policies(config),
        )
        server = config.server
        self.feedback_tokens = FeedbackTokens(server.feedback_token_ttl_s)
        """Signs the answers' feedback tokens; its key is loaded at start (`lifespan`)."""
        # The client path's observers, in the order they hear each hook.
        observers: list[ExchangeObserver] = [
            part for part in (self.shadows, self.analysis) if part is not None
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
        self.alert_client: httpx.AsyncClient | None = None
        self.alerts: AlertDispatcher | None = None
        if config.alerts.sinks:
            self.alert_client = httpx.AsyncClient(timeout=httpx.Timeout(5.0))
            self.alerts = AlertDispatcher(
                [build_sink(s.type, s.url, s.headers) for s in config.alerts.sinks],
                self.alert_client,
                AlertDeliveryMetrics(self.registry),
                retries=config.alerts.retries,
                backoff_initial_s=config.alerts.backoff_initial_s,
                backoff_max_s=config.alerts.backoff_max_s,
                dedupe_window_s=config.alerts.dedupe_window_s,
            )
        self.rollouts = RolloutManager(
            config, RolloutStore(self.store), self.routes, self.metrics, alerts=self.alerts
        )
        self.controller = RolloutController(
            config,
            self.rollouts,
            JudgeWindows(self.store),
            Leadership(self.store),
            self.metrics,
            probes=self.probes,
        )
        for warning in config_warnings(config, self.env):
            log.warning("config: %s", warning)
        self.background = TaskSet("gateway")
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
        await asyncio.to_thread(self.store.migrate)
        await asyncio.to_thread(self._load_feedback_key)
        if self.journal is not None:  # before serving: what a killed process left, then ours
            await asyncio.to_thread(self.journal.replay, self.store)
            await asyncio.to_thread(self.journal.open)
        await asyncio.to_thread(self.rule_tracker.load)
        await asyncio.to_thread(load_encoding)  # the token vocabulary, never on the event loop
        await self.rollouts.refresh()  # come back in the phase and step that were persisted
        if self.analysis is not None:
            self.analysis.start()
        self.recorder.start()
        if self.alerts is not None:
            self.alerts.start()
        self.background.spawn(
            self.rollouts.run_refresh(self.config.server.route_refresh_s), "route-refresh"
        )
        if any(r.canary is not None for r in self.config.routes.values()):
            self.background.spawn(self.controller.run(), "rollout-controller")
        if self.shadows is not None:
            self.shadows.start()
        self.ready = True
        try:
            yield
        finally:
            self.ready = False
            await self.close()

    def _load_feedback_key(self) -> None:
        """The feedback tokens' key: the variable's, or the one every replica shares through
        the store (made by the first replica that asks)."""
        given = self.env.get(self.config.server.feedback_signing_key_env)
        key = given.encode() if given else SigningKeyStore(self.store).shared("feedback-tokens")
        self.feedback_tokens.load(key)

    async def close(self) -> None:
        """Drain the recorder and close every client (SIGTERM lands here through uvicorn)."""
        await self.background.cancel_all()
        if self.alerts is not None:
            await self.alerts.stop(self.config.server.drain_timeout_s / 4)
        if self.alert_client is not None:
            await self.alert_client.aclose()
        if self.shadows is not None:
            await self.shadows.stop(self.config.server.drain_timeout_s / 2)
        if self.analysis is not None:
            await asyncio.to_thread(self.analysis.stop, self.config.server.drain_timeout_s / 2)
        for client in self.clients.values():
            await client.aclose()
        await asyncio.to_thread(self.recorder.stop, self.config.server.drain_timeout_s)
        if self.journal is not None:
            await asyncio.to_thread(self.journal.close)
        await asyncio.to_thread(self.store.close)
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()

    # --- everything but the proxied endpoints -----------------------------------------------------

    def _build_api(self) -> FastAPI:
        api = FastAPI(
            title="mirrorgate",
            lifespan=self.lifespan,
            docs_url=None,
            redoc_url=None,
            openapi_url=None,
        )
        install_error_handling(api, self.metrics)

        api.include_router(
            build_public_router(
                self.routes,
                self.registry,
                started=lambda: self.ready,
                store_ok=self.store.ping,
                write_problem=lambda: self.recorder.write_problem or self.store.file_problem(),
            )
        )
        admin_auth = AdminAuth(
            self.config.server.admin_token_env, self.env, StateChangeGuard(self.config)
        )
        api.include_router(
            build_admin_router(
                admin_auth,
                self.routes,
                self.rule_events,
                self.probes,
                [name for name, rule in self.config.rules.items() if rule.probes is not None],
            )
        )
        api.include_router(
            build_rollout_router(
                admin_auth,
                self.rollouts,
                self.routes,
                replica=f"{socket.gethostname()}:{os.getpid()}",
                decider=lambda: self.controller.leading,
                windows=self.controller.windows,
            )
        )
        api.include_router(build_feedback_router(self.feedback))

        return api
