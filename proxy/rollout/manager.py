"""Rollouts at run time: every transition persisted first, then applied to the live route table,
the metrics and the alert sinks; and every replica following the store.

`RolloutManager.act` is the only way a route's rollout changes, for the admin API, the
Alertmanager webhook and the judge alike: it reads the route's row, computes the transition
(`proxy.core.transition`), compare-and-swaps it into the store, and only then serves traffic
the new way.
`refresh` (every `server.route_refresh_s`) picks up changes made by other replicas, so all of them
route the same within that delay. When the store cannot be reached the gateway keeps serving on its
last route table; changes wait (the admin API answers 503).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from alerts.alert import Alert
from alerts.dispatcher import AlertDispatcher
from proxy.config import MirrorgateConfig, RollbackTarget, RouteSpec
from proxy.core import (
    Action,
    IllegalTransition,
    Phase,
    RolloutState,
    Transition,
    initial_state,
    transition,
)
from proxy.gateway import RouteTable
from proxy.observability import GatewayMetrics
from proxy.store import RolloutStore, StoreUnavailableError, redact

log = logging.getLogger("mirrorgate.rollouts")


async def follow_store(
    refresh: Callable[[], Awaitable[object]],
    interval_s: float,
    metrics: GatewayMetrics,
    *,
    what: str,
    serving: str,
) -> None:
    """Call `refresh` every `interval_s`, forever (a background task). While the store is
    unavailable the last `serving` keeps serving (said once, and once when it is back); any other
    failure is a bug: logged with its traceback, counted in
    `mirrorgate_internal_errors_total{component="decider"}`, and the next refresh runs."""
    failing = False
    while True:
        await asyncio.sleep(interval_s)
        try:
            await refresh()
            if failing:
                log.warning("store reachable again: %s followed again", what)
            failing = False
        except StoreUnavailableError as exc:
            if not failing:
                log.warning("cannot read %s (%s); serving the last %s", what, exc, serving)
            failing = True
        except Exception:  # a bug in one refresh must not stop following the store
            log.exception("following the %s failed", what)
            metrics.internal_errors.labels("decider").inc()


LOUD_PHASES = frozenset({Phase.ROLLED_BACK, Phase.PROMOTED, Phase.ABORTED})
"""Transitions into these phases are logged at WARNING (the rest at INFO)."""

RUNBOOK_ANCHORS = {
    "rollback": "mirrorgaterolledback",
    "rule_regression": "mirrorgaterolledback",
    "step_held": "a-step-held-mirrorgates-step_held-warning",
    "guard": "a-route-switched-by-the-guard-rule_regression-from-the-guard",
}
"""docs/runbook.md's section for each kind of alert the rollouts send (`guard`: the guard's
`rule_regression`)."""

MAX_RACES = 5


class RouteUnknownError(KeyError):
    """No route of that name in this gateway's config."""


class TransitionConflictError(Exception):
    """Other writers kept changing the route while this transition was being made."""


def rollback_reason_class(actor: str, reason: str) -> str:
    """The bounded `reason` label of `mirrorgate_rollbacks_total`."""
    if actor == "judge":
        if reason.startswith("check_pass_rate"):
            return "rule_check"
        if reason.startswith("rule_adaptation"):
            return "rule_adaptation"
        return "judge"
    if actor in ("alertmanager", "operator", "guard"):
        return actor
    return "other"


