"""GET /admin/routes: what each route does now; the admin token when one is configured
(/admin/rules, the rule-version history, is tested with the rules in tests/proxy/gateway)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from proxy.core.records import ProbeRecord
from tests.conftest import InProcessGateway

SHAPED = {
    "routes": {
        "bot": {
            "primary": "rule-follower",
            "fallback": "echo",
            "shadows": [{"model": "stale"}],
            "canary": {"model": "stale", "steps": [25]},
        }
    }
}


def routes(gw: InProcessGateway, **headers: str) -> dict[str, dict[str, Any]]:
    response = gw.http.get("/admin/routes", headers=headers)
    assert response.status_code == 200, response.text
    return {route["name"]: route for route in response.json()["routes"]}


def test_each_route_says_what_serves_it(start_gateway: Callable[..., InProcessGateway]) -> None:
    gw = start_gateway(extra=SHAPED)
    listed = routes(gw)
    assert listed["bot"] == {
        "name": "bot", "primary": "rule-follower", "primary_arm": "primary",
        "config_primary": "rule-follower", "overridden": False, "fallback": "echo",
        "shadows": ["stale"], "canary": "stale", "canary_weight_percent": 0.0,
        "phase": "pending",
    }  # fmt: skip
    assert listed["echo"]["shadows"] == [] and listed["echo"]["canary"] is None
    assert listed["echo"]["phase"] is None  # no canary: no rollout
    assert set(listed) == set(gw.gateway.routes.names())


def test_without_a_token_variable_the_admin_api_is_open(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway()
    assert "echo" in routes(gw)
    assert "echo" in routes(gw, authorization="Bearer anything")


def test_with_a_token_only_the_bearer_of_it_gets_in(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway(env={"MIRRORGATE_ADMIN_TOKEN": "s3cret"})
    for headers, status in [
        ({}, 401),
        ({"authorization": "Basic s3cret"}, 401),
        ({"authorization": "Bearer "}, 401),
        ({"authorization": "Bearer s3cre"}, 403),
    ]:
        response = gw.http.get("/admin/routes", headers=headers)
        assert response.status_code == status, headers
        assert "s3cret" not in response.text
        assert response.json()["error"]["message"]
    assert "echo" in routes(gw, authorization="Bearer s3cret")
    assert "echo" in routes(gw, authorization="bearer  s3cret")  # the scheme in any case


# --- /admin/rules: the rule-flip probes' score per probed rule and target ---

PROBED = {
    "rules": {
        "shipping": {
            "routes": ["rule-follower"],
            "probes": {
                "parameter": r"max_weight\s*=\s*(?P<value>\d+)",
                "values": [150],
                "expect": [{"name": "follows", "type": "regex", "pattern": "{value}"}],
            },
        },
        "unprobed": {"routes": ["stale"]},
    }
}


def probe(n: int, target: str, result: str, at: datetime) -> ProbeRecord:
    return ProbeRecord(
        probe_id=f"p{n}", request_id=f"r{n}", route="rule-follower", target=target,
        rule="shipping", rule_version="v1", created_at=at, original_value="100",
        asked_value="150", result=result, answered_value=None, cost_usd=0.0,
    )  # fmt: skip


def test_rules_show_each_probed_targets_score(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway(extra=PROBED)
    now = datetime.now(UTC)
    old = now - timedelta(hours=3)
    gw.gateway.store.write_batch(
        [probe(i, "rule-follower", "followed", now) for i in range(10)]
        + [probe(100 + i, "stale", "stuck", now) for i in range(6)]
        + [probe(200, "stale", "other", now), probe(201, "stale", "followed", old)]
    )
    answer = gw.http.get("/admin/rules")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert set(body["probes"]) == {"shipping"} and body["probes_since"] is None
    follower, stale = (
        body["probes"]["shipping"]["rule-follower"],
        body["probes"]["shipping"]["stale"],
    )
    assert (follower["followed"], follower["probes"]) == (10, 10)
    assert follower["adaptation"]["rate"] == 1.0 and follower["adaptation"]["low"] < 1.0
    assert follower["stuck_rate"] == {
        "rate": 0.0,
        "low": 0.0,
        "high": follower["stuck_rate"]["high"],
    }
    assert (stale["followed"], stale["stuck"], stale["other"], stale["probes"]) == (1, 6, 1, 8)
    assert stale["stuck_rate"]["rate"] == 0.75
    assert stale["stuck_rate"]["low"] < 0.75 < stale["stuck_rate"]["high"]
    recent = gw.http.get("/admin/rules", params={"since": "1h"}).json()
    assert recent["probes"]["shipping"]["stale"]["probes"] == 7  # the 3-hour-old one left out
    assert recent["probes_since"] is not None


@pytest.mark.parametrize("since", ["yesterday", "-1h", "1h" * 500, "", "2025-13-45"])
def test_rules_refuse_a_bad_since(
    start_gateway: Callable[..., InProcessGateway], since: str
) -> None:
    gw = start_gateway(extra=PROBED)
    answer = gw.http.get("/admin/rules", params={"since": since})
    assert answer.status_code == 400, answer.text
    assert "since" in answer.text


def test_rules_without_probes_show_none(start_gateway: Callable[..., InProcessGateway]) -> None:
    body = start_gateway().http.get("/admin/rules").json()
    assert body["probes"] == {} and body["rule_versions"] == []
