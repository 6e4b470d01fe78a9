"""The live route table: which model serves a route's request, and on which arm.

Built from config at start. Later stages (canary rollouts, rollbacks) change the table at run time;
every lookup reads one immutable `RouteState`, so a request never sees half a change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from proxy.config import MirrorgateConfig, RouteSpec
from proxy.records import Arm


@dataclass(frozen=True, slots=True)
class RouteState:
    """What one route does right now."""

    name: str
    spec: RouteSpec
    primary: str
    """The model serving the primary arm (the config's, unless a rollout changed it)."""
    fallback: str | None
    """The model retried on when the primary fails before any byte reached the client."""


@dataclass(frozen=True, slots=True)
class RoutePlan:
    """The decision for one request."""

    route: RouteState
    target: str
    arm: Arm


class RouteTable:
    """Route name → current state. Lookups are a dict read."""

    def __init__(self, config: MirrorgateConfig) -> None:
        self._states: dict[str, RouteState] = {
            name: RouteState(name, spec, spec.primary, spec.fallback)
            for name, spec in config.routes.items()
        }

    def get(self, name: str) -> RouteState | None:
        return self._states.get(name)

    def names(self) -> list[str]:
        return list(self._states)

    def states(self) -> Mapping[str, RouteState]:
        return dict(self._states)

    def plan(self, name: str) -> RoutePlan | None:
        """Choose the model and arm for one request to route `name` (None: no such route)."""
        state = self._states.get(name)
        if state is None:
            return None
        return RoutePlan(state, state.primary, Arm.PRIMARY)
