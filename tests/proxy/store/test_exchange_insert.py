"""The exchange and check rows' driver path stores exactly what SQLAlchemy Core's insert stored.

Each test writes the same records twice into one database: through `Store.write_batch` (the
driver's `executemany` on SQLite, `COPY` on PostgreSQL) and through a Core `insert` with the
parameter dicts the store used to build (`core_row`, kept here as the reference). The rows are
read back raw, as the driver returns them, and compared column by column (on SQLite the storage
class of every value too)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from proxy.core import as_utc
from proxy.core.records import Arm, CheckRecord, ExchangeRecord, Status, Usage
from proxy.store.checks import checks_table
from proxy.store.exchange_insert import CHECK_COLUMNS, COLUMNS
from proxy.store.exchanges import RecordRejectedError, Store, exchanges_table
from tests.proxy.store.test_exchanges import db_url, make_record, open_store

__all__ = ["db_url", "open_store"]  # fixtures, used by name


def core_row(record: ExchangeRecord, prefix: str) -> dict[str, Any]:
    """The parameters the store gave SQLAlchemy Core's insert before the driver path."""
    usage = record.usage
    return {
        "request_id": prefix + record.request_id,
        "route": record.route,
        "target": record.target,
        "upstream_model": record.upstream_model,
        "arm": record.arm.value,
        "endpoint": record.endpoint,
        "provider": record.provider,
        "streamed": record.streamed,
        "started_at": as_utc(record.started_at),
        "duration_s": record.duration_s,
        "ttft_s": record.ttft_s,
        "overhead_s": record.overhead_s,
        "status": record.status.value,
        "http_status": record.http_status,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cached_input_tokens": usage.cached_input_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
        "usage_estimated": usage.estimated,
        "cost_usd": record.cost_usd,
        "error_class": record.error_class,
        "rule": record.rule,
        "rule_version": record.rule_version,
        "pair_id": record.pair_id,
        "tags": json.dumps(list(record.tags)) if record.tags else "[]",
        "request_body": record.request_body,
        "response_body": record.response_body,
        "response_text": record.response_text,
        "operation_id": record.operation_id,
        "experiment_arm": record.experiment_arm,
        "experiment_unit": record.experiment_unit,
        "sticky_unit": record.sticky_unit,
    }


def records() -> list[ExchangeRecord]:
    chat = json.dumps({"messages": [{"role": "user", "content": "Où est mon colis ? 包裹 📦"}]})
    large = json.dumps({"messages": [{"content": "línea\tcon\\barra\r\n" * 60_000}]})
    return [
        make_record(request_id="minimal"),  # every optional column NULL
        make_record(
            request_id="full-unicode",
            route="rôute-✓",
            arm=Arm.SHADOW,
            streamed=True,
            started_at=datetime(2025, 3, 1, 14, 0, 0, 0, tzinfo=timezone(timedelta(hours=2))),
            duration_s=1,  # an int where a float is declared
            ttft_s=0.05,
            status=Status.TIMEOUT,
            http_status=504,
            usage=Usage(120, 30, 64, 8, 12, estimated=True),
            cost_usd=0,
            error_class="ReadTimeout",
            rule="règle",
            rule_version="v2",
            pair_id="pair-1",
            tags=("replay", "has,comma", "ünï\tcode"),
            request_body=chat,
            response_body="data: {}\n\n\\N\\.\n",  # COPY's NULL and end markers as text
            response_text="שלום Hello ✓ \U0001f600",
            operation_id="ticket 42/a",
            experiment_arm="b",
            experiment_unit="user-7",
            sticky_unit="0f" * 12,
        ),
        make_record(request_id="large", started_at=datetime(2025, 3, 1, 12), request_body=large),
        make_record(
            request_id="unstorable",
            request_body="nul \x00 here",
            response_text="lone \ud800 surrogate",
            tags=("a\x00b",),
        ),
        make_record(request_id="empty-strings", request_body="", response_body="", rule=""),
    ]


def core_check_row(record: CheckRecord, prefix: str) -> dict[str, Any]:
    """The parameters the store gave SQLAlchemy Core's insert of a check result before the
    driver path."""
    return {
        "request_id": prefix + record.request_id,
        "route": record.route,
        "target": record.target,
        "arm": record.arm.value,
        "rule": record.rule,
        "rule_version": record.rule_version,
        "check_name": record.check,
        "result": record.result,
        "reason": record.reason,
        "created_at": as_utc(record.created_at),
        "pair_id": record.pair_id,
        "sticky_unit": record.sticky_unit,
    }


