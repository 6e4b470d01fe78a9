"""Each sink's wire format, against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from alerts.alertmanager_push import AlertmanagerPushSink, postable_alert
from alerts.errors import SinkRejectedError, SinkUnavailableError
from alerts.sink import AlertSink
from alerts.sink_types import build_sink
from alerts.slack import SlackSink, slack_message
from alerts.webhook import WebhookSink
from tests.alerts.alert_factory import make_alert
from tests.alerts.recording_server import RecordedRequest, RecordingServer, refused_url


async def _send_one(sink_factory: Any, statuses: list[int] | None = None) -> RecordedRequest:
    async with RecordingServer(statuses) as server, httpx.AsyncClient() as client:
        sink = sink_factory(server.url)
        await sink.send(make_alert(), client)
        assert len(server.requests) == 1
        return server.requests[0]


def test_webhook_posts_the_schema_json_with_headers() -> None:
    request = asyncio.run(
        _send_one(lambda url: WebhookSink(url + "/hook", {"Authorization": "Bearer s3cret"}))
    )
    assert request.method == "POST"
    assert request.path == "/hook"
    assert request.headers["authorization"] == "Bearer s3cret"
    assert request.headers["content-type"] == "application/json"
    assert request.json() == make_alert().to_webhook_json()


def test_slack_message_is_readable() -> None:
    request = asyncio.run(_send_one(lambda url: SlackSink(url + "/services/T/B/X")))
    body = request.json()
    assert request.path == "/services/T/B/X"
    assert set(body) == {"text", "blocks"}
    assert "support-bot" in body["text"] and "shipping-policy@v2" in body["text"]
    rendered = str(body["blocks"])
    for fragment in (
        "support-bot",
        "cand-a",
        "shipping-policy@v2",
        "max-weight",
        "candidate_pass_rate: *0.8*",
        "primary_pass_rate: *0.98*",
        "samples: *120*",
        "`r1`, `r2`, `r3`",
    ):
        assert fragment in rendered, fragment
    assert body["blocks"][0]["type"] == "header"


def test_slack_escapes_control_characters_in_free_text() -> None:
    body = slack_message(make_alert(summary="<!channel> & friends"))
    assert "&lt;!channel&gt; &amp; friends" in body["blocks"][1]["text"]["text"]


def test_alertmanager_push_v2_format() -> None:
    request = asyncio.run(_send_one(lambda url: AlertmanagerPushSink(url + "/")))
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
    assert "generatorURL" not in body


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (500, SinkUnavailableError),
        (503, SinkUnavailableError),
        (429, SinkUnavailableError),
        (400, SinkRejectedError),
        (404, SinkRejectedError),
    ],
)
def test_http_errors_become_sink_errors(status: int, error: type[Exception]) -> None:
    with pytest.raises(error) as info:
        asyncio.run(_send_one(lambda url: WebhookSink(url), [status]))
    assert getattr(info.value, "status", None) == status


def test_connection_refused_is_unavailable() -> None:
    async def run(url: str) -> None:
        async with httpx.AsyncClient() as client:
            await WebhookSink(url).send(make_alert(), client)

    with refused_url() as url, pytest.raises(SinkUnavailableError, match="webhook: ConnectError"):
        asyncio.run(run(url))


@pytest.mark.parametrize(
    ("type_", "cls"),
    [("webhook", WebhookSink), ("slack", SlackSink), ("alertmanager", AlertmanagerPushSink)],
)
def test_build_sink_from_config_fields(type_: str, cls: type) -> None:
    sink = build_sink(type_, "http://127.0.0.1:9", {"X-Token": "t"})
    assert isinstance(sink, cls) and isinstance(sink, AlertSink)
    assert sink.name == type_


def test_build_sink_rejects_unknown_type() -> None:
    with pytest.raises(ValueError, match=r"^type:"):
        build_sink("pagerduty", "http://127.0.0.1:9")
