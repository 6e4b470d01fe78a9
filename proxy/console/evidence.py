"""The answers behind a rollback or a guard switch: for each example request the judge or the
guard persisted with the transition, the answer that failed, the checks it failed, and an answer
to compare it with (blocking: call on a worker thread).

The answer to compare with is, in order: another arm's answer to the same request (a shadow of
the primary shares its request id), else — for a canary's failure — the baseline's newest answer
to an identical conversation (the same messages, whatever model and options the gateway sent
each target) on the same rule version within an hour of it (the canary took the request, so the
primary never saw that one; the same messages are the same question), else none.
`ExampleEvidence.same_request` says which it is, and the page says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

import orjson

from proxy.core import Arm, CheckRecord, ExchangeRecord
from proxy.store import Store

MAX_EXAMPLES = 5
COMPARABLE_WINDOW = timedelta(hours=1)
COMPARABLE_SCAN = 500
"""At most this many of the baseline's answers around the failing one are scanned for an
identical request."""


@dataclass(frozen=True, slots=True)
class ExampleEvidence:
    """One example request of a rollback or switch."""

    request_id: str
    failing: ExchangeRecord | None
    """The answer that failed (None: the store no longer holds it)."""
    failed_checks: tuple[CheckRecord, ...]
    other: ExchangeRecord | None
    """The answer to compare with (see the module docstring), or None."""
    other_checks: tuple[CheckRecord, ...]
    same_request: bool
    """`other` answered this very request (a shadow), not an identical one."""


def _failing(
    exchanges: Sequence[ExchangeRecord], checks: Sequence[CheckRecord]
) -> ExchangeRecord | None:
    failed = {(c.arm, c.target) for c in checks if c.result != "pass"}
    for exchange in exchanges:
        if (exchange.arm, exchange.target) in failed:
            return exchange
    served = [e for e in exchanges if e.arm in (Arm.CANARY, Arm.PRIMARY, Arm.FALLBACK)]
    return served[0] if served else (exchanges[0] if exchanges else None)


def conversation_of(request_body: str | None) -> object:
    """What a request asks, whichever model it was sent to: its messages (and Anthropic's
    `system`), without the `model` and options the gateway set per target. None: not stored
    or not JSON."""
    if request_body is None:
        return None
    try:
        body = orjson.loads(request_body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict) or "messages" not in body:
        return None
    return [body.get("system"), body["messages"]]


def _comparable(store: Store, failing: ExchangeRecord) -> ExchangeRecord | None:
    """The primary's newest answer to an identical request near a canary's failing one."""
    asked = conversation_of(failing.request_body)
    if failing.arm is not Arm.CANARY or asked is None:
        return None
    nearby = store.query(
        route=failing.route,
        arm=Arm.PRIMARY,
        since=failing.started_at - COMPARABLE_WINDOW,
        until=failing.started_at + COMPARABLE_WINDOW,
        limit=COMPARABLE_SCAN,
        newest_first=True,
    )
    for exchange in nearby:
        if (
            exchange.rule_version == failing.rule_version
            and conversation_of(exchange.request_body) == asked
            and exchange.response_text is not None
        ):
            return exchange
    return None


def example_evidence(store: Store, route: str, request_ids: Sequence[str]) -> list[ExampleEvidence]:
    """The evidence of each of `request_ids` (at most MAX_EXAMPLES) on `route`."""
    found = []
    for request_id in list(dict.fromkeys(request_ids))[:MAX_EXAMPLES]:
        exchanges = store.query(route=route, request_id=request_id, limit=20)
        checks = store.query_checks(route=route, request_id=request_id, limit=200)
        failing = _failing(exchanges, checks)
        others = [e for e in exchanges if failing is not None and e is not failing]
        other = others[0] if others else None
        same = other is not None
        if other is None and failing is not None:
            other = _comparable(store, failing)
        other_checks: tuple[CheckRecord, ...] = ()
        if other is not None:
            rows = checks if same else store.query_checks(route=route, request_id=other.request_id)
            other_checks = tuple(c for c in rows if (c.arm, c.target) == (other.arm, other.target))
        failed = tuple(
            c
            for c in checks
            if failing is not None
            and (c.arm, c.target) == (failing.arm, failing.target)
            and c.result != "pass"
        )
        found.append(ExampleEvidence(request_id, failing, failed, other, other_checks, same))
    return found
