"""Sinks built from their config fields by type name."""

from __future__ import annotations

import pytest

from alerts.alertmanager_push import AlertmanagerPushSink
from alerts.sink import AlertSink
from alerts.sink_types import build_sink
from alerts.slack import SlackSink
from alerts.webhook import WebhookSink


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
