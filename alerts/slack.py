"""Slack-compatible incoming-webhook sink: `{"text": ..., "blocks": [...]}`.

`text` is the plain fallback (notifications, clients without blocks); `blocks` carry the readable
form: a header, the route/target/rule/check fields, the evidence numbers and example request ids.
Works with Slack incoming webhooks and the many chat tools that accept the same body.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from alerts.alert import Alert
from alerts.sink import post_json

SEVERITY_ICON = {
    "critical": ":red_circle:",
    "warning": ":large_orange_circle:",
    "info": ":information_source:",
}
HEADER_MAX_CHARS = 150  # Slack's limit for a header block's plain_text
SECTION_MAX_CHARS = 3000  # Slack's limit for a section's text


def escape(text: str) -> str:
    """Escape the three characters Slack's mrkdwn treats as control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_number(value: float) -> str:
    """Evidence numbers as people read them: integers plain, others with 4 significant digits."""
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return f"{value:.4g}"


def slack_message(alert: Alert) -> dict[str, Any]:
    """Build the Slack body for `alert`."""
    title = f"mirrorgate {alert.kind.replace('_', ' ')}: {alert.route} → {alert.target}"
    facts = [f"*Route:* `{escape(alert.route)}`", f"*Target:* `{escape(alert.target)}`"]
    if alert.rule_ref:
        facts.append(f"*Rule:* `{escape(alert.rule_ref)}`")
    if alert.check:
        facts.append(f"*Failing check:* `{escape(alert.check)}`")
    facts.append(f"*Severity:* {alert.severity}")
    facts.append(f"*Since:* {alert.starts_at.isoformat()}")
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _clip(title, HEADER_MAX_CHARS)}},
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": _clip(
                    f"{SEVERITY_ICON[alert.severity]} {escape(alert.summary)}", SECTION_MAX_CHARS
                ),
            },
        },
        {"type": "section", "fields": [{"type": "mrkdwn", "text": fact} for fact in facts]},
    ]
    if alert.evidence:
        lines = [f"• {escape(k)}: *{format_number(v)}*" for k, v in alert.evidence.items()]
        text = _clip("*Evidence*\n" + "\n".join(lines), SECTION_MAX_CHARS)
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": text}})
    if alert.example_request_ids:
        ids = ", ".join(f"`{escape(i)}`" for i in alert.example_request_ids)
        blocks.append(
            {"type": "context", "elements": [{"type": "mrkdwn", "text": f"Examples: {ids}"}]}
        )
    fallback = f"{title}: {alert.summary}"
    if alert.rule_ref:
        fallback += f" (rule {alert.rule_ref}"
        fallback += f", check {alert.check})" if alert.check else ")"
    return {"text": fallback, "blocks": blocks}


@dataclass(frozen=True, slots=True)
class SlackSink:
    """POSTs `slack_message(alert)` to a Slack-compatible incoming webhook `url`."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    name: str = "slack"

    async def send(self, alert: Alert, client: httpx.AsyncClient) -> None:
        await post_json(client, self.name, self.url, slack_message(alert), self.headers)
