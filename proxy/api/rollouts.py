"""The rollout part of the HTTP surface (docs/reference.md): `/admin/rollouts/...` and the
Alertmanager webhook `/hooks/alertmanager`. Both need the admin bearer token; every POST also
passes the `Host`, `Origin` and JSON checks of `proxy.api.doors`.

    GET  /admin/rollouts                       every route's rollout state, whether the store
                                               is reachable, and this replica: its `replica`
                                               id (host:pid) and `decider` (true on the one
                                               replica that judges now)
    GET  /admin/rollouts/{route}               one route: state, live routing, transitions, verdicts
                                               (with needs and eta_s), warnings, and `eta`: when
                                               the step passes and the candidate is promoted
                                               (median and p90) and what holds the step
    GET  /admin/rollouts/{route}/verdicts      the judge's recent verdicts (?limit=, at most 1000)
    GET  /admin/rollouts/{route}/plan          can the canary's steps pass at the route's recent
                                               traffic (?since=1h, or the span that has data),
                                               how long each takes (median and p90), advice
    POST /admin/rollouts/{route}/{action}      start | pause | resume | promote | abort | rollback
                                               | restore
                                               JSON body {} or {"reason": "..."}; a rollback
                                               also takes "to": "primary" | "fallback" (default:
                                               the route's canary.rollback_to); a start
                                               refused by the offline gate (409, with the
                                               numbers) takes "force": true with a reason

Answers: 200 with `changed` (false when the route already was where the action leads), 404 for
an unknown route or action, 409 with the current phase for an illegal transition (a rollback to
`fallback` on a route without one included), 503 when the
store cannot be reached (nothing changed; retry). Errors are raised and answered by
`proxy.api.errors`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

import orjson
from fastapi import APIRouter, Depends, Request

from alerts.alertmanager_webhook import parse_payload
from alerts.errors import PayloadError
from alerts.rollback_request import decide_rollbacks
from proxy.config import ConfigProblem, RollbackTarget, rollout_warnings
from proxy.core import (
    ACTIVE,
    OPERATOR_ACTIONS,
    Action,
    IllegalTransition,
    NotFound,
    RequestError,
    RolloutState,
    Unavailable,
    parse_since,
)
from proxy.gateway import RouteTable
from proxy.rollout import (
    OFFLINE_NO_RUNS,
    RolloutManager,
    RolloutPlan,
    RouteUnknownError,
    TrafficProfile,
    TransitionConflictError,
    eta_json,
    offline_evidence,
    offline_status,
    plan_rollout,
    probe_budget_until,
    rollout_eta,
    step_since,
    traffic_profile,
)
from proxy.store import Arms, EvalStore, JudgeWindows, ProbeStore, StoreUnavailableError

from .admin import read_limited, require_admin
from .errors import PhaseConflict, store_unavailable

log = logging.getLogger("mirrorgate.rollout_api")

PLAN_CACHE_S = 60.0
"""How long the status's forecast reuses a plan of the route's traffic (a plan reads the last
hour and simulates each step: worth keeping for a minute, not for a step)."""
MAX_REASON_BODY = 16 * 1024
MAX_ALERTMANAGER_BODY = 1024 * 1024
"""Alertmanager batches at most a group's alerts; a megabyte is far beyond any real payload."""


def state_json(state: RolloutState, routes: RouteTable) -> dict[str, Any]:
    live = routes.get(state.route)
    spec = live.spec if live else None
    return {
        "route": state.route,
        "phase": state.phase.value if state.phase else None,
        "revision": state.revision,
        "rollout_id": state.rollout_id,
        "candidate": state.candidate,
        "baseline": state.baseline,
        "step": state.step,
        "steps": list(spec.canary.steps) if spec and spec.canary else [],
        "weight_percent": state.weight,
        "rolled_back_to": state.rolled_back_to,
        "reason": state.reason,
        "actor": state.actor,
        "changed_at": state.changed_at.isoformat() if state.changed_at else None,
        "started_at": state.started_at.isoformat() if state.started_at else None,
        "step_started_at": state.step_started_at.isoformat() if state.step_started_at else None,
        "serving": {
            "primary": live.primary if live else None,
            "arm": live.primary_arm.value if live else None,
            "canary": live.canary.target if live and live.canary else None,
            "canary_weight_percent": live.canary.weight if live and live.canary else 0.0,
        },
        "override": (
            {
                "model": state.override,
                "arm": state.override_arm.value,
                "config_primary": spec.primary if spec else None,
            }
            if state.override is not None
            else None
        ),
    }


