"""The built-in sink types, selected by `alerts.sinks[].type` in config."""

from __future__ import annotations

from collections.abc import Mapping

from alerts.alertmanager_push import AlertmanagerPushSink
from alerts.sink import AlertSink
from alerts.slack import SlackSink
from alerts.webhook import WebhookSink

SINK_TYPES = ("webhook", "slack", "alertmanager")


def build_sink(type_: str, url: str, headers: Mapping[str, str] | None = None) -> AlertSink:
    """The sink for one `alerts.sinks` entry; the proxy passes the validated spec's fields."""
    hdrs = dict(headers or {})
    if type_ == "webhook":
        return WebhookSink(url, hdrs)
    if type_ == "slack":
        return SlackSink(url, hdrs)
    if type_ == "alertmanager":
        return AlertmanagerPushSink(url, hdrs)
    raise ValueError(f"type: must be one of {SINK_TYPES}, got {type_!r}")
