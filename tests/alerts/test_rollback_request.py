"""From inbound alerts to rollback requests: idempotent, and resolved alerts never re-promote."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

from alerts.alertmanager_webhook import AlertmanagerPayload, parse_payload
from alerts.rollback_request import RollbackRequest, decide_rollbacks

Seen = set[tuple[str, datetime]]
"""The keys acted on: what the proxy's store remembers for every replica (a plain fake here)."""


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


def deliver(seen: Seen, p: AlertmanagerPayload) -> tuple[RollbackRequest, ...]:
    """The requests of one delivery that are acted on: those whose key was not seen before."""
    new = [r for r in decide_rollbacks(p, {"support-bot"}).requests if r.key not in seen]
    seen.update(r.key for r in new)
    return tuple(new)


def test_firing_alert_requests_a_rollback_of_its_route() -> None:
    decision = decide_rollbacks(payload(alert()))
    (request,) = decision.requests
    assert request.route == "support-bot" and request.alertname == "RuleFail"
    assert request.summary == "check failing"
    assert request.reason == "alertmanager: RuleFail (aaaa)"
    assert request.key == ("aaaa", datetime(2025, 3, 1, 12, tzinfo=UTC))  # one firing of one alert
    assert request.to is None  # the route's canary.rollback_to decides
    assert decision.skipped == ()


def test_the_action_label_chooses_the_rollback_target() -> None:
    decision = decide_rollbacks(
        payload(
            alert(fingerprint="a", mirrorgate_action="rollback"),
            alert(fingerprint="b", mirrorgate_action="fallback"),
        )
    )
    assert {r.fingerprint: r.to for r in decision.requests} == {"a": None, "b": "fallback"}


def test_same_alert_delivered_five_times_gives_one_rollback() -> None:
    seen: Seen = set()
    results = [deliver(seen, payload(alert())) for _ in range(5)]
    assert [len(r) for r in results] == [1, 0, 0, 0, 0]
    assert len(seen) == 1


def test_duplicates_inside_one_payload_give_one_request() -> None:
    assert len(decide_rollbacks(payload(alert(), copy.deepcopy(alert()))).requests) == 1


def test_a_new_firing_of_the_same_alert_is_a_new_request() -> None:
    seen: Seen = set()
    assert len(deliver(seen, payload(alert()))) == 1
    assert len(deliver(seen, payload(alert(starts="2025-03-01T13:00:00Z")))) == 1


def test_resolved_never_re_promotes_or_requests_anything() -> None:
    seen: Seen = set()
    assert len(deliver(seen, payload(alert()))) == 1
    decision = decide_rollbacks(payload(alert(status="resolved")))
    assert decision.requests == ()
    assert decision.skipped[0].reason.startswith("resolved")
    # With nothing remembered (a fresh store, say), a resolved alert still requests nothing.
    assert deliver(set(), payload(alert(status="resolved"))) == ()


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
