"""The experiments part of the HTTP surface (docs/reference.md): `/admin/experiments/...`.
Every call needs the admin bearer token; every POST also passes the `Host`, `Origin` and JSON
checks of `proxy.api.doors`.

    GET  /admin/experiments/{route}            the route's experiment: configuration, state
                                               (running or stopped, weights, stopped arms),
                                               the decider's last decision in words and in
                                               numbers, events, warnings
    POST /admin/experiments/{route}/start      JSON body {} or {"reason": "..."}
    POST /admin/experiments/{route}/stop       the same

Answers: 200 with `changed` (false when it already ran, or was already stopped), 404 for an
unknown route or action, 409 when the route has no experiment configured or a rollout is in
progress on it (the message names it), 503 when the store cannot be reached (nothing changed).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from fastapi import APIRouter, Depends, Request

from proxy.core import Conflict, ExperimentState, NotFound, RequestError, experiment_fingerprint
from proxy.rollout import ExperimentConflictError, ExperimentManager, RouteUnknownError
from proxy.store import StoreUnavailableError

from .admin import read_limited, require_admin

log = logging.getLogger("mirrorgate.experiment_api")

MAX_BODY = 16 * 1024
ACTIONS = ("start", "stop")


def experiment_json(manager: ExperimentManager, route: str) -> dict[str, Any]:
    """The configured experiment and its live state (no store read)."""
    spec = manager.config.routes[route].experiment
    state = manager.state(route)
    live = manager.routes.get(route)
    serving = live.experiment if live is not None else None
    warnings: list[str] = []
    if (
        spec is not None
        and state is not None
        and state.running
        and experiment_fingerprint(spec) != state.fingerprint
    ):
        warnings.append(
            "the configuration changed since the start: units keep their arms; arms removed "
            "are served by control, arms added wait for the next start"
        )
    return {
        "route": route,
        "configured": spec is not None,
        "config": spec.model_dump(mode="json") if spec is not None else None,
        "control": spec.control if spec is not None else None,
        "experiment": _state_json(state) if state is not None else None,
        "serving": {
            "running": serving is not None,
            "weights_percent": {
                arm: round(w * 100, 2) for arm, w in (serving.live_weights().items())
            }
            if serving is not None
            else {},
        },
        "warnings": warnings,
    }


def _state_json(state: ExperimentState) -> dict[str, Any]:
    return {
        "id": state.experiment_id,
        "state": "running" if state.running else "stopped",
        "revision": state.revision,
        "control": state.control,
        "models": dict(state.models),
        "weights_percent": {arm: round(w * 100, 2) for arm, w in state.weights.items()},
        "stopped_arms": sorted(state.stopped_arms),
        "started_at": state.started_at.isoformat() if state.started_at else None,
        "stopped_at": state.stopped_at.isoformat() if state.stopped_at else None,
        "actor": state.actor,
        "reason": state.reason,
    }


async def experiment_status(manager: ExperimentManager, route: str) -> dict[str, Any]:
    """`GET /admin/experiments/{route}`: the configured experiment, its live state, its last
    decision and its events (the state alone, with a warning, while the store cannot be read)."""
    if route not in manager.config.routes:
        raise NotFound(f"no route '{route[:200]}'")
    answer = experiment_json(manager, route)
    state = manager.state(route)
    answer["decision"] = None
    answer["events"] = []
    if state is not None:
        try:
            (decision, _at), events = await asyncio.gather(
                asyncio.to_thread(manager.store.decision, state.experiment_id),
                asyncio.to_thread(manager.store.events, state.experiment_id, 50),
            )
        except StoreUnavailableError as exc:  # the state above is still worth showing
            log.warning("experiment history unavailable: %s", exc)
            answer["warnings"].append("the store cannot be read: no decision or events")
        else:
            answer["decision"] = decision
            answer["events"] = events
    answer["store_reachable"] = manager.store_ok
    return answer


class ExperimentStatuses:
    """What the console reads of experiments: the routes that have one configured, and each one's
    status as `GET /admin/experiments/{route}` answers it."""

    def __init__(self, manager: ExperimentManager) -> None:
        self.manager = manager

    def routes(self) -> list[str]:
        routes = self.manager.config.routes
        return [name for name, spec in routes.items() if spec.experiment is not None]

    async def status(self, route: str) -> dict[str, Any]:
        return await experiment_status(self.manager, route)


def experiment_manager(request: Request) -> ExperimentManager:
    """The experiment manager of the gateway serving `request`: `app.state.experiment_manager`,
    set by the app's wiring."""
    manager: ExperimentManager = request.app.state.experiment_manager
    return manager


# Built once per process, like every API router (proxy/api/admin.py says why).
experiment_router = APIRouter(dependencies=[Depends(require_admin)])


@experiment_router.get("/admin/experiments/{route}")
async def status(route: str, request: Request) -> dict[str, Any]:
    return await experiment_status(experiment_manager(request), route)


@experiment_router.post("/admin/experiments/{route}/{action}")
async def act(route: str, action: str, request: Request) -> dict[str, Any]:
    manager = experiment_manager(request)
    if action not in ACTIONS:
        raise NotFound(f"no experiment action '{action[:50]}' (one of: start, stop)")
    if route not in manager.config.routes:
        raise NotFound(f"no route '{route[:200]}'")
    reason = await _reason(request) or f"{action} by operator"
    try:
        if action == "start":
            change = await manager.start(route, actor="operator", reason=reason)
        else:
            change = await manager.stop(route, actor="operator", reason=reason)
    except ExperimentConflictError as exc:
        raise Conflict(str(exc)) from exc
    except RouteUnknownError:  # a reload removed it meanwhile
        raise NotFound(f"no route '{route[:200]}'") from None
    # A StoreUnavailableError goes out as it is: 503, nothing changed.
    return {"changed": change.changed, **experiment_json(manager, route)}


async def _reason(request: Request) -> str:
    """The optional JSON body of an action: its reason."""
    raw = await read_limited(request, MAX_BODY, "the request body")
    if not raw.strip():
        raise RequestError("the body is empty: send {} for an action with nothing to say")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestError(f"the body must be JSON ({exc})") from None
    if not isinstance(body, dict) or set(body) - {"reason"}:
        raise RequestError('the body must be {"reason": "..."} or {}')
    reason = body.get("reason", "")
    if not isinstance(reason, str) or len(reason) > 1000:
        raise RequestError("'reason' must be a string of at most 1000 characters")
    return reason
