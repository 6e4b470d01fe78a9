"""The store on both backends: SQLite in tmp_path and the local PostgreSQL (a schema per test).

The fixtures `db_url` and `open_store` and the helper `make_record` are shared with
test_recorder.py and test_migrations.py (imported from here until they move to tests/conftest.py).
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from proxy.core.records import Arm, ExchangeRecord, Status, Usage
from proxy.store.exchanges import (
    _TRY_RETENTION_LOCK,
    ExchangeRow,
    RecordRejectedError,
    SchemaVersionError,
    Store,
    StoreError,
    StoreUnavailableError,
)
from tests.conftest import PG_ADMIN_URL, seed_sqlite

T0 = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


def make_record(**overrides: Any) -> ExchangeRecord:
    """A plausible record; any field can be overridden."""
    fields: dict[str, Any] = {
        "request_id": f"req-{uuid.uuid4().hex[:12]}",
        "route": "support-bot",
        "target": "prod",
        "upstream_model": "gpt-4o-mini",
        "arm": Arm.PRIMARY,
        "endpoint": "chat.completions",
        "provider": "openai",
        "streamed": False,
        "started_at": T0,
        "duration_s": 0.25,
        "ttft_s": None,
        "overhead_s": 0.0004,
        "status": Status.OK,
        "http_status": 200,
    }
    fields.update(overrides)
    return ExchangeRecord(**fields)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database nobody else uses: a new SQLite file, or on PostgreSQL the session's migrated
    schema with every table emptied (`pg_migrated_schema`). A module that sets
    `EMPTY_DATABASES = True` (the migrations' tests) gets a new, empty schema instead."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'mirrorgate.db'}"
    empty = getattr(request.module, "EMPTY_DATABASES", False)
    url, _schema = request.getfixturevalue("pg_schema" if empty else "pg_migrated_schema")
    return str(url)


@pytest.fixture
def open_store(db_url: str, migrated_sqlite: Path) -> Iterator[Callable[..., Store]]:
    """Open migrated stores on `db_url`; every one is closed after the test. A new SQLite file
    starts as a copy of the session's migrated one (`migrate=False` opens it empty)."""
    stores: list[Store] = []

    def open_(*, migrate: bool = True, **kwargs: Any) -> Store:
        if migrate:
            seed_sqlite(db_url, migrated_sqlite)
        store = Store(db_url, **kwargs)
        stores.append(store)
        if migrate:
            store.migrate()
        return store

    yield open_
    for store in stores:
        store.close()


def test_a_record_comes_back_equal(open_store: Callable[..., Store]) -> None:
    store = open_store()
    record = make_record(
        arm=Arm.SHADOW,
        streamed=True,
        ttft_s=0.05,
        status=Status.TIMEOUT,
        http_status=504,
        usage=Usage(120, 30, 64, 8, 12, estimated=True),
        cost_usd=0.000123,
        error_class="ReadTimeout",
        rule="shipping-policy",
        rule_version="v2",
        pair_id="pair-1",
        tags=("replay", "has,comma"),
        request_body='{"model": "support-bot"}',
        response_body="data: {}\n\n",
        response_text="Hello ✓",
        operation_id="ticket 42/a",
    )
    store.write_batch([record])
    assert store.query() == [record]


def test_times_are_stored_as_utc(open_store: Callable[..., Store]) -> None:
    store = open_store()
    paris = T0.astimezone(timezone(timedelta(hours=1)))
    naive = T0.replace(tzinfo=None) + timedelta(seconds=1)
    store.write_batch([make_record(started_at=paris), make_record(started_at=naive)])
    first, second = store.query()
    assert first.started_at == T0
    assert first.started_at.tzinfo == UTC
    assert second.started_at == T0 + timedelta(seconds=1)
    assert store.count(since=paris) == 2
    assert store.count(since=T0 + timedelta(microseconds=1)) == 1


def test_nul_characters_are_replaced(open_store: Callable[..., Store]) -> None:
    store = open_store()
    store.write_batch([make_record(response_text="a\x00b")])
    assert store.query()[0].response_text == "a\ufffdb"


