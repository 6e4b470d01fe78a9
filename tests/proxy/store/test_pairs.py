"""Pairs (a candidate's answer compared with the primary's) round-trip through the store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from proxy.core.records import PairRecord
from proxy.store.exchanges import Store
from proxy.store.migrations import MIGRATIONS, migrate
from proxy.store.pairs import pair_to_row
from tests.conftest import seed_sqlite
from tests.proxy.store import test_exchanges as test_store

db_url = test_store.db_url
EMPTY_DATABASES = True  # a test here migrates a new schema part of the way


def pair(pair_id: str, created_at: datetime, **fields: object) -> PairRecord:
    base: dict[str, object] = {
        "pair_id": pair_id, "kind": "shadow", "request_id": f"req-{pair_id}", "route": "bot",
        "primary_target": "prod", "candidate_target": "cand", "created_at": created_at,
        "primary_status": "ok", "candidate_status": "ok", "exact_equal": False,
        "normalized_equal": True, "json_equal": True,
        "json_fields": (("max_weight", True), ("note", False)), "length_ratio": 1.25,
        "latency_delta_s": 0.5, "ttft_delta_s": None, "cost_delta_usd": -0.001,
    }  # fmt: skip
    return PairRecord(**{**base, **fields})  # type: ignore[arg-type]


def test_pairs_round_trip_and_filter(db_url: str, migrated_sqlite: Path) -> None:
    seed_sqlite(db_url, migrated_sqlite)
    now = datetime.now(UTC)
    written = [
        pair("a", now),
        pair("b", now, kind="noise", candidate_target="prod", json_equal=None, json_fields=()),
        pair("c", now, kind="replay", route="other", agreement="disagree"),
    ]
    with Store(db_url) as store:
        store.migrate()
        store.write_batch([*written, test_store.make_record()])
        assert store.query_pairs() == written
        assert store.query_pairs(kind="noise") == [written[1]]
        assert store.query_pairs(route="other") == [written[2]]
        assert store.query_pairs(candidate="cand", route="bot") == [written[0]]
        assert store.count() == 1


def test_pairs_stored_before_the_verdict_column_read_as_without_one(db_url: str) -> None:
    with Store(db_url) as store:
        migrate(store.engine, migrations=MIGRATIONS[:8])  # the schema before `agreement`
        old = {**pair_to_row(pair("old", datetime.now(UTC)))}
        del old["agreement"], old["sticky_unit"]  # and the unit, of migration 19
        with store.engine.begin() as conn:
            conn.execute(sa.insert(sa.table("pairs", *(sa.column(name) for name in old))), [old])
        store.migrate()
        (read,) = store.query_pairs()
        assert read.pair_id == "old" and read.agreement is None
        store.write_batch([pair("new", datetime.now(UTC), agreement="agree")])
        assert [p.agreement for p in store.query_pairs()] == [None, "agree"]


def test_retention_deletes_old_pairs_too(db_url: str, migrated_sqlite: Path) -> None:
    seed_sqlite(db_url, migrated_sqlite)
    now = datetime.now(UTC)
    with Store(db_url) as store:
        store.migrate()
        store.write_batch([pair("old", now - timedelta(days=30)), pair("new", now)])
        store.delete_older_than(now - timedelta(days=14))
        assert [p.pair_id for p in store.query_pairs()] == ["new"]
