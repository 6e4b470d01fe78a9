"""Parsing the inbound Alertmanager webhook payload (version 4)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from alerts.alertmanager_webhook import (
    MAX_ALERTS,
    MAX_PAYLOAD_BYTES,
    parse_document,
    parse_payload,
)
from alerts.errors import PayloadError

# Shaped like Alertmanager 0.25's webhook body, with Go's nanosecond timestamps.
GOOD: dict[str, Any] = {
    "version": "4",
    "groupKey": '{}:{alertname="SupportBotRuleFail"}',
    "truncatedAlerts": 0,
    "status": "firing",
    "receiver": "mirrorgate",
    "groupLabels": {"alertname": "SupportBotRuleFail"},
    "commonLabels": {"alertname": "SupportBotRuleFail", "mirrorgate_route": "support-bot"},
    "commonAnnotations": {"summary": "max-weight failing on canary"},
    "externalURL": "http://127.0.0.1:9093",
    "alerts": [
        {
            "status": "firing",
            "labels": {
                "alertname": "SupportBotRuleFail",
                "mirrorgate_route": "support-bot",
                "mirrorgate_action": "rollback",
                "severity": "critical",
            },
            "annotations": {"summary": "max-weight failing on canary"},
            "startsAt": "2025-03-01T12:00:00.123456789+02:00",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://127.0.0.1:9090/graph?g0.expr=x",
            "fingerprint": "1a30ba71cca2921f",
        },
        {
            "status": "resolved",
            "labels": {"alertname": "Other"},
            "annotations": {},
            "startsAt": "2025-03-01T11:00:00Z",
            "endsAt": "2025-03-01T11:30:00Z",
            "generatorURL": "",
            "fingerprint": "fbab788ec4c1018b",
        },
    ],
}


def test_good_payload_parses_into_frozen_alerts() -> None:
    payload = parse_payload(json.dumps(GOOD).encode())
    assert payload.version == "4" and payload.status == "firing"
    assert payload.receiver == "mirrorgate" and payload.external_url == "http://127.0.0.1:9093"
    assert payload.common_labels["mirrorgate_route"] == "support-bot"
    first, second = payload.alerts
    assert first.status == "firing" and first.fingerprint == "1a30ba71cca2921f"
    assert first.alertname == "SupportBotRuleFail"
    assert first.starts_at == datetime(2025, 3, 1, 10, 0, 0, 123456, tzinfo=UTC)
    assert first.starts_at.utcoffset() == timedelta(hours=2)
    assert first.ends_at is None  # Go's zero time
    assert second.status == "resolved"
    assert second.ends_at == datetime(2025, 3, 1, 11, 30, tzinfo=UTC)
    with pytest.raises(TypeError):
        first.labels["mirrorgate_route"] = "x"  # type: ignore[index]


def test_optional_group_fields_may_be_absent() -> None:
    minimal = {"version": "4", "status": "firing", "alerts": []}
    payload = parse_document(minimal)
    assert payload.alerts == () and payload.group_labels == {} and payload.truncated_alerts == 0


def _with(path: list[Any], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(GOOD)
    target: Any = doc
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


_DELETE = object()


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ([1, 2], "body"),
        ("firing", "body"),
        (_with(["version"], _DELETE), "version"),
        (_with(["version"], "3"), "version"),
        (_with(["version"], 4), "version"),
        (_with(["status"], "pending"), "status"),
        (_with(["alerts"], _DELETE), "alerts"),
        (_with(["alerts"], {"0": {}}), "alerts"),
        (_with(["alerts"], [{"status": "firing"}] * (MAX_ALERTS + 1)), "alerts"),
        (_with(["truncatedAlerts"], -1), "truncatedAlerts"),
        (_with(["groupLabels"], ["alertname"]), "groupLabels"),
        (_with(["commonLabels", "severity"], 3), "commonLabels.severity"),
        (_with(["externalURL"], 9093), "externalURL"),
        (_with(["alerts", 0], "firing"), "alerts[0]"),
        (_with(["alerts", 1, "status"], "ok"), "alerts[1].status"),
        (_with(["alerts", 0, "status"], _DELETE), "alerts[0].status"),
        (_with(["alerts", 0, "labels"], _DELETE), "alerts[0].labels"),
        (_with(["alerts", 0, "labels"], "a=b"), "alerts[0].labels"),
        (
            _with(["alerts", 0, "labels", "mirrorgate_route"], None),
            "alerts[0].labels.mirrorgate_route",
        ),
        (_with(["alerts", 0, "annotations", "summary"], ["x"]), "alerts[0].annotations.summary"),
        (_with(["alerts", 0, "startsAt"], _DELETE), "alerts[0].startsAt"),
        (_with(["alerts", 0, "startsAt"], "yesterday"), "alerts[0].startsAt"),
        (_with(["alerts", 0, "startsAt"], "2025-03-01T12:00:00"), "alerts[0].startsAt"),
        (_with(["alerts", 0, "startsAt"], "0001-01-01T00:00:00Z"), "alerts[0].startsAt"),
        (_with(["alerts", 0, "endsAt"], 5), "alerts[0].endsAt"),
        (_with(["alerts", 0, "fingerprint"], _DELETE), "alerts[0].fingerprint"),
        (_with(["alerts", 0, "fingerprint"], ""), "alerts[0].fingerprint"),
        (_with(["alerts", 0, "labels", "x"], "y" * 20_000), "alerts[0].labels.x"),
    ],
)
def test_malformed_payload_names_the_field(doc: Any, field: str) -> None:
    with pytest.raises(PayloadError) as info:
        parse_payload(json.dumps(doc))
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")


@pytest.mark.parametrize("body", [b"", b"{", b"\xff\xfe", b"null"])
def test_undecodable_body_is_a_body_error(body: bytes) -> None:
    with pytest.raises(PayloadError) as info:
        parse_payload(body)
    assert info.value.field == "body"


def test_huge_payload_is_refused_before_decoding() -> None:
    body = b'{"version": "4", "pad": "' + b"x" * MAX_PAYLOAD_BYTES + b'"}'
    with pytest.raises(PayloadError, match="over the limit") as info:
        parse_payload(body)
    assert info.value.field == "body"