def test_request_id_is_shared_by_arms(open_store: Callable[..., Store]) -> None:
    store = open_store()
    records = [
        make_record(request_id="r-1", arm=Arm.PRIMARY),
        make_record(request_id="r-1", arm=Arm.SHADOW, target="cand-a", pair_id="r-1"),
        make_record(request_id="r-1", arm=Arm.SHADOW, target="cand-b", pair_id="r-1"),
    ]
    store.write_batch(records)
    assert store.query(request_id="r-1") == records
    assert store.count(request_id="r-1", arm=Arm.SHADOW) == 2
    assert store.count(pair_id="r-1", target="cand-b") == 1


def test_query_filters_order_and_limit(open_store: Callable[..., Store]) -> None:
    store = open_store()
    records = [
        make_record(route="a" if i % 2 else "b", started_at=T0 + timedelta(minutes=i))
        for i in range(10)
    ]
    store.write_batch(records[::-1])  # insertion order must not matter
    assert store.query() == records
    assert store.query(route="a") == records[1::2]
    assert store.query(since=T0 + timedelta(minutes=7)) == records[7:]
    assert store.query(until=T0 + timedelta(minutes=2)) == records[:2]
    assert store.query(limit=3) == records[:3]
    assert store.query(limit=3, newest_first=True) == records[:-4:-1]
    assert store.count() == 10
    assert store.count(route="b", since=T0 + timedelta(minutes=4)) == 3


def test_a_batch_is_written_whole_or_not_at_all(open_store: Callable[..., Store]) -> None:
    store = open_store()
    good = [make_record() for _ in range(5)]
    too_big = make_record(http_status=2**70)  # neither backend can hold it in an INTEGER
    with pytest.raises(RecordRejectedError):
        store.write_batch([*good, too_big])
    assert store.count() == 0
    store.write_batch(good)
    assert store.count() == 5


def test_delete_older_than(open_store: Callable[..., Store]) -> None:
    store = open_store()
    store.write_batch([make_record(started_at=T0 + timedelta(days=d)) for d in range(10)])
    assert store.delete_older_than(T0 + timedelta(days=3)) == 3
    assert store.delete_older_than(T0 + timedelta(days=3)) == 0
    assert store.delete_older_than(T0 + timedelta(days=8), limit=2) == 2
    assert [r.started_at for r in store.query()] == [T0 + timedelta(days=d) for d in range(5, 10)]
    assert store.delete_older_than(T0 + timedelta(days=8), limit=100) == 3
    assert store.count() == 2


def test_a_new_store_on_the_same_database_appends(open_store: Callable[..., Store]) -> None:
    first = open_store()
    first.write_batch([make_record() for _ in range(3)])
    first.close()
    second = open_store()
    second.write_batch([make_record() for _ in range(2)])
    assert second.count() == 5


def test_ping(open_store: Callable[..., Store]) -> None:
    assert open_store().ping() is True


def test_the_orm_class_matches_the_migrated_schema(open_store: Callable[..., Store]) -> None:
    store = open_store()
    inspector = sa.inspect(store.engine)
    table: sa.Table = ExchangeRow.__table__  # type: ignore[attr-defined]
    columns = {c["name"]: c["nullable"] for c in inspector.get_columns("exchanges")}
    assert columns == {c.name: bool(c.nullable) for c in table.columns}
    indexes = {i["name"]: tuple(i["column_names"]) for i in inspector.get_indexes("exchanges")}
    assert indexes == {i.name: tuple(c.name for c in i.columns) for i in table.indexes}
    assert inspector.get_pk_constraint("exchanges")["constrained_columns"] == ["id"]


def test_sqlite_is_configured_for_a_writer_thread(tmp_path: Path) -> None:
    with Store(f"sqlite:///{tmp_path / 'x.db'}", busy_timeout_ms=1234) as store:
        store.migrate()
        with store.engine.connect() as conn:
            pragma = {
                name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()
                for name in ("journal_mode", "synchronous", "busy_timeout", "foreign_keys")
            }
    assert pragma == {
        "journal_mode": "wal",
        "synchronous": 1,
        "busy_timeout": 1234,
        "foreign_keys": 1,
    }


