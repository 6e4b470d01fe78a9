"""Three `mirrorgate serve` processes sharing one PostgreSQL store (issue 5, point 6): exactly one
decides, a route change made through one is applied by all within 2 s, and when the deciding one
is killed with SIGKILL another takes over and decides — no transition is made twice, and every
surviving replica routes every user the same."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from proxy.core.sampling import sampled
from tests.conftest import wait_until
from tests.e2e.conftest import GatewayProcess, RolloutClient

pytestmark = pytest.mark.e2e

USERS = [f"user-{i}" for i in range(40)]
ROUTE_REFRESH_S = 1.0
"""`server.route_refresh_s`, left at its default in these gateways' config."""


def events(db_url: str) -> list[dict[str, Any]]:
    """Every persisted transition of route `bot`, in the order they were written."""
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT revision, action, actor, from_phase, to_phase, reason "
                    "FROM rollout_events WHERE route = 'bot' ORDER BY id"
                )
            )
            return [dict(row._mapping) for row in rows]
    finally:
        engine.dispose()


def test_three_replicas_route_alike_and_a_killed_decider_is_replaced_without_double_decisions(
    pg_schema: tuple[str, str],
    start_rollout_gateway: Callable[..., GatewayProcess],
    rollout_client: RolloutClient,
) -> None:
    db_url, _schema = pg_schema
    client = rollout_client
    replicas = [start_rollout_gateway(db_url) for _ in range(3)]

    def deciders(among: list[GatewayProcess]) -> list[GatewayProcess]:
        return [gw for gw in among if client.replica(gw)["decider"]]

    wait_until(lambda: deciders(replicas), what="one replica taking the decider lock")
    assert [client.rollout(gw)["phase"] for gw in replicas] == ["pending"] * 3
    assert [set(client.arms(gw, USERS[:5]).values()) for gw in replicas] == [{"primary"}] * 3

    # A route change made through replica A...
    first = replicas[0]
    started = client.act(first, "start")
    assert started.status_code == 200, started.text
    revision = started.json()["rollout"]["revision"]

    # ...is applied by every replica within 2 s (docs/rollouts.md, Several replicas). The poll's
    # deadline is those 2 s plus one refresh interval of tolerance for the polling itself.
    wait_until(
        lambda: all(client.rollout(gw)["revision"] == revision for gw in replicas),
        timeout_s=2.0 + ROUTE_REFRESH_S,
        what="every replica applying the start within 2 s",
    )
    states = [client.rollout(gw) for gw in replicas]
    rollout_id = states[0]["rollout_id"]
    for state in states:
        assert (state["phase"], state["rollout_id"]) == ("progressing", rollout_id)
        assert state["weight_percent"] == state["serving"]["canary_weight_percent"] == 50.0
        assert state["serving"]["canary"] == "stale"
    # Same user, same arm, on every replica: the one the persisted salt gives.
    expected = {u: "canary" if sampled(u, rollout_id, 0.5) else "primary" for u in USERS}
    assert set(expected.values()) == {"primary", "canary"}
    for gw in replicas:
        assert client.arms(gw, USERS) == expected

    # Exactly one decides. Every replica has ticked by now: each has run at least one periodic
    # refresh (1 s) since it started, and the controller ticks every 0.5 s.
    statuses = [client.replica(gw) for gw in replicas]
    assert [s["decider"] for s in statuses].count(True) == 1
    decider = next(gw for gw, s in zip(replicas, statuses, strict=True) if s["decider"])
    decider_status = next(s for s in statuses if s["decider"])
    assert decider_status["replica"].endswith(f":{decider.pid}")
    assert len({s["replica"] for s in statuses}) == 3

    # SIGKILL the decider: no shutdown hook runs; PostgreSQL drops its session and the lock.
    decider.proc.kill()
    decider.proc.wait(10)
    assert decider.proc.returncode == -signal.SIGKILL
    survivors = [gw for gw in replicas if gw is not decider]
    successor = wait_until(lambda: deciders(survivors), what="another replica taking over")[0]

    # A decision only a live decider can make: the rule changes (v2 wants 150), the stale
    # candidate keeps answering 100, and the judge rolls it back. Traffic through both survivors.
    for i in range(600):
        client.ask(survivors[i % 2], USERS[i % len(USERS)], version="v2", weight=150)
        if i % 20 == 19 and client.rollout(survivors[0])["phase"] == "rolled_back":
            break
    wait_until(
        lambda: all(client.rollout(gw)["phase"] == "rolled_back" for gw in survivors),
        what="both survivors applying the judge's rollback",
    )

    # No transition happened twice: one start, one rollback, revisions 1 and 2, in the store...
    written = events(db_url)
    assert [(e["revision"], e["action"], e["actor"]) for e in written] == [
        (1, "start", "operator"),
        (2, "rollback", "judge"),
    ], written
    assert "check_pass_rate:max-weight" in written[1]["reason"] and "v2" in written[1]["reason"]
    for gw in survivors:
        assert [t["revision"] for t in client.rollout(gw)["transitions"]] == [2, 1]
    # ...and exactly one replica made it: the successor, which still is the only decider.
    assert [client.replica(gw)["decider"] for gw in survivors].count(True) == 1
    assert client.replica(successor)["decider"]
    rollbacks = {gw.pid: client.metric(gw, "mirrorgate_rollbacks_total", route="bot")
                 for gw in survivors}  # fmt: skip
    assert rollbacks == {gw.pid: 1.0 if gw is successor else 0.0 for gw in survivors}

    # Every survivor routes every user the same: the canary at 0 %, all of them to the primary.
    for gw in survivors:
        assert set(client.arms(gw, USERS, version="v2", weight=150).values()) == {"primary"}