class RolloutManager:
    """Owns the rollout state of every route of this gateway."""

    def __init__(
        self,
        config: MirrorgateConfig,
        store: RolloutStore,
        routes: RouteTable,
        metrics: GatewayMetrics,
        *,
        alerts: AlertDispatcher | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.config = config
        self.store = store
        self.routes = routes
        self.metrics = metrics
        self.alerts = alerts
        self.clock = clock
        self._states: dict[str, RolloutState] = {
            name: initial_state(name, spec) for name, spec in config.routes.items()
        }
        self.store_ok = True
        self.blocked: Callable[[str], str | None] = lambda route: None
        """Why a rollout cannot start on a route now (the experiments' manager says while an
        experiment runs on it); None: nothing in the way."""
        for state in self._states.values():
            self._export(state)

    def reconfigure(self, config: MirrorgateConfig) -> None:
        """Own `config`'s routes from now on (a configuration reload): a route that stays keeps
        its rollout state (the route table rebuilds its live state from it, see
        `proxy.gateway.routing.state_for`), a new one starts in its initial state (`refresh`
        then brings any row the store holds for it), a removed one is dropped with its gauges."""
        states = {
            name: self._states.get(name) or initial_state(name, spec)
            for name, spec in config.routes.items()
        }
        for route in set(self._states) - set(states):
            self.metrics.rollouts.forget(route)
        self.config = config
        self._states = states
        self.routes.reconfigure(config, states)
        for state in states.values():
            self._export(state)

    # --- reading ----------------------------------------------------------------------------------

    def state(self, route: str) -> RolloutState:
        try:
            return self._states[route]
        except KeyError:
            raise RouteUnknownError(route) from None

    def states(self) -> Mapping[str, RolloutState]:
        return dict(self._states)

    async def refresh(self) -> int:
        """Apply what other replicas changed; return how many routes changed. Raises
        `StoreUnavailableError` when the store cannot be read (the table stays as it was)."""
        with self._reaching_the_store():
            revisions = await asyncio.to_thread(self.store.revisions)
            stale = [
                route
                for route, revision in revisions.items()
                if route in self._states and revision != self._states[route].revision
            ]
            rows = await asyncio.to_thread(self.store.load, stale) if stale else {}
        for state in rows.values():
            if state.revision != self._states[state.route].revision:
                self._apply(state)
        return len(rows)

    async def run_refresh(self, interval_s: float) -> None:
        """Follow the store forever (a background task): `follow_store` with this refresh."""
        await follow_store(
            self.refresh, interval_s, self.metrics, what="rollout state", serving="route table"
        )

    # --- changing ---------------------------------------------------------------------------------

    async def act(
        self,
        route: str,
        action: Action,
        *,
        reason: str,
        actor: str,
        evidence: Mapping[str, Any] | None = None,
        alert: Alert | None = None,
        expect_revision: int | None = None,
        to: RollbackTarget | None = None,
        model: str | None = None,
    ) -> Transition:
        """Make `action` on `route`: persisted, then applied. Raises `RouteUnknownError`,
        `IllegalTransition`, `StoreUnavailableError`, `TransitionConflictError`.

        `to`: a rollback's target (None: the route's `canary.rollback_to`). `model`: with
        `to="fallback"`, the model that serves instead of the route's fallback (the guard's
        switch; a configured model the route names as fallback or guard candidate).

        `expect_revision` (the judge's): act only if the route is still at the revision the
        decision was made on, so no decision is applied twice or to a newer state
        (IllegalTransition otherwise)."""
        spec = self.config.routes.get(route)
        if spec is None:
            raise RouteUnknownError(route)
        if model is not None and model not in self.config.models:
            raise IllegalTransition(
                route, action, self.state(route).phase, f"'{model}' is not a configured model"
            )
        if action is Action.START and (why := self.blocked(route)) is not None:
            raise IllegalTransition(route, action, self.state(route).phase, why)
        # As the store will keep it: the state served from memory says what a reload would.
        reason = self.store.text.text(reason) or ""
        for _ in range(MAX_RACES):
            with self._reaching_the_store():
                rows = await asyncio.to_thread(self.store.load, [route])
            current = rows.get(route) or initial_state(route, spec)
            if current.revision != self._states[route].revision:
                self._apply(current)
            if expect_revision is not None and current.revision != expect_revision:
                raise IllegalTransition(
                    route, action, current.phase, "the route changed since the decision"
                )
            change = transition(
                current,
                action,
                spec,
                now=self.clock(),
                reason=reason,
                actor=actor,
                target=to,
                model=model,
            )
            if not change.changed:
                return change
            with self._reaching_the_store():
                won = await asyncio.to_thread(self.store.commit, change, evidence)
            if won:
                self._apply(change.after)
                self._announce(change, alert)
                return change
        raise TransitionConflictError(f"route '{route}' kept changing; try again")

    @contextlib.contextmanager
    def _reaching_the_store(self) -> Iterator[None]:
        """Keep `store_ok` current: False while the store is unavailable, True once it answers.
        Any other error is not about reachability and leaves it as it was."""
        try:
            yield
        except StoreUnavailableError:
            self.store_ok = False
            raise
        self.store_ok = True

    # --- effects ----------------------------------------------------------------------------------

    def _apply(self, state: RolloutState) -> None:
        self._states[state.route] = state
        self.routes.apply(state)
        self._export(state)

    def _export(self, state: RolloutState) -> None:
        spec = self.config.routes[state.route]
        target = state.candidate or (state.override or spec.primary)
        self.metrics.rollouts.set(state.route, target, state.phase, state.weight)

    def alert_link(self, kind: str, route: str) -> str:
        """An alert's `generator_url`: `alerts.generator_url` filled in for this kind and route
        (the runbook section a person can open; the console will replace it)."""
        anchor = RUNBOOK_ANCHORS.get(kind, "runbook-mirrorgate-alerts")
        return self.config.alerts.generator_url.format(kind=kind, route=route, anchor=anchor)

    def _announce(self, change: Transition, alert: Alert | None) -> None:
        after = change.after
        # What an operator must notice (the canary is gone, or it took all traffic) is a warning.
        level = logging.WARNING if after.phase in LOUD_PHASES else logging.INFO
        log.log(
            level,
            "rollout %s: %s -> %s (step %d, %.1f%%) by %s: %s",
            after.route,
            change.before.phase,
            after.phase,
            after.step,
            after.weight,
            after.actor,
            redact(after.reason or ""),  # an operator's or an alert's words: may quote a secret
        )
        if after.phase is not Phase.ROLLED_BACK:
            return
        spec = self.config.routes[after.route]
        target = change.before.candidate or change.before.override or after.override or "primary"
        self.metrics.rollbacks.labels(
            after.route, target, rollback_reason_class(after.actor, after.reason)
        ).inc()
        if self.alerts is None:
            return
        if alert is None:
            alert = Alert(
                kind="rollback",
                route=after.route,
                target=target,
                severity="critical",
                summary=(
                    f"route {after.route} rolled back to {_destination(after, spec)} by "
                    f"{after.actor}: {after.reason}"
                ),
                starts_at=after.changed_at or self.clock(),
                generator_url=self.alert_link("rollback", after.route),
                rollout_id=after.rollout_id,
            )
        self.alerts.notify(replace(alert, rolled_back_to=after.rolled_back_to))


def _destination(state: RolloutState, spec: RouteSpec) -> str:
    """Where a rolled-back route's traffic went, for alert texts."""
    model = state.override or spec.primary
    if state.rolled_back_to == "fallback":
        return f"its fallback {model}"
    return f"its primary {model} (canary at 0 %)"
