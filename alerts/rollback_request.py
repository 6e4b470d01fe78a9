"""From inbound Alertmanager alerts to rollback requests: a pure decision.

`decide_rollbacks` is pure (no I/O, no clock): firing alerts labelled `mirrorgate_route` (and
`mirrorgate_action: rollback`, the default, or `mirrorgate_action: fallback`) become
`RollbackRequest`s; everything else is skipped with a reason. `rollback` follows the route's
`canary.rollback_to` (default: the canary to 0 %, the primary serves); `fallback` leaves the
primary itself: the whole route moves to its fallback. Resolved alerts are always skipped:
mirrorgate never re-promotes on an alert.

Each request carries its idempotency key, (fingerprint, startsAt): Alertmanager re-sends a firing
group every `repeat_interval`, retries failed deliveries and, in a cluster, several peers may
deliver the same notification. Whoever acts on the requests remembers the keys it acted on, where
every replica and a restart see them, and skips a key it has seen.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from alerts.alertmanager_push import ORIGIN_LABEL, ORIGIN_VALUE
from alerts.alertmanager_webhook import AlertmanagerPayload, InboundAlert

ROUTE_LABEL = "mirrorgate_route"
ACTION_LABEL = "mirrorgate_action"
DEFAULT_ACTION = "rollback"
FALLBACK_ACTION = "fallback"
SUPPORTED_ACTIONS = frozenset({DEFAULT_ACTION, FALLBACK_ACTION})


@dataclass(frozen=True, slots=True)
class RollbackRequest:
    """A request to roll `route` back, caused by one firing Alertmanager alert."""

    route: str
    fingerprint: str
    starts_at: datetime
    alertname: str
    summary: str
    """The alert's `summary` annotation (or `description`), for the transition's reason text."""
    to: Literal["primary", "fallback"] | None = None
    """The rollback's target: `fallback` for `mirrorgate_action: fallback`; None (the route's
    `canary.rollback_to`) for `rollback`."""

    @property
    def key(self) -> tuple[str, datetime]:
        """The idempotency key: one firing of one alert."""
        return (self.fingerprint, self.starts_at)

    @property
    def reason(self) -> str:
        return f"alertmanager: {self.alertname or 'alert'} ({self.fingerprint})"


@dataclass(frozen=True, slots=True)
class SkippedAlert:
    """An inbound alert that requests nothing, and why (logged and returned to the caller)."""

    fingerprint: str
    reason: str


@dataclass(frozen=True, slots=True)
class RollbackDecision:
    requests: tuple[RollbackRequest, ...]
    skipped: tuple[SkippedAlert, ...]


def decide_rollbacks(
    payload: AlertmanagerPayload, known_routes: Collection[str] | None = None
) -> RollbackDecision:
    """Which routes the payload asks to roll back. `known_routes` (config route names), when given,
    skips alerts naming any other route. Duplicates inside one payload yield one request."""
    requests: dict[tuple[str, datetime], RollbackRequest] = {}
    skipped: list[SkippedAlert] = []
    for alert in payload.alerts:
        reason = _skip_reason(alert, known_routes)
        if reason is not None:
            skipped.append(SkippedAlert(alert.fingerprint, reason))
            continue
        request = RollbackRequest(
            route=alert.labels[ROUTE_LABEL],
            fingerprint=alert.fingerprint,
            starts_at=alert.starts_at,
            alertname=alert.alertname,
            summary=alert.annotations.get("summary") or alert.annotations.get("description", ""),
            to="fallback" if alert.labels.get(ACTION_LABEL) == FALLBACK_ACTION else None,
        )
        requests.setdefault(request.key, request)
    return RollbackDecision(tuple(requests.values()), tuple(skipped))


def _skip_reason(alert: InboundAlert, known_routes: Collection[str] | None) -> str | None:
    route = alert.labels.get(ROUTE_LABEL)
    if not route:
        return f"no {ROUTE_LABEL} label"
    if alert.status == "resolved":
        return "resolved: mirrorgate never re-promotes on an alert"
    if alert.labels.get(ORIGIN_LABEL) == ORIGIN_VALUE:
        return "mirrorgate's own alert, routed back: not acted on"
    action = alert.labels.get(ACTION_LABEL, DEFAULT_ACTION)
    if action not in SUPPORTED_ACTIONS:
        return f"unsupported {ACTION_LABEL} {action!r}"
    if known_routes is not None and route not in known_routes:
        return f"unknown route {route!r}"
    return None