def plan_json(
    plan: RolloutPlan, profile: TrafficProfile, since: str, warnings: list[ConfigProblem]
) -> dict[str, Any]:
    """The answer of `GET /admin/rollouts/{route}/plan`."""
    return {
        "route": plan.route,
        "since": since,
        "span_s": None if profile.span_s is None else round(profile.span_s),
        "traffic": {
            "rate_per_s": round(profile.rate_per_s, 4),
            "requests": profile.requests,
            "error_rate": round(profile.errors / profile.requests, 6) if profile.requests else None,
            "checks": {k: {"passed": p, "total": t} for k, (p, t) in profile.checks.items()},
        },
        "steps": [
            {
                "weight_percent": step.weight,
                "canary_per_s": round(step.canary_per_s, 4),
                "needs": dict(step.needs),
                "duration_s": None if step.duration_s is None else round(step.duration_s),
                "duration_p90_s": _rounded(step.duration_p90_s),
                "least_s": _rounded(step.least_s),
                "holding": step.holding,
            }
            for step in plan.steps
        ],
        "total_s": None if plan.total_s is None else round(plan.total_s),
        "total_p90_s": _rounded(plan.total_p90_s),
        "probe_per_s": round(plan.probe_per_s, 5),
        "not_forecast": list(plan.not_forecast),
        "can_pass": plan.total_s is not None,
        "advice": list(plan.advice),
        "warnings": [problem.message for problem in warnings],
    }


def _rounded(value: float | None) -> int | None:
    return None if value is None else round(value)


@dataclass(frozen=True, slots=True)
class RolloutParts:
    """What the rollout routes reach of their gateway: `app.state.rollout_parts`, set by the
    app's wiring. `replica` names this gateway process in `GET /admin/rollouts`; `decider` says
    whether it is the one replica running the judge right now (it holds the decider lock)."""

    manager: RolloutManager
    routes: RouteTable
    replica: str = ""
    decider: Callable[[], bool] = lambda: False
    windows: JudgeWindows | None = None
    eval_runs: EvalStore | None = None
    probes: ProbeStore | None = None
    """The rule-flip probes' results: the plan's baseline adaptation and the probe budget."""
    plans: dict[str, tuple[float, RolloutPlan]] | None = None
    """route → (when made, by the monotonic clock; plan): the status's forecast, `PLAN_CACHE_S`."""


def rollout_parts(request: Request) -> RolloutParts:
    """The rollout parts of the gateway serving `request`."""
    parts: RolloutParts = request.app.state.rollout_parts
    return parts


# Built once per process, like every API router (proxy/api/admin.py says why).
rollout_router = APIRouter(dependencies=[Depends(require_admin)])


@rollout_router.get("/admin/rollouts")
async def all_rollouts(request: Request) -> dict[str, Any]:
    parts = rollout_parts(request)
    manager = parts.manager
    return {
        "rollouts": [state_json(s, parts.routes) for s in manager.states().values()],
        "store_reachable": manager.store_ok,
        "replica": parts.replica,
        "decider": parts.decider(),
    }


@rollout_router.get("/admin/rollouts/{route}")
async def one_rollout(route: str, request: Request) -> dict[str, Any]:
    parts = rollout_parts(request)
    manager = parts.manager
    try:
        state = manager.state(route)
    except RouteUnknownError:
        raise NotFound(f"no route '{route[:200]}'") from None
    warnings = [problem.message for problem in rollout_warnings(manager.config, route)]
    try:
        events, verdicts, memory = await asyncio.gather(
            asyncio.to_thread(manager.store.events, route, 50),
            asyncio.to_thread(manager.store.recent_verdicts, route, 50),
            asyncio.to_thread(manager.store.load_memory, route),
        )
    except StoreUnavailableError as exc:  # the state above is still worth showing
        log.warning("rollout history unavailable: %s", exc)
        events, verdicts, memory = [], [], None
    if memory is not None and memory.rollout_id == state.rollout_id:
        warnings += [w for w in memory.warnings if w not in warnings]
    offline = await _offline(parts, route, events, state.rollout_id)
    eta = None
    if state.phase in ACTIVE:
        try:
            eta = await rollout_forecast(parts, route, state, events, verdicts)
        except StoreUnavailableError as exc:
            log.warning("rollout forecast unavailable: %s", exc)
    return {
        **state_json(state, parts.routes),
        "eta": eta,
        "transitions": events,
        "verdicts": verdicts,
        "warnings": warnings,
        "offline_evidence": offline,
    }


