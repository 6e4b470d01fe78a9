"""The webhook sink posts the alert's JSON schema, with the configured headers."""

from __future__ import annotations

import asyncio

from alerts.webhook import WebhookSink
from tests.alerts.alert_factory import make_alert
from tests.alerts.recording_server import send_one


def test_webhook_posts_the_schema_json_with_headers() -> None:
    request = asyncio.run(
        send_one(lambda url: WebhookSink(url + "/hook", {"Authorization": "Bearer s3cret"}))
    )
    assert request.method == "POST"
    assert request.path == "/hook"
    assert request.headers["authorization"] == "Bearer s3cret"
    assert request.headers["content-type"] == "application/json"
    assert request.json() == make_alert().to_webhook_json()
