"""The Alertmanager push sink: the v2 API's format, labels that never carry free text."""

from __future__ import annotations

import asyncio

from alerts.alertmanager_push import AlertmanagerPushSink, postable_alert
from tests.alerts.alert_factory import make_alert
from tests.alerts.recording_server import send_one


def test_alertmanager_push_v2_format() -> None:
    request = asyncio.run(send_one(lambda url: AlertmanagerPushSink(url + "/")))
    assert request.path == "/api/v2/alerts"
    body = request.json()
    assert isinstance(body, list) and len(body) == 1
    alert = make_alert()
    assert body[0] == {
        "labels": {
            "alertname": "MirrorgateRuleRegression",
            "severity": "critical",
            "mirrorgate_kind": "rule_regression",
            "mirrorgate_route": "support-bot",
            "mirrorgate_target": "cand-a",
            "mirrorgate_origin": "mirrorgate",
            "mirrorgate_rule": "shipping-policy",
            "mirrorgate_rule_version": "v2",
            "mirrorgate_check": "max-weight",
            "mirrorgate_rollout_id": "5f1d0c2a9b3e4d6f",
        },
        "annotations": {
            "summary": alert.summary,
            "description": alert.summary
            + "\nEvidence: candidate_pass_rate=0.8, primary_pass_rate=0.98, samples=120"
            + "\nExample request ids: r1, r2, r3",
            "mirrorgate_fingerprint": alert.fingerprint,
        },
        "startsAt": "2025-03-01T12:00:00+00:00",
        "generatorURL": "http://127.0.0.1:8080/admin/rollouts/support-bot",
    }


def test_alertmanager_labels_never_carry_free_text_or_empty_values() -> None:
    alert = make_alert(
        kind="verdict_fail",
        rule=None,
        rule_version=None,
        check=None,
        summary="p95 latency up 50%",
        generator_url=None,
    )
    body = postable_alert(alert)
    assert alert.summary not in body["labels"].values()
    assert "mirrorgate_rule" not in body["labels"] and "mirrorgate_check" not in body["labels"]
    assert all(body["labels"].values())
    assert "mirrorgate_rolled_back_to" not in body["labels"]
    assert "generatorURL" not in body
    rolled = postable_alert(make_alert(kind="rollback", rolled_back_to="fallback"))
    assert rolled["labels"]["mirrorgate_rolled_back_to"] == "fallback"
