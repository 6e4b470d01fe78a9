"""The one place where HTTP outcomes become sink errors: which status is worth a retry, and a
refused connection, against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from alerts.errors import SinkRejectedError, SinkUnavailableError
from alerts.webhook import WebhookSink
from tests.alerts.alert_factory import make_alert
from tests.alerts.recording_server import refused_url, send_one
from tests.conftest import TLS_CONTEXT


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
        asyncio.run(send_one(lambda url: WebhookSink(url), [status]))
    assert getattr(info.value, "status", None) == status


def test_connection_refused_is_unavailable() -> None:
    async def run(url: str) -> None:
        async with httpx.AsyncClient(verify=TLS_CONTEXT) as client:
            await WebhookSink(url).send(make_alert(), client)

    with refused_url() as url, pytest.raises(SinkUnavailableError, match="webhook: ConnectError"):
        asyncio.run(run(url))
