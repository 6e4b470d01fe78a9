"""The rollouts and guard pages (admins only).

    GET  /ui/rollouts                          every route: phase, step, weight, who serves it
    GET  /ui/rollouts/{route}                  one route: now, verdicts (interval, needs, ETA),
                                               the offline gate's evidence beside them (each
                                               stratum, the runs, an override), each
                                               rollback's or guard switch's evidence (the
                                               failing answers beside another, the failed checks),
                                               the timeline, and the buttons
    GET  /ui/rollouts/{route}/confirm?action=  the confirmation step of a button
    POST /ui/rollouts/{route}/{action}         pause | resume | promote | rollback | restore;
                                               form-encoded csrf, confirm (= the action), reason,
                                               and for a rollback `to` → 303 back to the route

An action goes through the same `RolloutManager.act` as `POST /admin/rollouts/{route}/{action}`,
with actor `console:<the admin's id>`. 404 unknown route or action, 409 an action the route's
phase does not allow, 503 the store cannot be reached (nothing changed).
"""

# No `from __future__ import annotations`: FastAPI reads the routes' dependencies from their
# annotations.

import asyncio
import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from proxy.api import RolloutParts, rollout_forecast, state_json
from proxy.config import RollbackTarget, rollout_warnings
from proxy.core import Action, IllegalTransition, RolloutState, as_utc, transition
from proxy.report import build_rollouts
from proxy.rollout import RouteUnknownError, TransitionConflictError, offline_status
from proxy.store import StoreUnavailableError

from .auth import Principal
from .evidence import example_evidence
from .forms import read_form
from .layout import page, security_headers
from .parts import ConsoleParts, admin_page, console_parts
from .refusal import ConsoleRefusal
from .rollout_page import BUTTONS, RollbackView, confirm_page, overview, route_link, route_page

log = logging.getLogger("mirrorgate.console")

MAX_REASON_CHARS = 1000
EVIDENCE_ROLLBACKS = 3
"""The newest rollbacks whose example answers the page looks up (older ones: verdicts only)."""
DONE = {
    "pause": "Paused.",
    "resume": "Resumed.",
    "promote": "Promoted.",
    "rollback": "Rolled back.",
    "restore": "Restored.",
}


def available_actions(state: RolloutState, parts: ConsoleParts) -> list[str]:
    """The buttons' actions the route's phase allows now and that would change something (the
    state machine says, dry run)."""
    spec = parts.config().routes.get(state.route)
    if spec is None:
        return []
    now = datetime.now(UTC)
    allowed = []
    for name in BUTTONS:
        try:
            change = transition(state, Action(name), spec, now=now, reason="", actor="console")
        except IllegalTransition:
            continue
        if change.changed:
            allowed.append(name)
    return allowed


def guard_summary(parts: ConsoleParts) -> dict[str, str]:
    """route → what its guard does on a rule regression."""
    return {
        name: f"{route.guard.on_rule_regression} on a rule regression"
        for name, route in parts.config().routes.items()
        if route.guard is not None
    }