async def rollout_forecast(
    parts: RolloutParts,
    route: str,
    state: RolloutState,
    events: list[dict[str, Any]],
    verdicts: list[dict[str, Any]],
) -> dict[str, Any] | None:
    """`eta` of `GET /admin/rollouts/{route}`: the running rollout's forecast
    (`proxy.rollout.eta`) from its transitions and verdicts (newest first), the plan at the
    route's last hour of traffic and the probe budget; the console shows the same. Raises
    `StoreUnavailableError`."""
    spec = parts.manager.config.routes[route]
    if spec.canary is None or not events:
        return None
    now = datetime.now(UTC)
    since = step_since(state, events) or now
    plan = await _cached_plan(parts, route, now)
    until = None
    rule = parts.manager.config.rule_of(route)
    probes = parts.manager.config.rules[rule].probes if rule is not None else None
    if parts.probes is not None and probes is not None and state.baseline and state.candidate:
        until = await asyncio.to_thread(
            probe_budget_until,
            parts.probes,
            rule or "",
            probes,
            (state.baseline, state.candidate),
            now,
        )
    eta = rollout_eta(state, spec.canary, verdicts, plan, since, now, probe_until=until)
    return eta_json(eta)


async def _cached_plan(parts: RolloutParts, route: str, now: datetime) -> RolloutPlan | None:
    cache = parts.plans
    made = cache.get(route) if cache is not None else None
    if made is not None and time.monotonic() - made[0] < PLAN_CACHE_S:
        return made[1]
    try:
        planned, _ = await _plan(parts, route, "1h", now)
    except RequestError:
        return None
    if cache is not None:
        cache[route] = (time.monotonic(), planned)
    return planned


async def _offline(
    parts: RolloutParts, route: str, events: list[dict[str, Any]], rollout_id: str | None
) -> dict[str, Any]:
    """The offline gate's evidence now, and the override the current rollout started with."""
    spec = parts.manager.config.routes[route]
    return await asyncio.to_thread(
        offline_status, parts.eval_runs, spec, events, rollout_id, datetime.now(UTC)
    )


@rollout_router.get("/admin/rollouts/{route}/verdicts")
async def verdicts(route: str, request: Request, limit: int = 100) -> dict[str, Any]:
    manager = rollout_parts(request).manager
    if route not in manager.states():
        raise NotFound(f"no route '{route[:200]}'")
    limit = max(1, min(limit, 1000))
    try:
        rows = await asyncio.to_thread(manager.store.recent_verdicts, route, limit)
    except StoreUnavailableError as exc:
        raise store_unavailable(exc, "the store cannot be read") from exc
    return {"route": route, "verdicts": rows}


@rollout_router.get("/admin/rollouts/{route}/plan")
async def plan(route: str, request: Request, since: str = "1h") -> dict[str, Any]:
    parts = rollout_parts(request)
    manager = parts.manager
    spec = manager.config.routes.get(route)
    if spec is None:
        raise NotFound(f"no route '{route[:200]}'")
    if spec.canary is None:
        raise RequestError(f"route '{route[:200]}' has no canary to plan")
    planned, profile = await _plan(parts, route, since, datetime.now(UTC))
    return plan_json(planned, profile, since, rollout_warnings(manager.config, route))


async def _plan(
    parts: RolloutParts, route: str, since: str, now: datetime
) -> tuple[RolloutPlan, TrafficProfile]:
    """The plan of the route's canary at its traffic since `since` — or since its oldest
    exchange, when the gateway is younger than that: the rate is measured over the span that
    has data (`span_s`). Raises RequestError (400) for a bad `since` or no store."""
    manager, windows = parts.manager, parts.windows
    spec = manager.config.routes[route]
    assert spec.canary is not None
    try:
        start = parse_since(since[:100], now)
    except ValueError as exc:
        raise RequestError(f"since: {exc}") from None
    if windows is None:
        raise RequestError("this gateway has no store to read recent traffic from")
    rule = manager.config.rule_of(route)
    state = manager.state(route)
    active = state.phase in ACTIVE and state.baseline
    baseline = state.baseline if active and state.baseline else spec.primary
    candidate = state.candidate if active and state.candidate else ""
    probes = manager.config.rules[rule].probes if rule is not None else None
    try:
        profile = await asyncio.to_thread(
            _profile, windows, parts.probes, route, baseline, candidate, rule, start, now
        )
    except StoreUnavailableError as exc:
        raise store_unavailable(exc, "the store cannot be read") from exc
    planned = await asyncio.to_thread(
        partial(plan_rollout, route, profile, spec.canary, probes=probes)
    )
    return planned, profile


