"""The rollout store's reads: a route's latest verdicts, newest first, along their index."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from analyzers.verdicts import MetricVerdict, Outcome
from proxy.core.rollout_state import RolloutState
from proxy.store.exchanges import Store
from proxy.store.rollouts import RolloutStore
from tests.conftest import seed_sqlite, sqlite_plans

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def _verdict(metric: str) -> MetricVerdict:
    return MetricVerdict(metric, Outcome.PASS, 0.0, -0.1, 0.1, 0.05, 100, 100, 0.01, "ok")


def _store(tmp_path: Path, migrated_sqlite: Path) -> Store:
    url = f"sqlite:///{tmp_path / 'rollouts.db'}"
    seed_sqlite(url, migrated_sqlite)
    store = Store(url)
    store.migrate()
    return store


def test_recent_verdicts_are_newest_look_first_and_one_looks_in_written_order(
    tmp_path: Path, migrated_sqlite: Path
) -> None:
    store = _store(tmp_path, migrated_sqlite)
    try:
        rollouts = RolloutStore(store)
        bot, other = RolloutState("bot", rollout_id="r1"), RolloutState("other", rollout_id="r2")
        for look in range(3):
            at = T0 + timedelta(seconds=10 * look)
            scoped = [("", _verdict("error_rate")), ("", _verdict("latency_p95"))]
            rollouts.add_verdicts(bot, look, scoped, at)
            rollouts.add_verdicts(other, look, [("", _verdict("error_rate"))], at)

        rows = rollouts.recent_verdicts("bot", limit=5)
        assert [(r["look"], r["metric"]) for r in rows] == [
            (2, "latency_p95"),
            (2, "error_rate"),
            (1, "latency_p95"),
            (1, "error_rate"),
            (0, "latency_p95"),
        ]
        assert {r["rollout_id"] for r in rows} == {"r1"}
    finally:
        store.close()


def test_recent_verdicts_read_the_route_index_without_sorting_its_history(
    tmp_path: Path, migrated_sqlite: Path
) -> None:
    """The console and `GET /admin/rollouts/{route}` ask for a route's last verdicts on every
    page: SQLite must walk the (route, created_at) index backwards, not sort every verdict the
    route ever had into a temporary B-tree."""
    store = _store(tmp_path, migrated_sqlite)
    try:
        rollouts = RolloutStore(store)
        rollouts.add_verdicts(RolloutState("bot"), 0, [("", _verdict("error_rate"))], T0)
        rows, [details] = sqlite_plans(
            store.engine, lambda: rollouts.recent_verdicts("bot"), reading="FROM verdicts"
        )
        assert len(rows) == 1
        assert any("ix_verdicts_route_created_at" in d for d in details), details
        assert not any("TEMP B-TREE" in d for d in details), details
    finally:
        store.close()