def test_sqlite_needs_an_existing_directory(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "m.db"
    with pytest.raises(StoreError, match="does not exist"):
        Store(f"sqlite:///{missing}")
    assert not missing.parent.exists()


@pytest.mark.parametrize(
    "url", ["sqlite://", "sqlite:///:memory:", "mysql://x@localhost/db", "not a url"]
)
def test_unsupported_urls_are_refused(url: str) -> None:
    with pytest.raises(StoreError):
        Store(url)


def test_ping_is_false_when_the_database_is_unreachable() -> None:
    store = Store("postgresql+psycopg://postgres@127.0.0.1:1/test", connect_timeout_s=1)
    try:
        assert store.ping() is False
    finally:
        store.close()


def test_ping_is_false_when_sqlite_cannot_open_the_file(tmp_path: Path) -> None:
    directory = tmp_path / "gone"
    directory.mkdir()
    store = Store(f"sqlite:///{directory / 'm.db'}")
    directory.rmdir()
    try:
        assert store.ping() is False
    finally:
        store.close()


@pytest.mark.postgres
def test_schema_parameter_creates_and_uses_its_schema(pg_schema: tuple[str, str]) -> None:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    store = Store(PG_ADMIN_URL, schema=schema)
    try:
        store.migrate()
        store.write_batch([make_record()])
        with store.engine.connect() as conn:
            found = conn.execute(
                sa.text("SELECT count(*) FROM information_schema.tables WHERE table_schema = :s"),
                {"s": schema},
            ).scalar()
        assert found == 21  # twenty tables (eval_runs the newest) and schema_version
        assert store.count() == 1
    finally:
        with store.engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        store.close()


def test_a_locked_sqlite_database_is_reported_as_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    with Store(f"sqlite:///{path}", busy_timeout_ms=20) as store:
        store.migrate()
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            holder.execute("BEGIN EXCLUSIVE")
            with pytest.raises(StoreUnavailableError, match="locked"):
                store.write_batch([make_record()])
        finally:
            holder.close()
        store.write_batch([make_record()])
        assert store.count() == 1


def test_an_existing_store_is_opened_but_never_created_or_migrated(tmp_path: Path) -> None:
    path = tmp_path / "existing.db"
    with pytest.raises(StoreError, match="no database at"):
        Store.existing(f"sqlite:///{path}")
    assert not path.exists()
    with Store(f"sqlite:///{path}") as store:
        assert store.schema_version() == 0
    with pytest.raises(SchemaVersionError, match="start `mirrorgate serve` once"):
        Store.existing(f"sqlite:///{path}")
    with Store(f"sqlite:///{path}") as store:
        head = store.migrate()
    with Store.existing(f"sqlite:///{path}") as store:
        assert store.schema_version() == head


def test_the_display_url_hides_the_password() -> None:
    store = Store("postgresql://mirror:s3cret@127.0.0.1:1/db")
    try:
        assert store.display_url == "postgresql://mirror:***@127.0.0.1:1/db"
    finally:
        store.close()


@pytest.mark.postgres
def test_replicas_purge_one_at_a_time(pg_migrated_schema: tuple[str, str]) -> None:
    url, _schema = pg_migrated_schema
    with Store(url) as store, Store(url) as other:
        store.write_batch([make_record(started_at=T0 + timedelta(days=d)) for d in range(4)])
        with other.engine.begin() as conn:  # another replica, in the middle of a purge chunk
            assert conn.execute(_TRY_RETENTION_LOCK).scalar() is True
            assert store.delete_older_than(T0 + timedelta(days=3), limit=10) == 0
            assert store.count() == 4
        assert store.delete_older_than(T0 + timedelta(days=3), limit=10) == 3  # released
        assert store.count() == 1
