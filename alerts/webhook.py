"""Generic webhook sink: POST the alert's schema-versioned JSON (`Alert.to_webhook_json`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx

from alerts.alert import Alert
from alerts.sink import post_json


@dataclass(frozen=True, slots=True)
class WebhookSink:
    """POSTs `Alert.to_webhook_json()` to `url` with the configured `headers`."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    name: str = "webhook"

    async def send(self, alert: Alert, client: httpx.AsyncClient) -> None:
        await post_json(client, self.name, self.url, alert.to_webhook_json(), self.headers)
