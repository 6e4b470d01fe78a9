"""The live route table: which model serves a route's request, and on which arm.

Built from config at start; rollouts change it at run time (`RouteTable.apply`), on every replica,
from the state persisted in the store. Every lookup reads one immutable `RouteState`, so a request
never sees half a change.

Canary assignment is sticky: a hash of the route's sticky key (`proxy.core.sticky_key`, the same
key shadow sampling uses) salted with the rollout's id decides the arm, so one user stays in one
arm on every replica for the whole rollout, and the next rollout draws its users afresh. Without
a sticky key (or when the request lacks it) each request is drawn on its own. The plan carries the
request's sticky unit (`proxy.core.sticky_unit`, keyed with the table's shared secret), which every
record of the request keeps: the rollout judge's statistics are computed over it. It is hashed once
per request, and only on routes whose canary names a sticky key.

A running experiment (`apply_experiment`) takes precedence: a request carrying the experiment's
unit key is served by its unit's arm (`proxy.core.experiment.assign`), as arm `experiment`; a
request without one is planned as if no experiment ran (and not counted in it). An experiment
never runs beside an active rollout (the admin API refuses either while the other runs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from proxy.config import MirrorgateConfig, RouteSpec
from proxy.core import (
    Arm,
    ExperimentState,
    RolloutState,
    assign,
    initial_state,
    sampled,
    serving,
    sticky_key,
    sticky_unit,
)


@dataclass(frozen=True, slots=True)
class Canary:
    """The canary share of a route in the current rollout step."""

    target: str
    weight: float
    """Percent of the route's live traffic."""
    salt: str


@dataclass(frozen=True, slots=True)
class RouteState:
    """What one route does right now."""

    name: str
    spec: RouteSpec
    primary: str
    """The model serving the route's main traffic (the config's, unless a rollout changed it)."""
    fallback: str | None
    """The model retried on when the main one fails before any byte reached the client."""
    primary_arm: Arm = Arm.PRIMARY
    """`fallback` after a rollback (the route is served by its safe model)."""
    canary: Canary | None = None
    rollout: RolloutState | None = None
    """The persisted rollout state this route state was built from (None: config only)."""
    experiment: ExperimentState | None = None
    """The route's running experiment (None: none runs, or the config has none any more)."""


@dataclass(frozen=True, slots=True)
class RoutePlan:
    """The decision for one request."""

    route: RouteState
    target: str
    arm: Arm
    experiment_arm: str | None = None
    """The experiment arm serving the request (arm `experiment`), else None."""
    experiment_unit: str | None = None
    """The unit's keyed hash (recorded), else None."""
    system_append: str | None = None
    """The arm's `system_prompt_append`, if any."""
    sticky_unit: str | None = None
    """The request's sticky unit (recorded), else None: the route's canary has no sticky key or
    the request lacks it (or it is served by an experiment, whose unit is `experiment_unit`)."""


def state_for(name: str, spec: RouteSpec, rollout: RolloutState) -> RouteState:
    """The live state of route `name` under `rollout` (the persisted row, or the initial one)."""
    target, arm = serving(rollout, spec)
    canary = None
    configured = spec.canary.model if spec.canary is not None else None
    if rollout.active and rollout.candidate is not None and rollout.candidate == configured:
        # A canary removed from (or changed in) the config stops taking traffic at once.
        canary = Canary(rollout.candidate, rollout.weight, rollout.salt)
    fallback = spec.fallback if spec.fallback != target else None
    return RouteState(name, spec, target, fallback, arm, canary, rollout)


