"""GET /admin/routes: what each route does now; the admin token when one is configured
(/admin/rules, the rule-version history, is tested with the rules in tests/proxy/gateway)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