def _profile(
    windows: JudgeWindows,
    probes: ProbeStore | None,
    route: str,
    baseline: str,
    candidate: str,
    rule: str | None,
    start: datetime,
    now: datetime,
) -> TrafficProfile:
    """The baseline's traffic profile since `start` (blocking), its rate measured over the span
    that has data, of the route's whole traffic (both arms while a rollout runs: the plan's
    shares are of the route), and the baseline's rule-flip probes."""
    arms = Arms(route, baseline, candidate)
    total = windows.count_exchanges(arms, start)
    # The oldest exchange since `start`, of either arm: a young gateway's data begins there.
    oldest = windows.oldest_start(arms, start)
    began = max(start, oldest) if oldest is not None else start
    span = max((now - began).total_seconds(), 1.0)
    profile = traffic_profile(windows, route, baseline, rule, start, now)
    tally = None
    if probes is not None and rule is not None:
        seen = probes.tallies(rule, since=start, targets=[baseline]).get(baseline)
        if seen is not None and seen.probes:
            tally = (seen.stuck + seen.other, seen.probes)
    return replace(profile, rate_per_s=total / span, span_s=span, probes=tally)


@rollout_router.post("/admin/rollouts/{route}/{action}")
async def act(route: str, action: str, request: Request) -> dict[str, Any]:
    parts = rollout_parts(request)
    manager = parts.manager
    try:
        chosen = Action(action)
        if chosen not in OPERATOR_ACTIONS:
            raise ValueError(action)
    except ValueError:
        names = ", ".join(a.value for a in Action if a in OPERATOR_ACTIONS)
        raise NotFound(f"no rollout action '{action[:50]}' (one of: {names})") from None
    if route not in manager.states():
        raise NotFound(f"no route '{route[:200]}'")
    reason, to, force = await _body(request, chosen)
    evidence = None
    if chosen is Action.START:
        evidence = await _gate(parts, route, reason, force)
    try:
        change = await manager.act(
            route,
            chosen,
            reason=reason or f"{chosen.value} by operator",
            actor="operator",
            evidence=evidence,
            to=to,
        )
    except IllegalTransition as exc:
        raise PhaseConflict(str(exc), exc.phase.value if exc.phase else None) from exc
    except TransitionConflictError as exc:
        phase = manager.state(route).phase
        raise PhaseConflict(str(exc), phase.value if phase else None) from exc
    # A StoreUnavailableError goes out as it is: 503, nothing changed.
    return {"changed": change.changed, "rollout": state_json(change.after, parts.routes)}


async def _gate(parts: RolloutParts, route: str, reason: str, force: bool) -> dict[str, Any] | None:
    """The offline gate before a start: the evidence kept with the transition, or a 409
    with the numbers (unless forced, with a reason: then the override is kept too)."""
    manager, eval_runs = parts.manager, parts.eval_runs
    spec = manager.config.routes[route]
    if spec.canary is None or spec.canary.require_eval is None:
        return None
    if eval_runs is None:
        verdict_allowed, evidence = False, {"required": True, "reason": OFFLINE_NO_RUNS}
    else:
        try:
            verdict, evidence = await asyncio.to_thread(
                offline_evidence, eval_runs, spec, datetime.now(UTC)
            )
        except StoreUnavailableError as exc:
            raise store_unavailable(exc, "the offline gate cannot read its runs") from exc
        verdict_allowed = verdict is not None and verdict.allowed
    kept = {"offline_gate": evidence}
    if verdict_allowed:
        return kept
    if not force:
        phase = manager.state(route).phase
        raise PhaseConflict(
            f"offline gate: {evidence.get('reason')} (start with force and a reason to "
            "override; the override is recorded)",
            phase.value if phase else None,
        )
    log.warning("rollout %s: offline gate overridden: %s", route, reason)
    return kept | {"offline_override": {"reason": reason, "refused": evidence.get("reason")}}