class RouteTable:
    """Route name → current state. Lookups are a dict read; changes swap one entry."""

    def __init__(self, config: MirrorgateConfig, experiment_secret: bytes = b"") -> None:
        self._states: dict[str, RouteState] = {
            name: state_for(name, spec, initial_state(name, spec))
            for name, spec in config.routes.items()
        }
        self.experiment_secret = experiment_secret
        """The key of the units' hash, the same on every replica (the store shares it)."""
        self._experiments: dict[str, ExperimentState] = {}

    def reconfigure(self, config: MirrorgateConfig, rollouts: Mapping[str, RolloutState]) -> None:
        """Serve `config`'s routes from now on (a configuration reload), each under its rollout
        state in `rollouts` (its initial state when it has none). The table is swapped whole: a
        removed route disappears, a new one appears; a plan already made keeps its `RouteState`."""
        self._states = {
            name: self._with_experiment(
                state_for(name, spec, rollouts.get(name) or initial_state(name, spec))
            )
            for name, spec in config.routes.items()
        }

    def get(self, name: str) -> RouteState | None:
        return self._states.get(name)

    def names(self) -> list[str]:
        return list(self._states)

    def states(self) -> Mapping[str, RouteState]:
        return dict(self._states)

    def apply(self, rollout: RolloutState) -> RouteState | None:
        """Serve route `rollout.route` as `rollout` says; None for a route not in this config."""
        current = self._states.get(rollout.route)
        if current is None:
            return None
        state = self._with_experiment(state_for(rollout.route, current.spec, rollout))
        self._states[rollout.route] = state
        return state

    def apply_experiment(self, experiment: ExperimentState) -> RouteState | None:
        """Serve route `experiment.route` under `experiment` (running or stopped); None for a
        route not in this config."""
        self._experiments[experiment.route] = experiment
        current = self._states.get(experiment.route)
        if current is None:
            return None
        state = self._with_experiment(current)
        self._states[experiment.route] = state
        return state

    def experiment(self, name: str) -> ExperimentState | None:
        """The experiment state last applied to route `name` (running or not)."""
        return self._experiments.get(name)

    def _with_experiment(self, state: RouteState) -> RouteState:
        experiment = self._experiments.get(state.name)
        spec = state.spec.experiment
        live = None
        if experiment is not None and experiment.running and spec is not None:
            # An arm removed from the config since the start serves its units by control.
            gone = frozenset(a for a in experiment.weights if a not in spec.arms)
            live = (
                experiment
                if not gone
                else replace(experiment, stopped_arms=experiment.stopped_arms | gone)
            )
            if live.control not in spec.arms:
                live = None  # nothing to send its units to: the experiment stops serving
        return replace(state, experiment=live)

    def plan(
        self,
        name: str,
        headers: Sequence[tuple[bytes, bytes]] = (),
        payload: Mapping[str, Any] | None = None,
        request_id: str = "",
        *,
        operation: str | None = None,
    ) -> RoutePlan | None:
        """Choose the model and arm for one request to route `name` (None: no such route).
        `operation`: the request's business operation (an experiment's `operation` unit)."""
        state = self._states.get(name)
        if state is None:
            return None
        experiment = state.experiment
        spec_x = state.spec.experiment
        if experiment is not None and spec_x is not None:
            unit = spec_x.unit
            key = operation if unit == "operation" else sticky_key(unit, headers, payload or {})
            if key is not None:
                arm, unit_id = assign(experiment, self.experiment_secret, key)
                arm_spec = spec_x.arms[arm]
                return RoutePlan(
                    state,
                    arm_spec.model,
                    Arm.EXPERIMENT,
                    experiment_arm=arm,
                    experiment_unit=unit_id,
                    system_append=arm_spec.system_prompt_append,
                )
        spec = state.spec.canary
        user: str | None = None
        recorded: str | None = None
        if spec is not None and spec.sticky != "none":
            user = sticky_key(spec.sticky, headers, payload or {})
            if user is not None:
                recorded = sticky_unit(self.experiment_secret, name, user)
        canary = state.canary
        if canary is not None and sampled(
            user if user is not None else request_id, canary.salt, canary.weight / 100
        ):
            return RoutePlan(state, canary.target, Arm.CANARY, sticky_unit=recorded)
        return RoutePlan(state, state.primary, state.primary_arm, sticky_unit=recorded)
