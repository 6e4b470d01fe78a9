"""The store: exchange records in SQLite or PostgreSQL, and back out as frozen records.

`Store` owns the SQLAlchemy engine and the `exchanges` table. Everything outside this module sees
`ExchangeRecord`; the ORM row class `ExchangeRow` never leaves it. The store is synchronous: the
recorder calls it from its writer thread, and the event loop only ever calls `ping`, through
`anyio.to_thread.run_sync` (or `asyncio.to_thread`).

The store writes records as given; the `store.bodies` policy is applied to them earlier, by the
recorder, and to the other tables' text by their query objects, through the store's `StoredText`
(`proxy.store.redaction`). Two normalisations happen here so both backends hold the same thing:
times are stored as UTC (a naive datetime is taken to be UTC already), and text PostgreSQL cannot
hold (NUL, lone surrogates) is replaced by U+FFFD in every statement's parameters, for every table,
at the engine (`normalised_parameters`), so no caller has to remember it. The exchange rows and
their check results, the recorder's bulk, go to the driver directly
(`proxy.store.exchange_insert`), which applies the same two.

Errors: every failure leaves this module as a `StoreError` (the tree: `proxy.store`), translated
by `proxy.store.errors.translated`.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine, make_url
from sqlmodel import Field, SQLModel

from proxy.core import (
    Arm,
    CheckRecord,
    ExchangeRecord,
    FindingRecord,
    PairRecord,
    ProbeRecord,
    Status,
    StoredRecord,
    Usage,
    as_utc,
)

from . import migrations
from .checks import (
    checks_table,
    finding_to_row,
    findings_table,
    row_to_check,
    row_to_finding,
)
from .errors import (
    RecordRejectedError,
    SchemaVersionError,
    StoreError,
    StoreUnavailableError,
    translated,
)
from .exchange_insert import check_row, exchange_rows, insert_check_rows, insert_exchange_rows
from .migrations import SQLITE_BEGIN_OPTION
from .pairs import pair_to_row, pairs_table, row_to_pair
from .probes import probe_results_table, probe_to_row
from .redaction import BodiesPolicy, StoredText
from .rollouts import alert_claims as claims_table
from .rollouts import verdicts as verdicts_table
from .text_boundary import normalised_parameters

__all__ = [
    "RecordRejectedError",
    "SchemaVersionError",
    "Store",
    "StoreError",
    "StoreUnavailableError",
]

_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_WAL_AUTOCHECKPOINT_PAGES = 10_000
_WAL_SIZE_LIMIT_BYTES = 64 * 1024 * 1024
RETENTION_LOCK_CLASS = migrations.ADVISORY_LOCK_CLASS + 2
"""First key of the advisory lock a retention chunk holds on PostgreSQL (the second is the
schema's hash): one replica purges at a time (`Store.delete_older_than`)."""
_TRY_RETENTION_LOCK = sa.text(
    f"SELECT pg_try_advisory_xact_lock({RETENTION_LOCK_CLASS}, hashtext(current_schema()))"
)


class ExchangeRow(SQLModel, table=True):
    """One `ExchangeRecord` as a row of `exchanges` (the schema is built by migration 1).

    `request_id` is not unique: the primary, its shadows and a replay all share it.
    """

    __tablename__ = "exchanges"
    __table_args__ = (
        sa.Index("ix_exchanges_route_started_at", "route", "started_at"),
        sa.Index("ix_exchanges_started_at", "started_at"),
        sa.Index("ix_exchanges_request_id", "request_id"),
        sa.Index("ix_exchanges_pair_id", "pair_id"),
        sa.Index("ix_exchanges_operation_route", "operation_id", "route"),
        sa.Index("ix_exchanges_route_experiment_arm", "route", "experiment_arm"),
        sa.Index(
            "ix_exchanges_route_started_sticky",
            "route",
            "started_at",
            sqlite_where=sa.text("sticky_unit IS NOT NULL"),
            postgresql_where=sa.text("sticky_unit IS NOT NULL"),
        ),
    )

    id: int | None = Field(
        default=None,
        sa_column=sa.Column(
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
    )
    request_id: str
    route: str
    target: str
    upstream_model: str
    arm: str
    endpoint: str
    provider: str
    streamed: bool
    started_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    duration_s: float
    ttft_s: float | None = None
    overhead_s: float
    status: str
    http_status: int
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    usage_estimated: bool = False
    cost_usd: float = 0.0
    error_class: str | None = None
    rule: str | None = None
    rule_version: str | None = None
    pair_id: str | None = None
    tags: str = Field(default="[]", sa_column=sa.Column(sa.Text(), nullable=False))
    """JSON array of strings."""
    request_body: str | None = Field(default=None, sa_column=sa.Column(sa.Text(), nullable=True))
    response_body: str | None = Field(default=None, sa_column=sa.Column(sa.Text(), nullable=True))
    response_text: str | None = Field(default=None, sa_column=sa.Column(sa.Text(), nullable=True))
    operation_id: str | None = None
    """The business operation (migration 14); NULL for exchanges of none."""
    experiment_arm: str | None = None
    experiment_unit: str | None = None
    sticky_unit: str | None = None
    """The request's sticky unit, a keyed hash (migration 19); NULL without a sticky key."""


_exchanges: sa.Table = ExchangeRow.__table__  # type: ignore[attr-defined]
exchanges_table = _exchanges
"""The `exchanges` table, for the store's other query objects (rule versions, judge windows)."""
T = TypeVar("T")
_insert_pair = sa.insert(pairs_table)


class Store:
    """Exchange records in one database, reachable through one engine.

    `url` is a SQLAlchemy URL: `sqlite:///path/to/file.db` (the directory must exist) or
    `postgresql+psycopg://user@host/db` (`postgresql://` is taken to mean psycopg 3). `schema` puts
    every table in that PostgreSQL schema (created by `migrate` if missing). Call `migrate()` once
    at start, before writing.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        busy_timeout_ms: int = 5000,
        connect_timeout_s: float = 5.0,
        bodies: BodiesPolicy = "full",
    ) -> None:
        self._schema = schema
        self.text = StoredText(bodies)
        """`store.bodies` for the text the query objects write (reasons, corrections, diffs)."""
        with translated(f"opening the store at {masked_url(url)}"):
            self._engine = _create_engine(url, schema, busy_timeout_ms, connect_timeout_s)
        event.listen(self._engine, "before_cursor_execute", normalised_parameters, retval=True)
        self.display_url = masked_url(url)
        """`url` with any password hidden, for messages and reports."""
        self._file = _sqlite_file(url)
        self._file_identity: tuple[int, int] | None = None
        self._file_lock = threading.Lock()

    @classmethod
    def existing(cls, url: str) -> Store:
        """The store at `url` if it already exists with the schema this code reads; never
        created or migrated, so a read-only tool (the report) is safe against production.

        Raises `StoreError` when a SQLite file does not exist, `SchemaVersionError` when the
        schema is older than this code reads (start the gateway once to migrate it) and any
        other `StoreError` of opening it.
        """
        with translated(f"{url!r} is not a database URL"):
            parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite":
            database = Path(parsed.database or "")
            if not database.is_file():
                raise StoreError(
                    f"no database at {database} (store.url {url}); "
                    "has `mirrorgate serve` recorded traffic with this config?"
                )
        store = cls(url)
        try:
            version = store.schema_version()
        except BaseException:
            store.close()
            raise
        if version < migrations.head_version():
            store.close()
            raise SchemaVersionError(
                f"the store's schema is at version {version}, this mirrorgate reads version "
                f"{migrations.head_version()}: start `mirrorgate serve` once to migrate it"
            )
        return store

    @property
    def engine(self) -> Engine:
        """The engine, for the store's own query objects (`FeedbackStore`, `RolloutStore`, …)
        that keep their tables in this database. Nothing outside `proxy.store` uses it."""
        return self._engine

    @property
    def backend(self) -> Literal["sqlite", "postgresql"]:
        return "sqlite" if self._engine.dialect.name == "sqlite" else "postgresql"

    def schema_version(self) -> int:
        """The schema version recorded in the database; 0 for a database never migrated."""
        with translated("reading the schema version"):
            return migrations.current_version(self._engine)

    def migrate(self) -> int:
        """Bring the schema to the newest version this code knows; return that version.

        Safe to call from several processes at once. Raises `SchemaVersionError` when the database
        is newer than the code.
        """
        with translated("migrating the schema"):
            version = migrations.migrate(self._engine, schema=self._schema)
        self._file_identity = _identity(self._file)
        return version

    def file_problem(self) -> str | None:
        """Why the SQLite file at the configured path is not the one this store has open (it
        was deleted, or replaced by another file), or None: it is, or the store is PostgreSQL.
        SQLite keeps writing into a deleted file's inode, where nobody can read the rows."""
        if self._file is None or self._file_identity is None:
            return None
        now = _identity(self._file)
        if now is None:
            return f"the database file {self._file} was deleted"
        if self._file_identity == _CLOSED:
            return f"the database file {self._file} was deleted and is not open again yet"
        if now != self._file_identity:
            return f"the database file {self._file} was replaced by another file"
        return None

    def reopen_if_replaced(self) -> str | None:
        """When `file_problem` finds one: close every connection, open the file at the path
        anew (created, and migrated, if missing) and return the problem that was repaired; None
        when there was nothing to repair. Raises `StoreError`s (`StoreUnavailableError` while the
        file cannot be made, e.g. its directory is gone too)."""
        problem = self.file_problem()
        if problem is None:
            return None
        with self._file_lock:
            if self.file_problem() is None:
                return None  # another thread repaired it
            self._engine.dispose()
            # Nothing holds the old file open now: a new file at the path may get its inode
            # number, so no file counts as the open one until `migrate` has opened it.
            self._file_identity = _CLOSED
            directory = Path(self._file or "").parent
            if not directory.is_dir():
                raise StoreUnavailableError(f"{problem}, and its directory is gone")
            try:
                self.migrate()
            except StoreError as exc:  # whatever it is, the records wait: never refused for it
                raise StoreUnavailableError(f"{problem}; opening it anew failed: {exc}") from exc
        return problem

    def write_batch(self, records: Sequence[StoredRecord]) -> None:
        """Insert `records` (exchanges, pairs, check results, findings, probe results) in one
        transaction: all are stored, or none."""
        if not records:
            return
        try:
            sqlite = self.backend == "sqlite"
            exchanges = [r for r in records if isinstance(r, ExchangeRecord)]
            rows = exchange_rows(exchanges, sqlite=sqlite)
            pairs = [pair_to_row(r) for r in records if isinstance(r, PairRecord)]
            checks = [check_row(r, sqlite=sqlite) for r in records if isinstance(r, CheckRecord)]
            findings = [finding_to_row(r) for r in records if isinstance(r, FindingRecord)]
            probes = [probe_to_row(r) for r in records if isinstance(r, ProbeRecord)]
        except (TypeError, ValueError, AttributeError) as exc:
            raise RecordRejectedError(f"cannot store record: {exc}") from exc
        with translated(f"writing {len(rows)} records", writing=True), self._engine.begin() as conn:
            if rows:
                insert_exchange_rows(conn, rows)
            if pairs:
                conn.execute(_insert_pair, pairs)
            if checks:
                insert_check_rows(conn, checks)
            if findings:
                conn.execute(sa.insert(findings_table), findings)
            if probes:
                conn.execute(sa.insert(probe_results_table), probes)

    def exchange_keys(self, request_ids: Sequence[str]) -> set[tuple[str, str, str]]:
        """(request_id, arm, target) of every stored exchange of `request_ids`: what the crash
        journal's replay checks before inserting, so that a record is never stored twice."""
        if not request_ids:
            return set()
        c = _exchanges.c
        statement = sa.select(c.request_id, c.arm, c.target).where(
            c.request_id.in_(list(request_ids))
        )
        with translated("reading exchange keys"), self._engine.connect() as conn:
            return {(row[0], row[1], row[2]) for row in conn.execute(statement)}

    def count(
        self,
        *,
        route: str | None = None,
        target: str | None = None,
        arm: Arm | None = None,
        request_id: str | None = None,
        pair_id: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> int:
        """Number of stored records matching every filter given (`since` ≤ started_at < `until`)."""
        where = _conditions(
            route=route,
            target=target,
            arm=arm,
            request_id=request_id,
            pair_id=pair_id,
            since=since,
            until=until,
        )
        statement = sa.select(sa.func.count()).select_from(_exchanges).where(*where)
        with translated("counting records"), self._engine.connect() as conn:
            return int(conn.execute(statement).scalar_one())

    def query(
        self,
        *,
        route: str | None = None,
        target: str | None = None,
        arm: Arm | None = None,
        request_id: str | None = None,
        pair_id: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 1000,
        newest_first: bool = False,
    ) -> list[ExchangeRecord]:
        """Stored records matching every filter given, oldest first (or newest first), at most
        `limit` of them. Records written in one batch keep their order."""
        where = _conditions(
            route=route,
            target=target,
            arm=arm,
            request_id=request_id,
            pair_id=pair_id,
            since=since,
            until=until,
        )
        order = (
            (_exchanges.c.started_at.desc(), _exchanges.c.id.desc())
            if newest_first
            else (_exchanges.c.started_at, _exchanges.c.id)
        )
        statement = sa.select(_exchanges).where(*where).order_by(*order).limit(limit)
        with translated("querying records"), self._engine.connect() as conn:
            return [_to_record(row) for row in conn.execute(statement).mappings()]

    def query_pairs(
        self,
        *,
        route: str | None = None,
        kind: str | None = None,
        candidate: str | None = None,
        request_id: str | None = None,
        since: datetime | None = None,
        limit: int = 100_000,
    ) -> list[PairRecord]:
        """Stored pairs matching every filter given, oldest first, at most `limit`."""
        c = pairs_table.c
        filters = ((c.route, route), (c.kind, kind), (c.candidate_target, candidate),
                   (c.request_id, request_id))  # fmt: skip
        return self._select(pairs_table, row_to_pair, filters, since, limit, "reading pairs")

    def query_checks(
        self,
        *,
        route: str | None = None,
        rule: str | None = None,
        request_id: str | None = None,
        since: datetime | None = None,
        limit: int = 1_000_000,
    ) -> list[CheckRecord]:
        """Stored check results matching every filter given, oldest first, at most `limit`."""
        c = checks_table.c
        filters = ((c.route, route), (c.rule, rule), (c.request_id, request_id))
        return self._select(checks_table, row_to_check, filters, since, limit, "reading checks")

    def query_findings(
        self,
        *,
        route: str | None = None,
        analyzer: str | None = None,
        request_id: str | None = None,
        since: datetime | None = None,
        limit: int = 1_000_000,
    ) -> list[FindingRecord]:
        """Stored findings matching every filter given, oldest first, at most `limit`."""
        c = findings_table.c
        filters = ((c.route, route), (c.analyzer, analyzer), (c.request_id, request_id))
        action = "reading findings"
        return self._select(findings_table, row_to_finding, filters, since, limit, action)

    def _select(
        self,
        table: sa.Table,
        convert: Callable[[sa.RowMapping], T],
        filters: Iterable[tuple[sa.ColumnElement[Any], object]],
        since: datetime | None,
        limit: int,
        action: str,
    ) -> list[T]:
        """Rows of `table` whose columns equal every non-None filter value (and created at or
        after `since`), oldest first, converted."""
        where = [column == value for column, value in filters if value is not None]
        if since is not None:
            where.append(table.c.created_at >= _utc(since))
        statement = sa.select(table).where(*where).order_by(table.c.id).limit(limit)
        with translated(action), self._engine.connect() as conn:
            return [convert(row) for row in conn.execute(statement).mappings()]

    def delete_older_than(self, cutoff: datetime, *, limit: int | None = None) -> int:
        """Delete records that started before `cutoff`; return how many were deleted.

        With `limit`, delete at most that many (the oldest), so a large purge can be spread over
        several short transactions instead of holding the write lock for one long one.

        On PostgreSQL every replica's (and every worker's) recorder purges, but one at a time:
        each chunk's transaction first tries a transaction-scoped advisory lock, and a replica
        that finds it held deletes nothing and returns 0, which ends its purge until its next
        interval. Without it, N replicas choose the same oldest rows at once, wait for each
        other's row locks and find them gone.
        """
        old = _exchanges.c.started_at < _utc(cutoff)
        if limit is None:
            statement = sa.delete(_exchanges).where(old)
        else:
            oldest = sa.select(_exchanges.c.id).where(old).order_by(_exchanges.c.started_at)
            statement = sa.delete(_exchanges).where(
                _exchanges.c.id.in_(oldest.limit(limit).scalar_subquery())
            )
        old_pairs = sa.delete(pairs_table).where(pairs_table.c.created_at < _utc(cutoff))
        old_checks = sa.delete(checks_table).where(checks_table.c.created_at < _utc(cutoff))
        old_findings = sa.delete(findings_table).where(findings_table.c.created_at < _utc(cutoff))
        old_verdicts = sa.delete(verdicts_table).where(verdicts_table.c.created_at < _utc(cutoff))
        old_claims = sa.delete(claims_table).where(claims_table.c.created_at < _utc(cutoff))
        with translated("deleting old records"), self._engine.begin() as conn:
            if self.backend == "postgresql" and not conn.execute(_TRY_RETENTION_LOCK).scalar():
                return 0  # another replica is purging
            deleted = int(conn.execute(statement).rowcount)
            conn.execute(old_pairs)
            conn.execute(old_checks)
            conn.execute(old_findings)
            conn.execute(old_verdicts)
            conn.execute(old_claims)  # Alertmanager stops redelivering long before
            return deleted

    def ping(self, timeout_s: float = 2.0) -> bool:
        """True when the database answers `SELECT 1`. Never raises; meant for /readyz.

        On PostgreSQL the query is bounded by `timeout_s` and reaching the server by the store's
        `connect_timeout_s`.
        """
        try:
            with self._engine.connect() as conn:
                if self.backend == "postgresql":
                    conn.execute(
                        sa.text("SELECT set_config('statement_timeout', :ms, true)"),
                        {"ms": str(max(1, int(timeout_s * 1000)))},
                    )
                return conn.execute(sa.text("SELECT 1")).scalar() == 1
        except Exception:
            return False

    def close(self) -> None:
        """Close every pooled connection. The store must not be used afterwards."""
        self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _create_engine(
    url: str, schema: str | None, busy_timeout_ms: int, connect_timeout_s: float
) -> Engine:
    with translated(f"{url!r} is not a database URL"):
        parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if schema is not None:
            raise ValueError("schema= is only for PostgreSQL")
        database = parsed.database or ""
        if database in ("", ":memory:") or database.startswith("file:"):
            raise StoreError(
                f"{url}: in-memory SQLite is not supported (the recorder writes from its own "
                "thread); use a file, e.g. sqlite:///mirrorgate.db"
            )
        directory = Path(database).expanduser().resolve().parent
        if not directory.is_dir():
            raise StoreError(f"{url}: the directory {directory} does not exist")
        engine = sa.create_engine(
            parsed,
            connect_args={"timeout": busy_timeout_ms / 1000, "check_same_thread": False},
        )
        event.listen(engine, "connect", _sqlite_connect_hook(busy_timeout_ms))
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    if parsed.get_backend_name() == "postgresql":
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        # Options given in the URL (`?options=-csearch_path%3Dx`) are kept: connect_args would
        # otherwise replace them.
        options = " ".join(
            filter(None, [_query_value(parsed.query.get("options")), "-ctimezone=UTC"])
        )
        if schema is not None:
            if not _SCHEMA_NAME.match(schema):
                raise ValueError(f"schema {schema!r} is not a plain SQL identifier")
            options += f" -csearch_path={schema}"
        return sa.create_engine(
            parsed,
            pool_pre_ping=True,
            pool_size=5,
            max_overflow=10,
            connect_args={
                "connect_timeout": max(2, round(connect_timeout_s)),
                "options": options,
                "application_name": "mirrorgate",
            },
        )
    raise StoreError(f"{url}: unsupported database (use sqlite:/// or postgresql+psycopg://)")


def masked_url(url: str) -> str:
    """`url` with its password shown as `***`, for messages (what follows the last `@` when
    it is not a URL sqlalchemy can parse: nothing of it that could be a password)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url.rsplit("@", 1)[-1]


def _sqlite_file(url: str) -> Path | None:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        return None
    return Path(parsed.database).expanduser().resolve()


_CLOSED = (-1, -1)
"""The identity of no file: the store closed the one it had and has not opened one since."""


def _identity(path: Path | None) -> tuple[int, int] | None:
    """(device, inode) of the file at `path`; None when there is none."""
    if path is None:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def _query_value(value: str | tuple[str, ...] | None) -> str | None:
    return value[-1] if isinstance(value, tuple) else value


def _sqlite_connect_hook(busy_timeout_ms: int) -> Any:
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's `begin` hook, not the sqlite3 module, decide when transactions start.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            cursor.execute("PRAGMA foreign_keys=ON")
            # Checkpoint every ~40 MB of WAL instead of every 4 MB: index pages rewritten by many
            # batches are copied back once, which makes sustained writes about a third faster.
            # journal_size_limit truncates the WAL file back afterwards.
            cursor.execute(f"PRAGMA wal_autocheckpoint={_WAL_AUTOCHECKPOINT_PAGES}")
            cursor.execute(f"PRAGMA journal_size_limit={_WAL_SIZE_LIMIT_BYTES}")
        finally:
            cursor.close()

    return on_connect


def _sqlite_begin(conn: Connection) -> None:
    mode = conn.get_execution_options().get(SQLITE_BEGIN_OPTION, "DEFERRED")
    conn.exec_driver_sql(f"BEGIN {'IMMEDIATE' if mode == 'IMMEDIATE' else 'DEFERRED'}")


_utc = as_utc


def _to_record(row: sa.RowMapping) -> ExchangeRecord:
    return ExchangeRecord(
        request_id=row["request_id"],
        route=row["route"],
        target=row["target"],
        upstream_model=row["upstream_model"],
        arm=Arm(row["arm"]),
        endpoint=row["endpoint"],
        provider=row["provider"],
        streamed=bool(row["streamed"]),
        started_at=_utc(row["started_at"]),
        duration_s=row["duration_s"],
        ttft_s=row["ttft_s"],
        overhead_s=row["overhead_s"],
        status=Status(row["status"]),
        http_status=row["http_status"],
        usage=Usage(
            input_tokens=row["input_tokens"],
            output_tokens=row["output_tokens"],
            cached_input_tokens=row["cached_input_tokens"],
            cache_write_tokens=row["cache_write_tokens"],
            reasoning_tokens=row["reasoning_tokens"],
            estimated=bool(row["usage_estimated"]),
        ),
        cost_usd=row["cost_usd"],
        error_class=row["error_class"],
        rule=row["rule"],
        rule_version=row["rule_version"],
        pair_id=row["pair_id"],
        tags=tuple(json.loads(row["tags"])),
        request_body=row["request_body"],
        response_body=row["response_body"],
        response_text=row["response_text"],
        operation_id=row["operation_id"],
        experiment_arm=row["experiment_arm"],
        experiment_unit=row["experiment_unit"],
        sticky_unit=row["sticky_unit"],
    )


def _conditions(
    *,
    route: str | None,
    target: str | None,
    arm: Arm | None,
    request_id: str | None,
    pair_id: str | None,
    since: datetime | None,
    until: datetime | None,
) -> list[sa.ColumnElement[bool]]:
    c = _exchanges.c
    where: list[sa.ColumnElement[bool]] = []
    for column, value in (
        (c.route, route),
        (c.target, target),
        (c.arm, arm.value if arm is not None else None),
        (c.request_id, request_id),
        (c.pair_id, pair_id),
    ):
        if value is not None:
            where.append(column == value)
    if since is not None:
        where.append(c.started_at >= _utc(since))
    if until is not None:
        where.append(c.started_at < _utc(until))
    return where
