"""Exchange and check rows written on the driver's cheapest path, inside the store's transaction.

The recorder writes every exchange, so this insert is the store's hottest statement: through
SQLAlchemy Core's `executemany` each row cost some 25 µs of the writer thread's GIL (a parameter
dict per row, bind processors, the engine's hooks), time the event loop waits for. Here the rows
are plain tuples handed to the driver on the connection SQLAlchemy holds for the transaction:

- SQLite: the stdlib `sqlite3` cursor's `executemany` (it releases the GIL while SQLite steps);
- PostgreSQL: psycopg 3's `COPY exchanges (...) FROM STDIN` with `write_row` (formatted in C by
  psycopg's binary build): 19 µs of the writer's CPU per row against the Core insert's 55
  (bench/README.md, "Store writes"; psycopg's pipelined `executemany` was not measured beside it).

A route with a rule adds one `check_results` row per check to every answer (five checks, five
rows): through Core they cost ~14 µs of the writer's CPU each, more than the exchange row they
belong to; they take the same path (`check_row`, `insert_check_rows`).

What is stored is exactly what the Core insert stored: the same columns and values, times as UTC
(SQLite: SQLAlchemy's `DATETIME` text form), tags as a JSON array, every string through
`text_boundary.storable` (the engine's hook does not see these statements). The caller's
transaction holds them: the batch commits or fails as a whole. Driver errors leave as SQLAlchemy's
(`errors.driver_errors`), so `errors.translated` classifies them as it does every other.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection

from proxy.core import CheckRecord, ExchangeRecord, as_utc

from .errors import driver_errors
from .text_boundary import storable

COLUMNS = (
    "request_id", "route", "target", "upstream_model", "arm", "endpoint", "provider", "streamed",
    "started_at", "duration_s", "ttft_s", "overhead_s", "status", "http_status", "input_tokens",
    "output_tokens", "cached_input_tokens", "cache_write_tokens", "reasoning_tokens",
    "usage_estimated", "cost_usd", "error_class", "rule", "rule_version", "pair_id", "tags",
    "request_body", "response_body", "response_text", "operation_id", "experiment_arm",
    "experiment_unit", "sticky_unit",
)  # fmt: skip
"""Every column of `exchanges` but `id`, in the order of `exchange_row`'s values."""

_COLUMN_LIST = ", ".join(COLUMNS)
_SQLITE_INSERT = f"INSERT INTO exchanges ({_COLUMN_LIST}) VALUES ({', '.join('?' * len(COLUMNS))})"
_POSTGRES_COPY = f"COPY exchanges ({_COLUMN_LIST}) FROM STDIN"


CHECK_COLUMNS = (
    "request_id", "route", "target", "arm", "rule", "rule_version", "check_name", "result",
    "reason", "created_at", "pair_id", "sticky_unit",
)  # fmt: skip
"""Every column of `check_results` but `id`, in the order of `check_row`'s values."""

_CHECK_LIST = ", ".join(CHECK_COLUMNS)
_SQLITE_CHECK_INSERT = (
    f"INSERT INTO check_results ({_CHECK_LIST}) VALUES ({', '.join('?' * len(CHECK_COLUMNS))})"
)
_POSTGRES_CHECK_COPY = f"COPY check_results ({_CHECK_LIST}) FROM STDIN"


def _text(value: str | None) -> str | None:
    return None if value is None else storable(value)


def exchange_row(record: ExchangeRecord, *, sqlite: bool) -> tuple[Any, ...]:
    """`record` as the values of `COLUMNS`, ready for the driver of SQLite or PostgreSQL."""
    usage = record.usage
    return (
        storable(record.request_id),
        storable(record.route),
        storable(record.target),
        storable(record.upstream_model),
        record.arm.value,
        storable(record.endpoint),
        storable(record.provider),
        # SQLite has no boolean: SQLAlchemy stored 0/1, and so does this.
        int(record.streamed) if sqlite else record.streamed,
        _stored_time(record.started_at, sqlite=sqlite),
        float(record.duration_s),
        None if record.ttft_s is None else float(record.ttft_s),
        float(record.overhead_s),
        record.status.value,
        record.http_status,
        usage.input_tokens,
        usage.output_tokens,
        usage.cached_input_tokens,
        usage.cache_write_tokens,
        usage.reasoning_tokens,
        int(usage.estimated) if sqlite else usage.estimated,
        float(record.cost_usd),
        _text(record.error_class),
        _text(record.rule),
        _text(record.rule_version),
        _text(record.pair_id),
        storable(json.dumps(list(record.tags))) if record.tags else "[]",
        _text(record.request_body),
        _text(record.response_body),
        _text(record.response_text),
        _text(record.operation_id),
        _text(record.experiment_arm),
        _text(record.experiment_unit),
        _text(record.sticky_unit),
    )


def _stored_time(value: datetime, *, sqlite: bool) -> datetime | str:
    """An aware time as the column stores it: UTC, and on SQLite SQLAlchemy's `DATETIME` text
    (naive, with microseconds, which sorts as time does)."""
    utc = as_utc(value)
    return utc.replace(tzinfo=None).isoformat(" ", "microseconds") if sqlite else utc


def check_row(record: CheckRecord, *, sqlite: bool) -> tuple[Any, ...]:
    """`record` as the values of `CHECK_COLUMNS`, ready for the driver of SQLite or PostgreSQL."""
    return (
        storable(record.request_id),
        storable(record.route),
        storable(record.target),
        record.arm.value,
        storable(record.rule),
        storable(record.rule_version),
        storable(record.check),
        storable(record.result),
        storable(record.reason),
        _stored_time(record.created_at, sqlite=sqlite),
        _text(record.pair_id),
        _text(record.sticky_unit),
    )


def exchange_rows(records: Sequence[ExchangeRecord], *, sqlite: bool) -> list[tuple[Any, ...]]:
    """The rows of `records` (raises `TypeError`/`ValueError`/`AttributeError` for a record
    whose fields are not what `ExchangeRecord` declares: nothing is sent then)."""
    return [exchange_row(record, sqlite=sqlite) for record in records]


def insert_exchange_rows(conn: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert `rows` (from `exchange_rows`, for `conn`'s backend) into `exchanges` in `conn`'s
    transaction, begun by the caller. Raises SQLAlchemy's errors (`driver_errors`)."""
    _insert(conn, rows, _SQLITE_INSERT, _POSTGRES_COPY)


def insert_check_rows(conn: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert `rows` (from `check_row`) into `check_results`, as `insert_exchange_rows` does."""
    _insert(conn, rows, _SQLITE_CHECK_INSERT, _POSTGRES_CHECK_COPY)


def _insert(
    conn: Connection, rows: Sequence[tuple[Any, ...]], sqlite_insert: str, copy: str
) -> None:
    sqlite = conn.dialect.name == "sqlite"
    statement = sqlite_insert if sqlite else copy
    with driver_errors(conn, statement):
        driver = conn.connection.driver_connection
        assert driver is not None  # a connection in a transaction is checked out, never detached
        cursor = driver.cursor()
        try:
            if sqlite:
                cursor.executemany(statement, rows)
            else:
                with cursor.copy(statement) as copier:
                    write_row = copier.write_row
                    for row in rows:
                        write_row(row)
        finally:
            cursor.close()
