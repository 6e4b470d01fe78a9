"""The sink protocol, and the one place where HTTP outcomes become sink errors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

import httpx

from alerts.alert import Alert
from alerts.errors import SinkRejectedError, SinkUnavailableError

# Statuses in the 4xx range that are still transient: the request timed out, or we were rate
# limited (Slack answers 429 with Retry-After).
TRANSIENT_4XX = frozenset({408, 429})


@runtime_checkable
class AlertSink(Protocol):
    """A destination for alerts.

    `name` is the metric label (`mirrorgate_alerts_sent_total{sink=...}`); it comes from config,
    never from alert content. `send` delivers one alert using the shared `client` and returns when
    the destination accepted it. It raises `SinkUnavailableError` for failures worth retrying and
    `SinkRejectedError` for failures that are not; the dispatcher owns retries: a sink tries once.
    """

    @property
    def name(self) -> str: ...

    async def send(self, alert: Alert, client: httpx.AsyncClient) -> None: ...


async def post_json(
    client: httpx.AsyncClient,
    sink: str,
    url: str,
    body: Any,
    headers: Mapping[str, str] | None = None,
) -> None:
    """POST `body` as JSON; translate transport errors and non-2xx answers into `SinkError`s."""
    try:
        response = await client.post(url, json=body, headers=dict(headers or {}))
    except httpx.TransportError as exc:  # connect/read/write errors and timeouts
        message = str(exc).replace(url, _origin(url))
        raise SinkUnavailableError(sink, f"{type(exc).__name__}: {message}") from exc
    status = response.status_code
    if status < 300:
        return
    # Never the URL itself: a Slack incoming webhook's path is its credential.
    detail = f"HTTP {status} from {_origin(url)}: {response.text[:200]!r}"
    if status >= 500 or status in TRANSIENT_4XX:
        raise SinkUnavailableError(sink, detail, status)
    raise SinkRejectedError(sink, detail, status)


def _origin(url: str) -> str:
    """`scheme://host[:port]` of `url`, for messages (its path and query may be secret)."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")
