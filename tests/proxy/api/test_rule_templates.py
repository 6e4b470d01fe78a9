"""GET /admin/rules/templates: each rule's versions with their learned templates and slots, and
what the replica holds, from a gateway in process."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import httpx

from tests.conftest import InProcessGateway, wait_until

TOKEN = "t0ken-for-rules"
ENV = {"MIRRORGATE_ADMIN_TOKEN": TOKEN}
ADMIN = {"authorization": f"Bearer {TOKEN}"}
EXTRA = {
    "rules": {
        "support": {
            "routes": ["rule-follower"],
            "checks": [{"name": "weight", "type": "phantom_rule",
                        "parameter": r"max_weight\s*=\s*(?P<value>\d+)"}],
        }
    }
}  # fmt: skip
NAMES = [
    "Ada Lovelace", "Grace Hopper", "Alan Turing", "Edsger Dijkstra", "Barbara Liskov",
    "Donald Knuth", "Ken Thompson", "Dennis Ritchie", "Margaret Hamilton", "Frances Allen",
]  # fmt: skip


def ask(gw: InProcessGateway, rng: random.Random, weight: int) -> httpx.Response:
    system = (
        f"Customer: {rng.choice(NAMES)} <c{rng.randrange(99)}@example.com>, ticket "
        f"#{rng.randrange(10_000, 99_999)}.\nRules: max_weight = {weight} kg. Answer in JSON."
    )
    body: dict[str, Any] = {
        "model": "rule-follower",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": "?"}],
    }
    response = gw.http.post("/v1/chat/completions", json=body)
    response.raise_for_status()
    return response


def templated_gateway(start_gateway: Callable[..., InProcessGateway]) -> InProcessGateway:
    """A gateway whose rule `support` has opened two template versions (100, then 150)."""
    gw = start_gateway(extra=EXTRA, env=ENV)
    rng = random.Random(2)
    for _ in range(20):
        ask(gw, rng, 100)
    for _ in range(10):
        ask(gw, rng, 150)

    def stored() -> int:
        answer = gw.http.get("/admin/rules/templates", headers=ADMIN).json()
        return len(answer["rules"][0]["versions"])

    wait_until(lambda: stored() == 2, what="two stored versions")
    return gw


def test_versions_come_with_their_template_and_slots(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = templated_gateway(start_gateway)
    answer = gw.http.get("/admin/rules/templates", headers=ADMIN)
    assert answer.status_code == 200
    (rule,) = answer.json()["rules"]
    assert rule["template"] == "auto" and rule["max_versions"] == 64
    assert rule["version_support"] == {"min_requests": 3, "min_units": 2}
    assert rule["held"]["open_templates"] == 2 and rule["held"]["variants"] <= 1024
    newest, oldest = rule["versions"]
    assert (newest["rule_value"], oldest["rule_value"]) == ("150", "100")
    assert newest["previous_version"] == oldest["version"] and newest["open_here"]
    assert newest["template"]["slots"] == ["⟨customer⟩"]
    assert newest["template"]["text"].startswith("Customer: ⟨customer⟩ <<email>>, ticket <ticket>.")
    assert "max_weight = 150 kg" in newest["template"]["text"]
    assert (
        gw.http.get("/admin/rules/templates", params={"rule": "support"}, headers=ADMIN).json()[
            "rules"
        ][0]["rule"]
        == "support"
    )
    missing = gw.http.get("/admin/rules/templates", params={"rule": "nope"}, headers=ADMIN)
    assert missing.status_code == 404 and "support" in missing.json()["error"]["message"]
    assert gw.http.get("/admin/rules/templates").status_code == 401  # the admin token guards it
