"""Schema migrations on both backends: idempotent, ordered, atomic, race-free, never downgrading;
the rows of before read back right after the migrations that changed their tables."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from proxy.core.records import Arm, CheckRecord, FindingRecord
from proxy.store import ANY_VERSION, ReviewStore
from proxy.store.exchanges import Store, StoreError
from proxy.store.migrations import (
    MIGRATIONS,
    SQLITE_BEGIN_OPTION,
    Migration,
    SchemaVersionError,
    current_version,
    head_version,
    migrate,
)
from tests.proxy.store import test_exchanges as test_store
from tests.proxy.store.test_exchanges import T0, make_record
from tests.proxy.store.test_reviews import queued, review, shadow_pair

db_url = test_store.db_url  # shared fixtures (until they move to tests/conftest.py)
EMPTY_DATABASES = True  # every PostgreSQL test here starts on a new, empty schema
open_store = test_store.open_store


def versions(store: Store) -> list[tuple[int, str]]:
    with store.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT version, description FROM schema_version ORDER BY 1"))
        return [(row[0], row[1]) for row in rows]


def tables(store: Store) -> set[str]:
    return set(sa.inspect(store.engine).get_table_names())


def _v2_notes(conn: Connection) -> None:
    sa.Table(
        "notes",
        sa.MetaData(),
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("text", sa.Text(), nullable=False),
    ).create(conn)


def _v2_half_done(conn: Connection) -> None:
    _v2_notes(conn)
    raise RuntimeError("the migration fails after creating its table")


LATER_STICKY_UNITS = ("exchanges", "pairs")
"""The tables migration 19 gives a `sticky_unit` that the writers of the tests below fill."""


@contextmanager
def later_exchange_columns(store: Store) -> Iterator[None]:
    """The columns later migrations add to `exchanges`, there only while the block writes today's
    records into a database of before them."""
    with store.engine.begin() as conn:
        for table in LATER_STICKY_UNITS:
            conn.execute(sa.text(f"ALTER TABLE {table} ADD COLUMN sticky_unit VARCHAR"))
    yield
    with store.engine.begin() as conn:
        for table in LATER_STICKY_UNITS:
            conn.execute(sa.text(f"ALTER TABLE {table} DROP COLUMN sticky_unit"))


def test_a_fresh_database_is_migrated_to_head(open_store: Callable[..., Store]) -> None:
    store = open_store(migrate=False)
    assert current_version(store.engine) == 0
    assert store.migrate() == head_version() == MIGRATIONS[-1].version
    assert versions(store) == [(m.version, m.description) for m in MIGRATIONS]
    assert {"exchanges", "schema_version"} <= tables(store)


def test_migrating_again_changes_nothing(open_store: Callable[..., Store]) -> None:
    store = open_store()
    store.write_batch([make_record()])
    before = versions(store)
    assert store.migrate() == head_version()
    assert open_store().migrate() == head_version()
    assert versions(store) == before
    assert store.count() == 1


def test_a_newer_schema_is_a_clear_error(open_store: Callable[..., Store]) -> None:
    store = open_store()
    with store.engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO schema_version (version, description, applied_at) "
                "VALUES (:v, 'from the future', CURRENT_TIMESTAMP)"
            ),
            {"v": head_version() + 1},
        )
    with pytest.raises(SchemaVersionError, match=r"version \d+ but this mirrorgate only knows"):
        store.migrate()
    assert isinstance(SchemaVersionError("x"), StoreError)
    assert current_version(store.engine) == head_version() + 1


def test_adding_a_migration_applies_only_the_new_step(open_store: Callable[..., Store]) -> None:
    store = open_store()
    store.write_batch([make_record()])
    extended = (*MIGRATIONS, Migration(head_version() + 1, "notes table", _v2_notes))
    assert migrate(store.engine, migrations=extended) == head_version() + 1
    assert migrate(store.engine, migrations=extended) == head_version() + 1
    assert "notes" in tables(store)
    assert versions(store)[-1] == (head_version() + 1, "notes table")
    assert store.count() == 1
    # The code that only knows the old list now refuses the newer database.
    with pytest.raises(SchemaVersionError):
        store.migrate()


def test_a_failing_migration_leaves_no_trace(open_store: Callable[..., Store]) -> None:
    store = open_store()
    broken = (*MIGRATIONS, Migration(head_version() + 1, "half done", _v2_half_done))
    with pytest.raises(RuntimeError, match="fails after creating"):
        migrate(store.engine, migrations=broken)
    assert current_version(store.engine) == head_version()
    assert "notes" not in tables(store)


@pytest.mark.parametrize(
    "numbers", [[2], [1, 3], [2, 1], [1, 1]], ids=["gap", "hole", "unordered", "duplicate"]
)
def test_the_migration_list_must_count_1_2_3(
    open_store: Callable[..., Store], numbers: list[int]
) -> None:
    store = open_store(migrate=False)
    bad = [Migration(n, f"step {n}", _v2_notes) for n in numbers]
    with pytest.raises(SchemaVersionError, match="must be 1, 2, 3"):
        migrate(store.engine, migrations=bad)
    assert current_version(store.engine) == 0


def test_processes_starting_together_do_not_race(open_store: Callable[..., Store]) -> None:
    """Eight stores (eight engines, as eight gateway processes would have) migrate at once."""
    stores = [open_store(migrate=False) for _ in range(8)]
    extended = (*MIGRATIONS, Migration(head_version() + 1, "notes table", _v2_notes))
    start = threading.Barrier(len(stores))
    results: list[int] = []
    errors: list[BaseException] = []

    def run(store: Store) -> None:
        start.wait()
        try:
            results.append(migrate(store.engine, migrations=extended))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert results == [head_version() + 1] * len(stores)
    assert [v for v, _ in versions(stores[0])] == list(range(1, head_version() + 2))


def test_findings_stored_before_severity_existed_read_back_without_one(
    open_store: Callable[..., Store],
) -> None:
    store = open_store(migrate=False)
    before = [m for m in MIGRATIONS if m.version < 10]
    assert migrate(store.engine, migrations=before) == 9
    with store.engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO findings (request_id, route, target, arm, analyzer, name, "
                "created_at, value, detail) VALUES ('r-old', 'bot', 'prod', 'primary', "
                "'refusal', 'refused', :at, 1.0, '')"
            ),
            {"at": test_store.T0},
        )
    assert store.migrate() == head_version()
    indexes = {index["name"] for index in sa.inspect(store.engine).get_indexes("findings")}
    assert "ix_findings_pair_id" in indexes  # the rollout judge joins findings to pairs
    store.write_batch(
        [
            FindingRecord(
                request_id="r-new", route="bot", target="prod", arm=Arm.PRIMARY,
                analyzer="refusal", name="refused", created_at=test_store.T0, value=1.0,
                severity="warning",
            )
        ]
    )  # fmt: skip
    found = {f.request_id: f.severity for f in store.query_findings(route="bot")}
    assert found == {"r-old": None, "r-new": "warning"}
    assert [f.request_id for f in store.query_findings(analyzer="judge")] == []


def test_a_database_at_head_is_not_locked_to_find_nothing_to_do(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'at-head.db'}"
    with Store(url) as writer, Store(url, busy_timeout_ms=50) as starting:
        writer.migrate()
        with writer.engine.connect() as conn:
            conn.execution_options(**{SQLITE_BEGIN_OPTION: "IMMEDIATE"})
            with conn.begin():  # another process holds the write lock, for as long as it likes
                # A start that took the lock to look would wait 50 ms for it, then fail.
                assert starting.migrate() == head_version()


def test_items_queued_before_the_tallies_existed_are_counted_by_the_migration(
    open_store: Callable[..., Store],
) -> None:
    store = open_store(migrate=False)
    assert migrate(store.engine, migrations=[m for m in MIGRATIONS if m.version < 18]) == 17
    with later_exchange_columns(store):  # the writer writes today's exchanges
        store.write_batch(shadow_pair(1) + shadow_pair(2) + shadow_pair(3))
    reviews = ReviewStore(store)
    c3, c2, c1 = reviews.candidates("support-bot", ANY_VERSION, since=T0)
    done, half, skipped = queued(c1), queued(c2, wanted=2), queued(c3)
    reviews.enqueue([done, half, skipped])  # the items' columns of before only
    old = [(done, "alice", False), (half, "alice", False), (skipped, "alice", True)]
    with store.engine.begin() as conn:
        for item, reviewer, skip in old:
            conn.execute(
                sa.text(
                    "INSERT INTO reviews (item_id, reviewer_id, score_a, score_b, preference, "
                    "skipped, created_at) VALUES (:item, :who, 4, 2, 'A', :skip, :at)"
                ),
                {"item": item.item_id, "who": reviewer, "skip": skip, "at": T0},
            )
    assert store.migrate() == head_version()
    (count,) = reviews.queues()
    assert (count.open, count.reviews) == (2, 2)  # `done` is closed; a skip is no review
    assert reviews.next_item("support-bot", ANY_VERSION, "bob") == half  # a second review first
    assert reviews.next_item("support-bot", ANY_VERSION, "alice") is None
    assert reviews.add(review(half, "bob"))
    assert reviews.next_item("support-bot", ANY_VERSION, "bob") == skipped


def test_exchanges_of_before_the_sticky_units_read_back_without_one(
    open_store: Callable[..., Store],
) -> None:
    store = open_store(migrate=False)
    assert migrate(store.engine, migrations=[m for m in MIGRATIONS if m.version < 19]) == 18
    with later_exchange_columns(store):
        store.write_batch([make_record(request_id="old")])
    assert store.migrate() == head_version()
    store.write_batch([dataclasses.replace(make_record(request_id="new"), sticky_unit="ab" * 12)])
    units = {r.request_id: r.sticky_unit for r in store.query()}
    assert units == {"old": None, "new": "ab" * 12}
    check = CheckRecord("new", "support-bot", "prod", Arm.PRIMARY, "r", "v1", "c", "pass", "",
                        T0, sticky_unit="ab" * 12)  # fmt: skip
    store.write_batch([check])
    assert [c.sticky_unit for c in store.query_checks()] == ["ab" * 12]
    indexes = {i["name"] for i in sa.inspect(store.engine).get_indexes("exchanges")}
    assert "ix_exchanges_route_started_sticky" in indexes
