from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta

import pytest

from tests.alerts.alert_factory import STARTS, make_alert


def test_fingerprint_ignores_numbers_text_and_time() -> None:
    a = make_alert()
    b = make_alert(
        summary="other words",
        evidence={"candidate_pass_rate": 0.5},
        starts_at=STARTS + timedelta(minutes=3),
        example_request_ids=("x",),
    )
    assert a.fingerprint == b.fingerprint
    assert len(a.fingerprint) == 16


@pytest.mark.parametrize(
    "change",
    [
        {"kind": "rollback"},
        {"route": "other"},
        {"target": "cand-b"},
        {"rule": "other-rule"},
        {"rule_version": "v3"},
        {"check": "valid-json"},
        {"rollout_id": "a-new-rollout"},
        {"rollout_id": None},
        {"rolled_back_to": "fallback"},
    ],
)
def test_fingerprint_changes_with_identity(change: dict[str, str]) -> None:
    assert make_alert(**change).fingerprint != make_alert().fingerprint


def test_example_ids_are_capped_at_five() -> None:
    alert = make_alert(example_request_ids=tuple(f"r{i}" for i in range(9)))
    assert alert.example_request_ids == ("r0", "r1", "r2", "r3", "r4")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"kind": "meltdown"}, "kind"),
        ({"severity": "page"}, "severity"),
        ({"route": ""}, "route"),
        ({"target": ""}, "target"),
        ({"starts_at": datetime(2025, 1, 1)}, "starts_at"),
        ({"evidence": {"rate": float("nan")}}, "evidence.rate"),
        ({"evidence": {"flag": True}}, "evidence.flag"),
        ({"evidence": {"rate": "0.8"}}, "evidence.rate"),
    ],
)
def test_invalid_alert_names_the_field(change: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field}:"):
        make_alert(**change)


def test_evidence_is_read_only() -> None:
    alert = make_alert()
    with pytest.raises(TypeError):
        alert.evidence["samples"] = 1  # type: ignore[index]


def test_webhook_json_schema_version_1() -> None:
    alert = make_alert()
    body = alert.to_webhook_json()
    assert body == {
        "version": 1,
        "source": "mirrorgate",
        "fingerprint": alert.fingerprint,
        "kind": "rule_regression",
        "severity": "critical",
        "route": "support-bot",
        "target": "cand-a",
        "rule": "shipping-policy",
        "rule_version": "v2",
        "check": "max-weight",
        "rollout_id": "5f1d0c2a9b3e4d6f",
        "rolled_back_to": None,
        "summary": alert.summary,
        "evidence": {"candidate_pass_rate": 0.8, "primary_pass_rate": 0.98, "samples": 120},
        "example_request_ids": ["r1", "r2", "r3"],
        "starts_at": "2025-03-01T12:00:00+00:00",
        "generator_url": "http://127.0.0.1:8080/admin/rollouts/support-bot",
    }
    json.dumps(body, allow_nan=False)


def test_an_alert_about_no_rollout_keeps_the_fingerprint_of_its_condition() -> None:
    alert = make_alert(rollout_id=None)
    key = [alert.kind, alert.route, alert.target, alert.rule, alert.rule_version, alert.check]
    expected = hashlib.sha256(json.dumps(key, separators=(",", ":")).encode()).hexdigest()[:16]
    assert alert.fingerprint == expected
    assert alert.to_webhook_json()["rollout_id"] is None


def test_webhook_json_keeps_absent_fields_as_null() -> None:
    body = make_alert(
        kind="verdict_fail", rule=None, rule_version=None, check=None
    ).to_webhook_json()
    assert body["rule"] is None and body["rule_version"] is None and body["check"] is None
