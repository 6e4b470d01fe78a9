"""The access log and the upstream-failure log: what an SRE reads about each client request.

`AccessLog` is an observer of the client path's hooks. For each client request it writes one
INFO line on `mirrorgate.access` (request id, route, arm, target, our status and the HTTP status,
duration, TTFT, tokens, cost, streamed; never a body, a header or a secret), also for a request
refused before it had a route. `server.access_log_sample` keeps that share of the successful
requests; a request that ended in an error is always logged. A request sampled out costs one
random draw: the line's fields are only gathered for lines that are written.

Every upstream failure of the client path (unreachable, timed out, garbage, a 5xx, or any
attempt abandoned for the fallback) is one WARNING on `mirrorgate.upstream` naming its error
class and its target: once per attempt, so at most twice per request (the primary, then its
fallback).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

from proxy.core import CUT_SHORT, ExchangeRecord, Status
from proxy.observability import access_fields, log_fields

from .hooks import ExchangeObserver, FinishedExchange, RefusedRequest

access_log = logging.getLogger("mirrorgate.access")
upstream_log = logging.getLogger("mirrorgate.upstream")

FAILED = frozenset({Status.CONNECT_ERROR, Status.TIMEOUT, Status.INVALID_RESPONSE})
"""The upstream's failures that the gateway answers itself (502, 504, or a stream's error event)."""

MAX_REASON_CHARS = 200
"""An error class or a refusal's reason is cut to this length in a log line."""


def _is_error(record: ExchangeRecord) -> bool:
    return record.status is not Status.OK or record.http_status >= 400


def _upstream_failed(record: ExchangeRecord) -> bool:
    return record.status in FAILED or (
        record.status is Status.UPSTREAM_ERROR and record.http_status >= 500
    )


class AccessLog(ExchangeObserver):
    """Writes the access line of each client request and warns of each upstream failure."""

    def __init__(self, sample: float = 1.0, draw: Callable[[], float] = random.random) -> None:
        """`sample`: `server.access_log_sample`; `draw`: a uniform number in [0, 1) per request
        (tests pass their own)."""
        self.sample = sample
        self.draw = draw

    def exchange_finished(self, done: FinishedExchange) -> None:
        record = done.record
        failed = not done.final or _upstream_failed(record)
        if failed and record.status not in CUT_SHORT:
            upstream_log.warning(
                "request %s: %s %s failed: %s%s",
                record.request_id,
                record.arm.value,
                record.target,
                (record.error_class or record.status.value)[:MAX_REASON_CHARS],
                "; trying the fallback" if not done.final else "",
                extra={
                    "request_id": record.request_id,
                    "route": record.route,
                    "arm": record.arm.value,
                    "target": record.target,
                    "status": record.status.value,
                    "http_status": record.http_status,
                    "error_class": (record.error_class or "")[:MAX_REASON_CHARS] or None,
                },
            )
        if not done.final:
            return
        if not _is_error(record) and self.sample < 1.0 and self.draw() >= self.sample:
            return
        if not access_log.isEnabledFor(logging.INFO):
            return
        log_fields(
            access_log,
            logging.INFO,
            "%s %s %s -> %d %s",
            (record.endpoint, record.route, record.target, record.http_status, record.status.value),
            access_fields(record),
        )

    def request_refused(self, refusal: RefusedRequest) -> None:
        if not access_log.isEnabledFor(logging.INFO):
            return
        error = refusal.error
        log_fields(
            access_log,
            logging.INFO,
            "%s refused -> %d",
            (refusal.endpoint.name, error.status),
            {
                "request_id": refusal.request_id,
                "endpoint": refusal.endpoint.name,
                "status": "refused",
                "http_status": error.status,
                "duration_ms": round(refusal.duration_s * 1000, 1),
                "error_class": type(error).__name__,
                "reason": error.message[:MAX_REASON_CHARS],
            },
        )
