"""Online A/B experiments at run time: start and stop persisted first, then applied to the live
route table and the metrics, on every replica.

`ExperimentManager` is the only way a route's experiment changes, for the admin API and the
decider alike, the way `RolloutManager.act` is for rollouts: the store's row is written (a start
inserts it only while none runs; a stop or an arm stopped compare-and-swaps its revision), then
the route table serves the new way. `refresh` (every `server.route_refresh_s`, beside the
rollouts') applies what other replicas changed, so every replica assigns the same within that
delay. An experiment never runs beside a rollout in progress or paused on its route: each start
is refused, with a 409 naming the other (`ExperimentConflictError`, and the rollout manager's
`blocked` hook).

Reloads (`reconfigure`): a running experiment keeps its id, weights and stopped arms, so every
unit stays where it was; its arms' models and prompt variants are the new config's, an arm the
new config removed serves its units by control, and an arm it added waits for the next start.
The status says when the config changed since the start (the fingerprints differ).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from alerts.alert import Alert
from alerts.dispatcher import AlertDispatcher
from proxy.config import MirrorgateConfig
from proxy.core import ACTIVE, ExperimentState, experiment_fingerprint
from proxy.gateway import RouteTable
from proxy.observability import GatewayMetrics
from proxy.store import ExperimentStore, StoreUnavailableError, redact

from .manager import RolloutManager, RouteUnknownError, follow_store

log = logging.getLogger("mirrorgate.experiments")

RUNBOOK_ANCHORS = {
    "experiment_arm_stopped": "mirrorgateexperimentarmstopped",
    "experiment_srm": "mirrorgateexperimentsrm",
}


class ExperimentConflictError(Exception):
    """The experiment cannot change now: the route has none configured, or a rollout runs."""


@dataclass(frozen=True, slots=True)
class ExperimentChange:
    """What a start or a stop did."""

    state: ExperimentState | None
    changed: bool


class ExperimentManager:
    """Owns the experiment state of every route of this gateway."""

    def __init__(
        self,
        config: MirrorgateConfig,
        store: ExperimentStore,
        routes: RouteTable,
        metrics: GatewayMetrics,
        rollouts: RolloutManager,
        *,
        alerts: AlertDispatcher | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.config = config
        self.store = store
        self.routes = routes
        self.metrics = metrics
        self.rollouts = rollouts
        self.alerts = alerts
        self.clock = clock
        self.store_ok = True
        self._states: dict[str, ExperimentState] = {}
        self._exported: dict[str, set[str]] = {}
        """route → arms whose weight gauge is exported."""
        rollouts.blocked = self.blocks_rollout
        for route, spec in config.routes.items():
            if spec.experiment is not None:
                self.metrics.experiment_running.labels(route).set(0)

    # --- reading ----------------------------------------------------------------------------------

    def state(self, route: str) -> ExperimentState | None:
        """The route's latest experiment (running or stopped), None if it never had one.
        Raises `RouteUnknownError`."""
        if route not in self.config.routes:
            raise RouteUnknownError(route)
        return self._states.get(route)

    def running(self, route: str) -> ExperimentState | None:
        state = self._states.get(route)
        return state if state is not None and state.running else None

    def blocks_rollout(self, route: str) -> str | None:
        """Why a rollout cannot start on `route` now (None: nothing in the way)."""
        state = self.running(route)
        if state is None:
            return None
        return (
            f"experiment {state.experiment_id} runs on route '{route}': stop it first "
            f"(mirrorgate experiment stop {route})"
        )

    def reconfigure(self, config: MirrorgateConfig) -> None:
        """Serve `config`'s routes from now on (see the module docstring); the route table has
        just been rebuilt, so every state is applied to it again."""
        self.config = config
        for route in list(self._states):
            if route not in config.routes:
                self._drop_gauges(route)
                del self._states[route]
        for state in self._states.values():
            self._apply(state)

    async def refresh(self) -> int:
        """Apply what other replicas changed; return how many routes changed. Raises
        `StoreUnavailableError` when the store cannot be read (the table stays as it was)."""
        with self._reaching_the_store():
            revisions = await asyncio.to_thread(self.store.revisions)
            stale = [
                route
                for route, (experiment_id, revision) in revisions.items()
                if route in self.config.routes
                and (
                    (known := self._states.get(route)) is None
                    or (known.experiment_id, known.revision) != (experiment_id, revision)
                )
            ]
            rows = await asyncio.to_thread(self.store.load, stale) if stale else {}
        for state in rows.values():
            self._apply(state)
        return len(rows)

    async def run_refresh(self, interval_s: float) -> None:
        """Follow the store forever (a background task), like the rollouts' refresh."""
        await follow_store(
            self.refresh, interval_s, self.metrics, what="experiments", serving="ones"
        )

    # --- changing ---------------------------------------------------------------------------------

    async def start(self, route: str, *, actor: str, reason: str) -> ExperimentChange:
        """Start the route's configured experiment: persisted, then served. Idempotent: while
        one runs, that one is returned unchanged. Raises `RouteUnknownError`,
        `ExperimentConflictError`, `StoreUnavailableError`."""
        spec = self.config.routes.get(route)
        if spec is None:
            raise RouteUnknownError(route)
        experiment = spec.experiment
        if experiment is None:
            raise ExperimentConflictError(
                f"route '{route}' has no experiment configured (routes.{route}.experiment)"
            )
        rollout = self.rollouts.state(route)
        if rollout.phase in ACTIVE:
            raise ExperimentConflictError(
                f"a rollout of canary {rollout.candidate} is {rollout.phase} on route "
                f"'{route}': an experiment cannot start until it ends (promote, abort or "
                "roll it back first)"
            )
        running = self.running(route)
        if running is not None:
            return ExperimentChange(running, False)
        state = ExperimentState(
            route=route,
            experiment_id=uuid.uuid4().hex[:16],
            running=True,
            weights=experiment.shares(),
            control=experiment.control,
            fingerprint=experiment_fingerprint(experiment),
            started_at=self.clock(),
            actor=actor,
            reason=reason,
            models={arm: a.model for arm, a in experiment.arms.items()},
        )
        with self._reaching_the_store():
            stored = await asyncio.to_thread(self.store.start, state)
        changed = stored.experiment_id == state.experiment_id
        self._apply(stored)
        if changed:
            log.warning(
                "experiment %s started on %s by %s: %s",
                stored.experiment_id,
                route,
                actor,
                redact(reason),
            )
        return ExperimentChange(stored, changed)

    async def stop(self, route: str, *, actor: str, reason: str) -> ExperimentChange:
        """Stop the route's running experiment: persisted, then every unit goes back to the
        route's normal serving. Idempotent. Raises `RouteUnknownError`,
        `StoreUnavailableError`."""
        if route not in self.config.routes:
            raise RouteUnknownError(route)
        with self._reaching_the_store():
            state, changed = await asyncio.to_thread(
                lambda: self.store.stop(route, actor=actor, reason=reason, at=self.clock())
            )
        if state is not None:
            self._apply(state)
        if changed and state is not None:
            log.warning(
                "experiment %s on %s stopped by %s: %s",
                state.experiment_id,
                route,
                actor,
                redact(reason),
            )
        return ExperimentChange(state, changed)

    async def stop_arm(
        self, state: ExperimentState, arm: str, *, metric: str, summary: str
    ) -> ExperimentState | None:
        """A guardrail breach: stop `arm` of the running `state` (persisted, then its units go
        to control), count it and alert, as a rollback does. None: the experiment changed
        meanwhile (nothing was done)."""
        now = self.clock()
        with self._reaching_the_store():
            after = await asyncio.to_thread(
                lambda: self.store.stop_arm(state, arm, metric=metric, detail=summary, at=now)
            )
        if after is None:
            return None
        self._apply(after)
        self.metrics.experiment_arm_stopped.labels(state.route, arm, metric).inc()
        log.warning("experiment %s on %s: %s", state.experiment_id, state.route, summary)
        self.notify(
            Alert(
                kind="experiment_arm_stopped",
                route=state.route,
                target=state.models.get(arm, arm),
                severity="critical",
                summary=summary,
                starts_at=now,
                check=metric,
                rollout_id=state.experiment_id,
                generator_url=self.alert_link("experiment_arm_stopped", state.route),
            )
        )
        return after

    def notify(self, alert: Alert) -> None:
        if self.alerts is not None:
            self.alerts.notify(alert)

    def alert_link(self, kind: str, route: str) -> str:
        anchor = RUNBOOK_ANCHORS.get(kind, "runbook-mirrorgate-alerts")
        return self.config.alerts.generator_url.format(kind=kind, route=route, anchor=anchor)

    @contextlib.contextmanager
    def _reaching_the_store(self) -> Iterator[None]:
        try:
            yield
        except StoreUnavailableError:
            self.store_ok = False
            raise
        self.store_ok = True

    # --- effects ----------------------------------------------------------------------------------

    def _apply(self, state: ExperimentState) -> None:
        self._states[state.route] = state
        self.routes.apply_experiment(state)
        self._export(state)

    def _export(self, state: ExperimentState) -> None:
        live = self.routes.get(state.route)
        serving = live.experiment if live is not None else None
        self.metrics.experiment_running.labels(state.route).set(1 if serving else 0)
        weights: Mapping[str, float] = serving.live_weights() if serving is not None else {}
        arms = set(state.weights) | self._exported.get(state.route, set())
        for arm in arms:
            self.metrics.experiment_weight.labels(state.route, arm).set(
                round(weights.get(arm, 0.0) * 100, 2)
            )
        self._exported[state.route] = arms
        if serving is None:
            self.metrics.experiment_srm.labels(state.route).set(0)

    def _drop_gauges(self, route: str) -> None:
        for arm in self._exported.pop(route, set()):
            with contextlib.suppress(KeyError):
                self.metrics.experiment_weight.remove(route, arm)
        for gauge in (self.metrics.experiment_running, self.metrics.experiment_srm):
            with contextlib.suppress(KeyError):
                gauge.remove(route)