def check_records() -> list[CheckRecord]:
    def check(request_id: str, **fields: Any) -> CheckRecord:
        values: dict[str, Any] = {
            "route": "bot", "target": "m", "arm": Arm.PRIMARY, "rule": "r", "rule_version": "v1",
            "check": "valid-json", "result": "pass", "reason": "valid JSON",
            "created_at": datetime(2025, 3, 1, 12, tzinfo=UTC), "pair_id": None,
        }  # fmt: skip
        return CheckRecord(request_id=request_id, **{**values, **fields})

    return [
        check("minimal"),
        check(
            "full-unicode",
            route="rôute-✓",
            arm=Arm.SHADOW,
            sticky_unit="0e" * 12,
            rule="règle",
            check="order id ✓",
            result="fail",
            reason='$["order id"] is "FR-\\N" \\.\n\tnot ^[A-Z]{2}-\\d+$ 📦',  # COPY's markers
            created_at=datetime(2025, 3, 1, 14, 0, 0, 7, tzinfo=timezone(timedelta(hours=2))),
            pair_id="pair-1",
        ),
        check("unstorable", reason="nul \x00 and lone \ud800 here", rule_version="v\x002"),
        check("empty-strings", rule="", rule_version="", reason=""),
    ]


def raw_rows(
    store: Store, prefix: str, table: str = "exchanges", names: tuple[str, ...] = COLUMNS
) -> dict[str, tuple[Any, ...]]:
    """Every stored row of `table` whose request id starts with `prefix`, as the driver returns
    it, keyed by the request id without the prefix (SQLite: each value with its storage class)."""
    columns = ", ".join(names)
    if store.backend == "sqlite":
        columns += ", " + ", ".join(f"typeof({c})" for c in names)
    with store.engine.connect() as conn:
        result = conn.exec_driver_sql(
            f"SELECT {columns} FROM {table} "
            f"WHERE substr(request_id, 1, {len(prefix)}) = '{prefix}' ORDER BY id"
        )
        return {row[0][len(prefix) :]: tuple(row[1:]) for row in result}


def test_the_driver_path_stores_exactly_what_the_core_insert_stored(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    batch = records()
    store.write_batch([dataclasses.replace(r, request_id="new-" + r.request_id) for r in batch])
    with store.engine.begin() as conn:
        conn.execute(sa.insert(exchanges_table), [core_row(r, "old-") for r in batch])
    new, old = raw_rows(store, "new-"), raw_rows(store, "old-")
    assert list(new) == [r.request_id for r in batch]
    assert new == old
    stored = {r.request_id: r for r in store.query(limit=100)}
    assert stored["new-unstorable"].request_body == "nul \ufffd here"
    assert stored["new-unstorable"].response_text == "lone \ufffd surrogate"
    assert stored["new-large"].request_body == batch[2].request_body
    assert stored["new-full-unicode"].started_at == datetime(2025, 3, 1, 12, tzinfo=UTC)


def test_check_results_on_the_driver_path_are_what_the_core_insert_stored(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    batch = check_records()
    store.write_batch([dataclasses.replace(r, request_id="new-" + r.request_id) for r in batch])
    with store.engine.begin() as conn:
        conn.execute(sa.insert(checks_table), [core_check_row(r, "old-") for r in batch])
    new = raw_rows(store, "new-", "check_results", CHECK_COLUMNS)
    old = raw_rows(store, "old-", "check_results", CHECK_COLUMNS)
    assert list(new) == [r.request_id for r in batch]
    assert new == old
    stored = {c.request_id: c for c in store.query_checks(limit=100)}
    assert stored["new-unstorable"].reason == "nul \ufffd and lone \ufffd here"
    assert stored["new-full-unicode"].reason == batch[1].reason
    assert stored["new-full-unicode"].created_at == datetime(2025, 3, 1, 12, 0, 0, 7, tzinfo=UTC)


def test_a_batch_with_a_record_the_database_refuses_stores_none_of_it(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    good = [make_record(), make_record()]
    with pytest.raises(RecordRejectedError):
        store.write_batch([good[0], make_record(http_status=2**70), good[1]])
    assert store.count() == 0
    store.write_batch(good)  # the connection is usable again
    assert store.count() == 2