@rollout_router.post("/hooks/alertmanager")
async def alertmanager(request: Request) -> dict[str, Any]:
    manager = rollout_parts(request).manager
    raw = await read_limited(request, MAX_ALERTMANAGER_BODY, "the Alertmanager payload")
    try:
        payload = parse_payload(raw)
    except PayloadError as exc:
        raise RequestError(f"not an Alertmanager webhook payload: {exc}") from None
    decision = decide_rollbacks(payload, known_routes=list(manager.states()))
    rolled: list[dict[str, Any]] = []
    for req in decision.requests:
        starts = req.starts_at.astimezone(UTC)
        # Seen before? Then a redelivery: never act twice on one firing (an operator may
        # have restored the route since). Otherwise act first and record the firing after,
        # so a store failure in between makes Alertmanager retry instead of losing it.
        try:
            seen = await asyncio.to_thread(manager.store.alert_seen, req.fingerprint, starts)
        except StoreUnavailableError as exc:
            raise store_unavailable(exc, "the store cannot be reached") from exc
        if seen:
            rolled.append({"route": req.route, "fingerprint": req.fingerprint, "done": "seen"})
            continue
        try:
            change = await manager.act(
                req.route,
                Action.ROLLBACK,
                reason=req.reason + (f": {req.summary}" if req.summary else ""),
                actor="alertmanager",
                evidence={"fingerprint": req.fingerprint, "starts_at": starts.isoformat()},
                to=req.to,
            )
        except IllegalTransition as exc:  # e.g. `fallback` on a route without one
            log.warning("alert %s not acted on: %s", req.fingerprint, exc)
            rolled.append(
                {"route": req.route, "fingerprint": req.fingerprint, "done": "refused"}
                | {"reason": str(exc)}
            )
            continue
        except StoreUnavailableError as exc:
            raise store_unavailable(exc, f"rollback of {req.route} not made") from exc
        except TransitionConflictError as exc:  # 503 as well: Alertmanager sends it again
            raise Unavailable(f"rollback of {req.route} not made: {exc}") from exc
        try:
            await asyncio.to_thread(manager.store.claim_alert, req.fingerprint, starts, req.route)
        except StoreUnavailableError as exc:  # the rollback stands; a redelivery finds it done
            log.warning("could not record alert %s as handled: %s", req.fingerprint, exc)
        rolled.append(
            {
                "route": req.route,
                "fingerprint": req.fingerprint,
                "done": "rolled_back" if change.changed else "already_rolled_back",
                "rolled_back_to": change.after.rolled_back_to,
            }
        )
    return {
        "rollbacks": rolled,
        "skipped": [{"fingerprint": s.fingerprint, "reason": s.reason} for s in decision.skipped],
    }


async def _body(request: Request, action: Action) -> tuple[str, RollbackTarget | None, bool]:
    """The optional JSON body of an action: its reason, a rollback's target, and whether a
    start overrides the offline gate (`force`, which needs a reason)."""
    raw = await read_limited(request, MAX_REASON_BODY, "the request body")
    if not raw.strip():
        raise RequestError("the body is empty: send {} for an action with nothing to say")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestError(f"the body must be JSON ({exc})") from None
    rollback = action is Action.ROLLBACK
    start = action is Action.START
    allowed = {"reason", "to"} if rollback else {"reason", "force"} if start else {"reason"}
    if not isinstance(body, dict) or set(body) - allowed:
        shape = (
            '{"reason": "...", "to": "primary|fallback"}'
            if rollback
            else '{"reason": "...", "force": true}'
            if start
            else '{"reason": "..."}'
        )
        raise RequestError(f"the body must be {shape} or {{}}")
    reason = body.get("reason", "")
    if not isinstance(reason, str) or len(reason) > 1000:
        raise RequestError("'reason' must be a string of at most 1000 characters")
    to = body.get("to")
    if to is not None and to not in ("primary", "fallback"):
        raise RequestError("'to' must be 'primary' or 'fallback'")
    force = body.get("force", False)
    if not isinstance(force, bool):
        raise RequestError("'force' must be true or false")
    if force and not reason.strip():
        raise RequestError("'force' needs a 'reason': the override is recorded with it")
    return reason, to, force
