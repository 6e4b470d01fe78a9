"""The Slack sink: a message a person can read, free text escaped."""

from __future__ import annotations

import asyncio

from alerts.slack import SlackSink, slack_message
from tests.alerts.alert_factory import make_alert
from tests.alerts.recording_server import send_one


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
