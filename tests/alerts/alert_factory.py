"""A fully populated Alert for tests (override any field), and a firing Alertmanager webhook
payload for route `bot`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from alerts.alert import Alert

STARTS = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


def make_alert(**overrides: Any) -> Alert:
    """A rule-regression alert with every field filled; override any of them."""
    fields: dict[str, Any] = {
        "kind": "rule_regression",
        "route": "support-bot",
        "target": "cand-a",
        "severity": "critical",
        "summary": "cand-a keeps answering max_weight=100 after shipping-policy v2",
        "starts_at": STARTS,
        "rule": "shipping-policy",
        "rule_version": "v2",
        "check": "max-weight",
        "evidence": {"candidate_pass_rate": 0.8, "primary_pass_rate": 0.98, "samples": 120},
        "example_request_ids": ("r1", "r2", "r3"),
        "generator_url": "http://127.0.0.1:8080/admin/rollouts/support-bot",
        "rollout_id": "5f1d0c2a9b3e4d6f",
    }
    fields.update(overrides)
    return Alert(**fields)


ALERTMANAGER_PAYLOAD: dict[str, Any] = {
    # Alertmanager's webhook (version 4): one firing alert labelled for route `bot`.
    "version": "4",
    "groupKey": '{}:{alertname="MirrorgateCanaryErrors"}',
    "truncatedAlerts": 0,
    "status": "firing",
    "receiver": "mirrorgate",
    "groupLabels": {"alertname": "MirrorgateCanaryErrors"},
    "commonLabels": {},
    "commonAnnotations": {},
    "externalURL": "http://127.0.0.1:9093",
    "alerts": [
        {
            "status": "firing",
            "labels": {"alertname": "MirrorgateCanaryErrors", "mirrorgate_route": "bot"},
            "annotations": {"summary": "canary error rate 40%"},
            "startsAt": "2026-11-29T12:00:00.123456789Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://127.0.0.1:9090/graph",
            "fingerprint": "1a30ba71cca2921f",
        }
    ],
}
