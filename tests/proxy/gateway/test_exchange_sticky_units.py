"""Sticky units end to end, in process: requests with a sticky header record their user's keyed
unit on whichever arm served them, and the judge's windows read from those records carry
breakdowns by unit that add up."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime

import httpx
import pytest

from proxy.core.records import Arm
from proxy.rollout.evidence import epoch_windows, traffic_windows
from proxy.store import Arms, Epoch, JudgeWindows
from tests.conftest import InProcessGateway, wait_until
from tests.proxy.api.test_rollouts import AUTH, ENV, rollout_config
from tests.rollout_scene import rule_request

pytestmark = pytest.mark.usefixtures("quick_rollout_ticks")

USERS = {f"user-{i}": 1 + i % 4 for i in range(24)}
"""User → how many requests they send (1 to 4)."""
KEYLESS = 5


def send(client: httpx.Client, user: str | None) -> str:
    kwargs = rule_request(user or "")
    if user is None:
        del kwargs["headers"]["x-user-id"]
    response = client.post("/v1/chat/completions", **kwargs)
    assert response.status_code == 200, response.text
    return response.headers["x-mirrorgate-arm"]


def test_requests_record_their_users_unit_and_the_windows_break_down_by_it(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    # A step of 50 % and a judge that looks rarely: this test reads the windows itself.
    gw = start_gateway(extra=rollout_config(steps=[50], interval_s=3600), env=ENV)
    with gw.client() as client:
        started = client.post("/admin/rollouts/bot/start", headers=AUTH, json={"reason": "go"})
        assert started.status_code == 200, started.text
        since = datetime.fromisoformat(started.json()["rollout"]["started_at"])
        arm_of: dict[str, str] = {}
        for user, n in USERS.items():
            for _ in range(n):
                arm_of[user] = send(client, user)
        for _ in range(KEYLESS):
            send(client, None)
    store = gw.gateway.store
    total = sum(USERS.values()) + KEYLESS
    wait_until(lambda: store.count(route="bot") >= total, what="every request recorded")
    records = store.query(route="bot")
    assert {r.arm for r in records} == {Arm.PRIMARY, Arm.CANARY}  # both arms (50 %)
    units = Counter(r.sticky_unit for r in records)
    assert units[None] == KEYLESS
    assert sorted(n for u, n in units.items() if u is not None) == sorted(USERS.values())
    assert all(u is None or len(u) == 24 for u in units)
    assert not any(user in (r.sticky_unit or "") for r in records for user in USERS)

    windows = JudgeWindows(store)
    arms = Arms("bot", "rule-follower", "stale")
    primary, candidate = traffic_windows(windows, arms, since)
    for window, arm in ((primary, "primary"), (candidate, "canary")):
        users = [u for u, a in arm_of.items() if a == arm]
        requests = sum(USERS[u] for u in users)
        keyed = sorted(n for _, n in window.units["errors"] if n > 0)
        # Each user is one unit of all their requests; each keyless request is one of its own.
        assert window.requests == sum(keyed) >= requests
        assert sorted(USERS[u] for u in users) == sorted(keyed)[-len(users) :]
        latencies = window.sample_units["latencies_s"]
        assert len(latencies) == window.requests
        assert len(set(latencies)) == len(users) + (window.requests - requests)
    assert primary.requests + candidate.requests == total

    # The rule's checks ran on every answer: each verdict counts for its request's unit.
    def checked() -> bool:
        p, c = epoch_windows(windows, arms, Epoch("shipping", "v1", since), since)
        return (
            p.checks.get("max-weight", (0, 0))[1] + c.checks.get("max-weight", (0, 0))[1] == total
        )

    wait_until(checked, what="every answer checked")
    p, c = epoch_windows(windows, arms, Epoch("shipping", "v1", since), since)
    assert sum(n for _, n in p.units["checks:max-weight"]) == p.checks["max-weight"][1]
    assert sum(n for _, n in c.units["checks:max-weight"]) == c.checks["max-weight"][1]
    assert (
        len(p.units["checks:max-weight"]) + len(c.units["checks:max-weight"])
        == len(USERS) + KEYLESS
    )
