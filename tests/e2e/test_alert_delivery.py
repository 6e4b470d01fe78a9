"""The Prometheus and Alertmanager fixtures, end to end: a firing rule reaches a webhook as
Alertmanager 0.25 really sends it, and mirrorgate's webhook parser turns it into a rollback."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from alerts.alertmanager_webhook import parse_payload
from alerts.rollback_request import decide_rollbacks
from tests.conftest import wait_until
from tests.e2e.monitoring import (
    AlertmanagerProcess,
    PrometheusProcess,
    alertmanager_config,
)
from tests.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.e2e


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    server = WebhookReceiver("/hooks/alertmanager")
    yield server
    server.close()


RULES = {
    "groups": [
        {
            "name": "fixture",
            "rules": [
                {
                    "alert": "FixtureRollback",
                    "expr": "vector(1)",
                    "for": "0s",
                    "labels": {
                        "severity": "critical",
                        "mirrorgate_route": "support-bot",
                        "mirrorgate_action": "rollback",
                    },
                    "annotations": {"summary": "canary broken"},
                },
                {
                    "alert": "FixtureNotify",
                    "expr": "vector(1)",
                    "for": "0s",
                    "labels": {
                        "severity": "warning",
                        "mirrorgate_route": "support-bot",
                        "mirrorgate_action": "notify",
                    },
                },
            ],
        }
    ]
}


def test_a_firing_rule_reaches_the_webhook_and_parses_as_a_rollback(
    tmp_path: Path,
    receiver: WebhookReceiver,
    start_alertmanager: Callable[..., AlertmanagerProcess],
    start_prometheus: Callable[..., PrometheusProcess],
) -> None:
    alertmanager = start_alertmanager(alertmanager_config(receiver.url, bearer_token="t0ken"))
    rules = tmp_path / "fixture-rules.yml"
    rules.write_text(yaml.safe_dump(RULES))
    start_prometheus(scrape_targets={}, rule_files=[rules], alertmanager=alertmanager.url)

    wait_until(lambda: receiver.received, timeout_s=60, what="Alertmanager's webhook call")
    headers, raw = receiver.received[0]
    body = json.loads(raw)
    assert headers["Authorization"] == "Bearer t0ken"
    assert body["version"] == "4" and body["status"] == "firing"
    assert [a["labels"]["alertname"] for a in body["alerts"]] == ["FixtureRollback"]

    decision = decide_rollbacks(parse_payload(raw), known_routes=["support-bot"])
    assert [(r.route, r.alertname, r.summary) for r in decision.requests] == [
        ("support-bot", "FixtureRollback", "canary broken")
    ]

    # The notify alert is held by Alertmanager but routed to the blackhole receiver, never to
    # mirrorgate (which would otherwise have to skip it).
    def receivers_by_alert() -> dict[str, list[str]]:
        return {
            alert["labels"]["alertname"]: [r["name"] for r in alert["receivers"]]
            for alert in alertmanager.alerts()
        }

    held = wait_until(
        lambda: len(found := receivers_by_alert()) == 2 and found, what="both alerts held"
    )
    assert held == {"FixtureRollback": ["mirrorgate"], "FixtureNotify": ["blackhole"]}
