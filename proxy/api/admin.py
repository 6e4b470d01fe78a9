"""The admin API (`/admin/...`): what the gateway knows about its routes and rule versions.

Every admin call needs `Authorization: Bearer <token>`, the token being the value of the variable
named by `server.admin_token_env`. Without that variable the admin API is open, which the config
loader allows only on a loopback address. Tokens are compared in constant time. A call that
changes something also passes `StateChangeGuard` (proxy/api/doors.py), token or not: its `Host`
and `Origin` name this gateway (else 403), and its body is JSON (else 415).
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from analyzers.adaptation import adaptation_score
from proxy.config import RuleSpec
from proxy.core import AuthError, ForbiddenError, NotFound, RequestError, parse_since
from proxy.gateway import RouteTable, RuleTracker, read_body
from proxy.store import ProbeStore, RuleEventStore, StoreUnavailableError

from .doors import StateChangeGuard
from .errors import store_unavailable
from .rule_templates import rule_templates


class AdminAuth:
    """Checks admin and webhook calls: `guard`'s `Host` and `Origin` check first (a rebound
    name is refused even when it carries a token), then the bearer token, then `guard`'s JSON
    check."""

    def __init__(self, token_env: str, env: Mapping[str, str], guard: StateChangeGuard) -> None:
        token = env.get(token_env) or ""
        self._token = token.encode()
        self.token_env = token_env
        self.guard = guard

    def __call__(self, request: Request) -> None:
        self.guard.refuse_foreign(request, reads=True)
        self._check_token(request)
        self.guard.refuse_non_json(request)

    def _check_token(self, request: Request) -> None:
        if not self._token:
            return
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given:
            raise AuthError(f"admin calls need 'Authorization: Bearer <{self.token_env}>'")
        if not hmac.compare_digest(given.strip().encode(), self._token):
            raise ForbiddenError("the admin token is not right")


async def read_limited(request: Request, limit: int, what: str) -> bytes:
    """The request body, refused with 413 (`PayloadTooLarge`) as soon as it exceeds `limit`
    bytes — by its declared length before reading, or while reading when none is declared
    (`proxy.gateway.read_body`, the proxied endpoints' reader, on this request)."""
    return await read_body(request.scope, request.receive, limit, what)


RELOAD_BODY_BYTES = 1024
"""`POST /admin/reload` takes an empty body or `{}`: anything longer is refused (413)."""


def probe_scores(
    probes: ProbeStore, rules: Sequence[str], since: datetime | None
) -> dict[str, dict[str, dict[str, object]]]:
    """rule → target → its probes' counts and context-awareness score (blocking)."""
    return {
        rule: {
            target: adaptation_score(t.followed, t.stuck, t.other).as_dict()
            for target, t in sorted(probes.tallies(rule, since=since).items())
        }
        for rule in rules
    }


@dataclass(frozen=True, slots=True)
class AdminParts:
    """What the admin API reaches of its gateway: `app.state.admin_parts`, set by the app's
    wiring. `auth` also guards the rollout, experiment and operation routes (`require_admin`).
    `reload`: reloads the configuration and gives the answer's status and body (None: the
    endpoint answers 409, there is no file to reload). `probed_rules`: the rules with `probes`
    in the running configuration, whose scores `/admin/rules` shows from `probes`."""

    auth: AdminAuth
    routes: RouteTable
    rule_events: RuleEventStore
    reload: Callable[[], Awaitable[tuple[int, dict[str, Any]]]] | None = None
    probes: ProbeStore | None = None
    probed_rules: Callable[[], Sequence[str]] = tuple
    rule_tracker: RuleTracker | None = None
    """The rule tracker: its learned templates, for `/admin/rules/templates`."""
    rule_settings: Callable[[], Mapping[str, RuleSpec]] = dict
    """The running configuration's `rules`."""
    keep_prompts: bool = True
    """Whether prompt text may be shown (`store.bodies` is not `none`)."""
    redact_prompts: bool = False
    """Whether it is shown redacted (`store.bodies: redacted`)."""


def admin_parts(request: Request) -> AdminParts:
    """The admin parts of the gateway serving `request`."""
    parts: AdminParts = request.app.state.admin_parts
    return parts


def require_admin(request: Request) -> None:
    """The dependency of every admin route: `AdminAuth` of the gateway serving `request`."""
    admin_parts(request).auth(request)


# Built once per process: the endpoints reach their gateway through the request, so FastAPI
# analyses their signatures once rather than once per gateway.
admin_router = APIRouter(prefix="/admin", dependencies=[Depends(require_admin)])


@admin_router.post("/reload")
async def reload_config(request: Request) -> JSONResponse:
    body = await read_limited(request, RELOAD_BODY_BYTES, "a reload request")
    if body.strip():
        try:
            given = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise RequestError("the body must be empty or a JSON object") from None
        if not isinstance(given, dict):
            raise RequestError("the body must be empty or a JSON object")
        if given:
            names = ", ".join(sorted(given)[:5])
            raise RequestError(f"a reload takes no fields ({names}): send {{}} or nothing")
    reload = admin_parts(request).reload
    if reload is None:
        message = "this gateway was not started from a configuration file: nothing to reload"
        return JSONResponse({"error": {"type": "conflict", "message": message}}, 409)
    status, answer = await reload()
    return JSONResponse(answer, status)


@admin_router.get("/routes")
async def list_routes(request: Request) -> dict[str, Any]:
    routes = admin_parts(request).routes
    return {
        "routes": [
            {
                "name": state.name,
                "primary": state.primary,
                "primary_arm": state.primary_arm.value,
                "config_primary": state.spec.primary,
                "overridden": state.primary != state.spec.primary,
                "fallback": state.fallback,
                "shadows": [s.model for s in state.spec.shadows],
                "canary": state.spec.canary.model if state.spec.canary else None,
                "canary_weight_percent": state.canary.weight if state.canary else 0.0,
                "phase": (
                    state.rollout.phase.value
                    if state.rollout is not None and state.rollout.phase is not None
                    else None
                ),
            }
            for state in routes.states().values()
        ]
    }


@admin_router.get("/rules/templates")
async def list_rule_templates(request: Request, rule: str | None = None) -> dict[str, Any]:
    """Each rule's versions and learned templates with their slots (`proxy.api.rule_templates`);
    `rule`: only that one."""
    parts = admin_parts(request)
    try:
        events, traffic = await asyncio.gather(
            asyncio.to_thread(parts.rule_events.events),
            asyncio.to_thread(parts.rule_events.traffic),
        )
    except StoreUnavailableError as exc:
        raise store_unavailable(exc, "the store cannot be read") from exc
    settings = parts.rule_settings()
    if rule is not None and rule not in settings and all(e.rule != rule for e in events):
        known = ", ".join(sorted(settings)[:20]) or "none"
        raise NotFound(f"no rule {rule[:100]!r} (configured: {known})")
    return rule_templates(
        events, traffic, parts.rule_tracker, settings, parts.keep_prompts, only=rule,
        redact_text=parts.redact_prompts,
    )  # fmt: skip


@admin_router.get("/rules")
async def list_rules(request: Request, since: str | None = None) -> dict[str, Any]:
    """Every rule version seen, and per probed rule and target the rule-flip probes'
    counts, adaptation and stuck rates with their 95% Wilson intervals, over all stored
    probes or those since `since` (a duration ago, `30m`, or an ISO-8601 time)."""
    start = None
    if since is not None:
        try:
            start = parse_since(since[:100], datetime.now(UTC))
        except ValueError as exc:
            raise RequestError(f"since: {exc}") from None
    parts = admin_parts(request)
    rule_events, probes = parts.rule_events, parts.probes
    probed = parts.probed_rules()
    try:
        events, traffic = await asyncio.gather(
            asyncio.to_thread(rule_events.events), asyncio.to_thread(rule_events.traffic)
        )
        scores = (
            await asyncio.to_thread(probe_scores, probes, probed, start)
            if probes is not None and probed
            else {}
        )
    except StoreUnavailableError as exc:
        raise store_unavailable(exc, "the store cannot be read") from exc
    versions = []
    for event in events:
        seen = traffic.get((event.rule, event.version))
        versions.append(
            {
                "rule": event.rule,
                "version": event.version,
                "previous_version": event.previous_version,
                "changed_at": event.first_seen_at.isoformat(),
                "first_request_id": event.request_id,
                "route": event.route,
                "prompt_diff": event.prompt_diff,
                "exchanges": seen.exchanges if seen else 0,
                "first_seen": seen.first_seen.isoformat() if seen else None,
                "last_seen": seen.last_seen.isoformat() if seen else None,
            }
        )
    return {
        "rule_versions": versions,
        "probes": scores,
        "probes_since": start.isoformat() if start is not None else None,
    }
