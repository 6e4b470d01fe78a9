"""From inbound alerts to rollback requests: idempotent, and resolved alerts never re-promote."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

from alerts.alertmanager_webhook import AlertmanagerPayload, parse_payload
from alerts.rollback_request import (
    MemoryIdempotencyLedger,
    RollbackRequest,
    claim_new,
    decide_rollbacks,
)


def alert(
    status: str = "firing",
    starts: str = "2025-03-01T12:00:00Z",
    fingerprint: str = "aaaa",
    **labels: str,
) -> dict[str, Any]:
    return {
        "status": status,
        "labels": {"alertname": "RuleFail", "mirrorgate_route": "support-bot", **labels},
        "annotations": {"summary": "check failing"},
        "startsAt": starts,
        "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2025-03-01T12:10:00Z",
        "generatorURL": "",
        "fingerprint": fingerprint,
    }


def payload(*alerts: dict[str, Any]) -> AlertmanagerPayload:
    doc = {"version": "4", "status": alerts[0]["status"], "receiver": "mg", "alerts": list(alerts)}
    return parse_payload(json.dumps(doc))


def deliver(ledger: MemoryIdempotencyLedger, p: AlertmanagerPayload) -> tuple[RollbackRequest, ...]:
    return asyncio.run(claim_new(decide_rollbacks(p, {"support-bot"}).requests, ledger))


def test_firing_alert_requests_a_rollback_of_its_route() -> None:
    decision = decide_rollbacks(payload(alert()))
    (request,) = decision.requests
    assert request.route == "support-bot" and request.alertname == "RuleFail"
    assert request.summary == "check failing"
    assert request.reason == "alertmanager: RuleFail (aaaa)"
    assert decision.skipped == ()


def test_same_alert_delivered_five_times_gives_one_rollback() -> None:
    ledger = MemoryIdempotencyLedger()
    results = [deliver(ledger, payload(alert())) for _ in range(5)]
    assert [len(r) for r in results] == [1, 0, 0, 0, 0]
    assert len(ledger) == 1


def test_duplicates_inside_one_payload_give_one_request() -> None:
    assert len(decide_rollbacks(payload(alert(), copy.deepcopy(alert()))).requests) == 1


def test_a_new_firing_of_the_same_alert_is_a_new_request() -> None:
    ledger = MemoryIdempotencyLedger()
    assert len(deliver(ledger, payload(alert()))) == 1
    assert len(deliver(ledger, payload(alert(starts="2025-03-01T13:00:00Z")))) == 1


def test_resolved_never_re_promotes_or_requests_anything() -> None:
    ledger = MemoryIdempotencyLedger()
    assert len(deliver(ledger, payload(alert()))) == 1
    decision = decide_rollbacks(payload(alert(status="resolved")))
    assert decision.requests == ()
    assert decision.skipped[0].reason.startswith("resolved")
    # Even a fresh ledger (e.g. after a restart) gets nothing from a resolved alert.
    assert deliver(MemoryIdempotencyLedger(), payload(alert(status="resolved"))) == ()


def test_alerts_that_request_nothing_are_skipped_with_a_reason() -> None:
    no_route = alert(fingerprint="b")
    del no_route["labels"]["mirrorgate_route"]
    decision = decide_rollbacks(
        payload(
            no_route,
            alert(fingerprint="c", mirrorgate_action="promote"),
            alert(fingerprint="d", mirrorgate_origin="mirrorgate"),
            alert(fingerprint="e", mirrorgate_route="unknown-route"),
            alert(fingerprint="f", mirrorgate_route=""),
        ),
        known_routes={"support-bot"},
    )
    assert decision.requests == ()
    reasons = {s.fingerprint: s.reason for s in decision.skipped}
    assert reasons == {
        "b": "no mirrorgate_route label",
        "c": "unsupported mirrorgate_action 'promote'",
        "d": "mirrorgate's own alert, routed back: not acted on",
        "e": "unknown route 'unknown-route'",
        "f": "no mirrorgate_route label",
    }


def test_release_lets_a_redelivery_try_again() -> None:
    ledger = MemoryIdempotencyLedger()
    (request,) = deliver(ledger, payload(alert()))
    asyncio.run(ledger.release(request.key))  # e.g. the rollback transition failed to persist
    assert len(deliver(ledger, payload(alert()))) == 1


def test_ledger_is_bounded() -> None:
    ledger = MemoryIdempotencyLedger(max_keys=3)
    for i in range(5):
        deliver(ledger, payload(alert(fingerprint=f"f{i}")))
    assert len(ledger) == 3
    assert len(deliver(ledger, payload(alert(fingerprint="f4")))) == 0  # newest still remembered
