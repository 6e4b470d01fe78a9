"""The store unavailable for 10 s under a running gateway (issue 5, "Bad input and faults"): the
proxy keeps serving on its last route table, admin transitions answer 503 and change nothing, the
judge decides nothing; afterwards every record accepted during the outage is in the store and
decisions resume.

The outage is real: a TCP forwarder between the gateway and PostgreSQL resets every connection
and refuses new ones for 10 s.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from proxy.core.sampling import sampled
from proxy.core.utc import as_utc
from tests.conftest import wait_until
from tests.e2e.conftest import GatewayProcess, RolloutClient
from tests.e2e.tcp_forwarder import TcpForwarder

pytestmark = pytest.mark.e2e

USERS = [f"user-{i}" for i in range(40)]
OUTAGE_S = 10.0
"""As long as the issue says: the duration of the load, not a synchronisation."""
RATE_PER_S = 40
"""Client requests per second during the outage."""


def query(db_url: str, sql: str, **params: Any) -> list[dict[str, Any]]:
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            return [dict(row._mapping) for row in conn.execute(sa.text(sql), params)]
    finally:
        engine.dispose()


def stored(db_url: str, table: str, request_ids: list[str]) -> Counter[str]:
    """How many rows of `table` each of `request_ids` has."""
    rows = query(
        db_url,
        f"SELECT request_id, count(*) AS n FROM {table} "
        "WHERE request_id = ANY(:ids) GROUP BY request_id",
        ids=request_ids,
    )
    return Counter({row["request_id"]: int(row["n"]) for row in rows})


def test_the_store_unavailable_for_10_s_loses_nothing_and_decisions_wait(
    pg_schema: tuple[str, str],
    start_rollout_gateway: Callable[..., GatewayProcess],
    rollout_client: RolloutClient,
) -> None:
    db_url, _schema = pg_schema
    client = rollout_client
    with TcpForwarder("127.0.0.1", 5432) as forwarder:
        via_forwarder = db_url.replace("127.0.0.1:5432", f"127.0.0.1:{forwarder.port}")
        assert via_forwarder != db_url and "search_path" in via_forwarder
        gateway = start_rollout_gateway(via_forwarder)
        wait_until(lambda: client.replica(gateway)["decider"], what="the gateway deciding")
        assert client.act(gateway, "start").status_code == 200
        before = client.rollout(gateway)
        arms = client.arms(gateway, USERS)
        assert arms == {
            u: "canary" if sampled(u, before["rollout_id"], 0.5) else "primary" for u in USERS
        }
        assert set(arms.values()) == {"primary", "canary"}

        # The outage. Meanwhile the rule changes (v2 wants 150) and the stale candidate keeps
        # answering 100: a judge that could reach the store would roll it back.
        forwarder.cut()
        t0 = time.monotonic()
        accepted: list[str] = []
        checked = False
        while time.monotonic() - t0 < OUTAGE_S:
            user = USERS[len(accepted) % len(USERS)]
            response = client.ask(gateway, user, version="v2", weight=150)  # 200, or it fails
            assert response.headers["x-mirrorgate-arm"] == arms[user]  # the last route table
            accepted.append(response.headers["x-mirrorgate-request-id"])
            if not checked and time.monotonic() - t0 > OUTAGE_S / 2:
                checked = True
                # The gateway knows: it stopped deciding and says the store is unreachable.
                wait_until(
                    lambda: (s := client.replica(gateway))["decider"] is False
                    and s["store_reachable"] is False,
                    timeout_s=3,
                    what="the gateway noticing the outage",
                )
                assert client.http.get(gateway.url + "/readyz").status_code == 503
                for action in ("pause", "rollback"):
                    refused = client.act(gateway, action)
                    assert refused.status_code == 503, refused.text
                    assert "nothing changed" in refused.json()["error"]["message"]
                state = client.rollout(gateway)
                assert (state["phase"], state["revision"]) == ("progressing", before["revision"])
            # A steady load: the next request is due at t0 + n / RATE_PER_S.
            time.sleep(max(0.0, t0 + len(accepted) / RATE_PER_S - time.monotonic()))
        restored_at = datetime.now(UTC)  # taken first: nothing can reach the store before it
        forwarder.restore()
        assert checked and forwarder.refused > 0
        state = client.rollout(gateway)
        assert (state["phase"], state["revision"]) == ("progressing", before["revision"])

        # Nothing accepted is lost: every exchange and its rule check, exactly once.
        wanted = Counter(accepted)
        assert len(wanted) == len(accepted)
        wait_until(
            lambda: stored(db_url, "exchanges", accepted) == wanted
            and stored(db_url, "check_results", accepted) == wanted,
            timeout_s=30,
            what="every record accepted during the outage in the store",
        )
        assert client.metric(gateway, "mirrorgate_recorder_write_errors_total") > 0
        assert client.metric(gateway, "mirrorgate_recorder_dropped_total") == 0

        # Decisions resume: the judge rolls the stale candidate back, on the evidence recorded
        # during the outage, after it.
        wait_until(
            lambda: client.rollout(gateway)["phase"] == "rolled_back",
            timeout_s=30,
            what="the judge's rollback after the outage",
        )
        assert client.replica(gateway)["decider"] is True
        events = query(
            db_url,
            "SELECT revision, action, actor, reason, created_at FROM rollout_events "
            "WHERE route = 'bot' ORDER BY id",
        )
        assert [(e["revision"], e["action"], e["actor"]) for e in events] == [
            (1, "start", "operator"),
            (2, "rollback", "judge"),
        ], events
        assert "v2" in events[1]["reason"]
        decided_at = as_utc(events[1]["created_at"])
        assert decided_at is not None and decided_at >= restored_at
        rule_events = query(db_url, "SELECT version FROM rule_events ORDER BY first_seen_at")
        assert [e["version"] for e in rule_events] == ["v1", "v2"]  # v2: seen during the outage
        assert gateway.terminate() == 0  # before the forwarder goes: a clean drain
    # The outage was handled, not survived by accident: no background task or judge round failed.
    assert "Traceback" not in gateway.output()
