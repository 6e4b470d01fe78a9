"""The rules page of a gateway's console (in process): versions seen in real traffic with their
prompt diff and pass rates, probe scores per model, and every stored text escaped."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from proxy.core import ProbeRecord
from proxy.store import RuleEvent, RuleEventStore
from tests.conftest import InProcessGateway, wait_until
from tests.proxy.api.test_rollouts import AUTH, ask, rollout_config
from tests.proxy.console.console_client import ENV, REVIEWER_TOKENS, signed_in

ENV_ADMIN = {**ENV, "MIRRORGATE_ADMIN_TOKEN": AUTH["authorization"].removeprefix("Bearer ")}
ADMIN = ENV_ADMIN["MIRRORGATE_ADMIN_TOKEN"]
PROBES = {
    "parameter": r"max_weight\s*=\s*(?P<value>\d+)",
    "values": [150],
    "expect": [{"name": "follows", "type": "regex", "pattern": "{value}"}],
    "sample": 0.0,
}


@pytest.fixture
def gateway(start_gateway: Callable[..., InProcessGateway]) -> InProcessGateway:
    extra = rollout_config()
    extra["rules"]["shipping"]["probes"] = PROBES
    return start_gateway(extra=extra, env=ENV_ADMIN)


def _section(html: str, heading: str) -> str:
    start = html.index(f"<h3>Version {heading}</h3>")
    end = html.find("<article", start)
    return html[start : end if end != -1 else None]


def test_versions_seen_in_traffic_show_their_diff_first_seen_and_pass_rates(
    gateway: InProcessGateway,
) -> None:
    client = gateway.http
    for i in range(12):
        ask(client, f"user-{i}")  # v1: the primary answers 100, which v1 wants
    for i in range(8):
        ask(client, f"user-{i}", version="v2", weight=150)  # and 150 under v2
    admin = signed_in(gateway, ADMIN)

    def shown() -> str | None:
        html = admin.get("/ui/rules").text
        return html if "8 / 8" in html and "12 / 12" in html else None

    html = wait_until(shown, what="both versions' checks on the rules page")
    assert html.index("<h3>Version v2</h3>") < html.index("<h3>Version v1</h3>")  # newest first
    v2 = _section(html, "v2")
    assert '<span class="del">Shipping rule: max_weight = 100</span>' in v2
    assert '<span class="add">Shipping rule: max_weight = 150</span>' in v2
    assert "<dt>Before it</dt><dd>v1</dd>" in v2 and "First seen" in v2
    assert re.search(r"<td>primary</td><td>rule-follower</td><td>100% \(\d+% to 100%\)</td>", v2)
    v1 = _section(html, "v1")
    assert "No prompt diff" in v1 and "12 / 12" in v1


def test_probe_scores_are_shown_per_model(gateway: InProcessGateway) -> None:
    now = datetime.now(UTC)
    records = [
        ProbeRecord(
            probe_id=uuid.uuid4().hex,
            request_id=uuid.uuid4().hex,
            route="bot",
            target=target,
            rule="shipping",
            rule_version="v2",
            created_at=now - timedelta(minutes=1),
            original_value="100",
            asked_value="150",
            result=result,
        )
        for target, results in (
            ("rule-follower", ["followed"] * 9 + ["stuck"]),
            ("stale", ["stuck"] * 10),
        )
        for result in results
    ]
    gateway.gateway.store.write_batch(records)
    html = signed_in(gateway, ADMIN).get("/ui/rules").text
    assert re.search(r"<td>rule-follower</td><td>10</td><td>90% \(\d+% to \d+%\)</td>", html)
    assert re.search(r"<td>stale</td><td>10</td><td>0% \(0% to \d+%\)</td><td>100%", html)


def test_every_stored_text_is_escaped(gateway: InProcessGateway) -> None:
    RuleEventStore(gateway.gateway.store).add(
        RuleEvent(
            rule="shipping",
            version="<b>v9</b>",
            previous_version="<i>v8</i>",
            first_seen_at=datetime.now(UTC),
            request_id="<script>id</script>",
            route="bot",
            prompt_diff=(
                "--- a\n+++ b\n@@ -1 +1 @@\n-<script>old()</script>\n+</pre><script>new()</script>"
            ),
            rule_value="<u>1</u>",
        )
    )
    html = signed_in(gateway, ADMIN).get("/ui/rules").text
    for raw in ("<b>v9", "<i>v8", "<script>id", "<script>old", "<script>new", "<u>1"):
        assert raw not in html, raw
    assert '<span class="add">&lt;/pre&gt;&lt;script&gt;new()&lt;/script&gt;</span>' in html
    assert '<span class="del">&lt;script&gt;old()&lt;/script&gt;</span>' in html
    assert re.findall(r"<script[^>]*>", html) == ['<script src="/ui/static/console.js" defer>']


def test_reviewers_cannot_open_the_rules_page(gateway: InProcessGateway) -> None:
    assert signed_in(gateway, REVIEWER_TOKENS[1]).get("/ui/rules").status_code == 403