def _history(
    parts: ConsoleParts, route: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """The route's transitions (newest first, evidence included), verdicts (newest first) and
    the decider's warnings for the current rollout (blocking)."""
    store = parts.rollouts.store
    events = store.events(route, 100)
    verdicts = store.recent_verdicts(route, 200)
    memory = store.load_memory(route)
    return events, verdicts, list(memory.warnings) if memory is not None else []


def _rollback_views(
    parts: ConsoleParts, route: str, events: Sequence[Mapping[str, Any]], verdicts: Sequence[Any]
) -> tuple[list[Any], list[RollbackView]]:
    """The report's reading of the history (oldest first), and each rollback with the answers
    of its newest examples (blocking)."""
    rows = [{**e, "route": route, "at": as_utc(e["at"])} for e in reversed(events)]
    verdict_rows = [{**v, "route": route, "at": as_utc(v["at"])} for v in reversed(verdicts)]
    report = build_rollouts(rows, verdict_rows).get(route)
    if report is None:
        return [], []
    rollback_rows = [r for r in rows if r.get("to_phase") == "rolled_back"]
    views = []
    for i, (row, judged) in enumerate(zip(rollback_rows, report.rollbacks, strict=True)):
        given = row.get("evidence")
        record: dict[str, Any] = given if isinstance(given, dict) else {}
        examples: list[Any] = []
        if i >= len(rollback_rows) - EVIDENCE_ROLLBACKS:
            ids = record.get("example_request_ids")
            listed = [str(x) for x in ids] if isinstance(ids, list) else []
            examples = example_evidence(parts.store, route, listed)
        transition_report = next(
            t for t in report.transitions if t.at == row["at"] and t.to_phase == "rolled_back"
        )
        views.append(RollbackView(transition_report, judged, record, examples))
    return list(report.transitions), views


def _known(parts: ConsoleParts, route: str) -> RolloutState:
    try:
        return parts.rollouts.state(route)
    except RouteUnknownError:
        raise ConsoleRefusal(404, f"no route '{route[:200]}'") from None


rollouts_router = APIRouter(prefix="/ui/rollouts")


@rollouts_router.get("")
async def every_route(
    principal: Annotated[Principal, Depends(admin_page)],
    parts: Annotated[ConsoleParts, Depends(console_parts)],
) -> HTMLResponse:
    states = [state_json(s, parts.routes) for s in parts.rollouts.states().values()]
    note = (
        ""
        if parts.rollouts.store_ok
        else '<p class="problem" role="alert">The store cannot be reached: what is shown '
        "may be stale.</p>"
    )
    return page(
        title="Rollouts",
        principal=principal,
        csrf=parts.auth.csrf_token(principal),
        active="rollouts",
        body=note + overview(states, guard_summary(parts)),
    )


async def _forecast(
    request: Request,
    route: str,
    state: RolloutState,
    events: list[dict[str, Any]],
    verdicts: list[dict[str, Any]],
) -> dict[str, Any] | None:
    """The admin API's `eta` of a running rollout (None when not running or not known)."""
    rollout_parts: RolloutParts | None = getattr(request.app.state, "rollout_parts", None)
    if rollout_parts is None or not events:
        return None
    try:
        return await rollout_forecast(rollout_parts, route, state, events, verdicts)
    except StoreUnavailableError:
        return None


@rollouts_router.get("/{route}")
async def one_route(
    route: str,
    request: Request,
    principal: Annotated[Principal, Depends(admin_page)],
    parts: Annotated[ConsoleParts, Depends(console_parts)],
    done: str = "",
) -> HTMLResponse:
    state = _known(parts, route)
    warnings = [p.message for p in rollout_warnings(parts.config(), route)]
    problem = None
    try:
        events, verdicts, remembered = await asyncio.to_thread(_history, parts, route)
        transitions, rollbacks = await asyncio.to_thread(
            _rollback_views, parts, route, events, verdicts
        )
    except StoreUnavailableError as exc:
        log.warning("console: rollout history unavailable: %s", exc)
        events, verdicts, remembered, transitions, rollbacks = [], [], [], [], []
        problem = "The store cannot be reached: history, verdicts and evidence are missing."
    spec = parts.config().routes.get(route)
    offline = (
        await asyncio.to_thread(
            offline_status, parts.eval_runs, spec, events, state.rollout_id, datetime.now(UTC)
        )
        if spec is not None
        else {"required": False}
    )
    if remembered and state.rollout_id:
        warnings += [w for w in remembered if w not in warnings]
    forecast = await _forecast(request, route, state, events, verdicts)
    body = route_page(
        {**state_json(state, parts.routes), "eta": forecast},
        verdicts=verdicts,
        offline=offline,
        transitions=transitions,
        rollbacks=rollbacks,
        warnings=warnings,
        available=available_actions(state, parts),
        guard=guard_summary(parts).get(route),
        done=DONE.get(done),
        problem=problem,
    )
    return page(
        title=f"Rollout of {route}",
        principal=principal,
        csrf=parts.auth.csrf_token(principal),
        active="rollouts",
        body=body,
    )


@rollouts_router.get("/{route}/confirm")
async def confirm(
    route: str,
    principal: Annotated[Principal, Depends(admin_page)],
    parts: Annotated[ConsoleParts, Depends(console_parts)],
    action: str = "",
) -> HTMLResponse:
    state = _known(parts, route)
    if action not in BUTTONS:
        raise ConsoleRefusal(404, f"no console action '{action[:50]}'")
    spec = parts.config().routes.get(route)
    body = confirm_page(
        route,
        action,
        parts.auth.csrf_token(principal),
        state_json(state, parts.routes),
        has_fallback=spec is not None and spec.fallback is not None,
    )
    return page(
        title=f"{action.capitalize()} {route}?",
        principal=principal,
        csrf=parts.auth.csrf_token(principal),
        active="rollouts",
        body=body,
    )


@rollouts_router.post("/{route}/{action}")
async def act(
    route: str,
    action: str,
    request: Request,
    principal: Annotated[Principal, Depends(admin_page)],
    parts: Annotated[ConsoleParts, Depends(console_parts)],
) -> RedirectResponse:
    if action not in BUTTONS:
        raise ConsoleRefusal(404, f"no console action '{action[:50]}'")
    form = await read_form(request, ("csrf", "confirm", "reason", "to"))
    if not parts.auth.csrf_ok(principal, form.get("csrf")):
        raise ConsoleRefusal(403, "the form's CSRF token is missing or wrong: reload the page")
    _known(parts, route)
    if form.get("confirm") != action:
        raise ConsoleRefusal(400, f"confirm the {action} on its confirmation page first")
    reason = form.get("reason", "").strip()
    if not reason or len(reason) > MAX_REASON_CHARS:
        raise ConsoleRefusal(400, f"give a reason of 1 to {MAX_REASON_CHARS} characters")
    to: RollbackTarget | None = None
    if "to" in form:
        if action != "rollback" or form["to"] not in ("primary", "fallback"):
            raise ConsoleRefusal(400, "'to' is a rollback's, 'primary' or 'fallback'")
        to = "primary" if form["to"] == "primary" else "fallback"
    try:
        await parts.rollouts.act(
            route,
            Action(action),
            reason=reason,
            actor=f"console:{principal.reviewer_id}",
            to=to,
        )
    except IllegalTransition as exc:
        raise ConsoleRefusal(409, str(exc)) from exc
    except TransitionConflictError as exc:
        raise ConsoleRefusal(409, f"the route changed meanwhile: {exc}") from exc
    except StoreUnavailableError as exc:
        raise ConsoleRefusal(503, f"nothing changed, the store cannot be reached: {exc}") from exc
    return RedirectResponse(f"{route_link(route)}?done={action}", 303, headers=security_headers())
