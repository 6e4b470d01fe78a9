"""The Slack sink: a message a person can read, free text escaped."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from alerts.errors import SinkError
from alerts.slack import SlackSink, slack_message
from tests.alerts.alert_factory import make_alert
from tests.alerts.recording_server import RecordingServer, refused_url, send_one


def test_slack_message_is_readable() -> None:
    request = asyncio.run(send_one(lambda url: SlackSink(url + "/services/T/B/X")))
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


def test_a_refused_alert_never_names_the_webhook_url() -> None:
    # The path of a Slack incoming webhook is its credential: errors (which the dispatcher logs)
    # name the host only, for a rejected alert and for one the server never answered.
    secret_path = "/services/T0SECRET/B0SECRET/Xq1w2e3r4t5y6u7i8o9p0"

    async def refused(status: int) -> str:
        async with RecordingServer([status]) as server:
            sink = SlackSink(server.url + secret_path)
            async with httpx.AsyncClient() as client:
                with pytest.raises(SinkError) as caught:
                    await sink.send(make_alert(), client)
            return str(caught.value)

    for status in (404, 500):
        message = asyncio.run(refused(status))
        assert f"HTTP {status}" in message and "127.0.0.1" in message
        assert "SECRET" not in message and "Xq1w2e3r4t5y6u7i8o9p0" not in message

    async def unreachable() -> str:
        with refused_url() as url:
            async with httpx.AsyncClient() as client:
                with pytest.raises(SinkError) as caught:
                    await SlackSink(url + secret_path).send(make_alert(), client)
        return str(caught.value)

    assert "SECRET" not in asyncio.run(unreachable())
