"""How long `evalset build` takes on a large store: a set of 1,000 cases from 1,000,000 stored
exchanges, on SQLite and on PostgreSQL.

    .venv/bin/python -m bench.evalset_build [--rows 1000000] [--size 1000]
        [--pg-url postgresql+psycopg://postgres@127.0.0.1:5432/test] [--no-pg] [--no-sqlite]

The store is seeded in bulk (chunks of 5,000 rows, COPY on PostgreSQL and executemany on
SQLite, bodies of about 300 bytes): 30 tasks by a regex over the user message, three rule
versions (one rare, 1 %), every 50th answer corrected, every 40th with a failed check. Only the
build is timed (`build_set`: the two SQL passes, parsing, dedupe, allocation), not the seeding,
and the build's peak memory (tracemalloc) is printed: it must not grow with the store. SQLite
runs in a temporary directory; PostgreSQL in a temporary schema, dropped afterwards.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import tracemalloc
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from proxy.config import EvalSetSpec
from proxy.replay.evalbuild import build_set
from proxy.store import EvalStore, Store

TASKS = [f"topic{i:02d}" for i in range(30)]
SPEC = EvalSetSpec(task="regex", tasks={t: rf"\b{t}\b" for t in TASKS}, held_out=0.1)
CHUNK = 5000


def _rows(start: int, count: int, now: datetime) -> list[dict[str, Any]]:
    rows = []
    for i in range(start, start + count):
        task = TASKS[(i * 7919) % 97 % len(TASKS)]
        version = "v0" if i % 100 == 0 else ("v1" if i % 3 else "v2")
        body = {
            "model": "support-bot",
            "messages": [
                {"role": "system", "content": f"Shipping rules {version}. max_weight = 150"},
                {"role": "user", "content": f"Question {i} about {task}: where is order {i}?"},
            ],
        }
        rows.append(
            {
                "request_id": f"b-{i}", "route": "support-bot", "target": "prod",
                "upstream_model": "m", "arm": "primary", "endpoint": "chat.completions",
                "provider": "openai", "streamed": False,
                "started_at": now - timedelta(seconds=i % 500_000),
                "duration_s": 0.5, "ttft_s": None, "overhead_s": 0.001, "status": "ok",
                "http_status": 200, "input_tokens": 30, "output_tokens": 10,
                "cached_input_tokens": 0, "cache_write_tokens": 0, "reasoning_tokens": 0,
                "usage_estimated": False, "cost_usd": 0.0001, "error_class": None,
                "rule": "shipping", "rule_version": version, "pair_id": None, "tags": "[]",
                "request_body": json.dumps(body), "response_body": None,
                "response_text": json.dumps({"order": i, "max_weight": 150}),
            }
        )  # fmt: skip
    return rows


def seed(store: Store, total: int, now: datetime) -> float:
    """Bulk-insert `total` exchanges (+ corrections and failed checks); seconds it took."""
    began = time.perf_counter()
    with store.engine.begin() as conn:
        for start in range(0, total, CHUNK):
            rows = _rows(start, min(CHUNK, total - start), now)
            _bulk(conn, "exchanges", rows)
            ids = [r["request_id"] for r in rows]
            _bulk(conn, "feedback", [
                {"request_id": r, "kind": "correction", "route": "support-bot", "target": "prod",
                 "arm": "primary", "created_at": now, "corrected": True,
                 "correction": '{"order": 0, "max_weight": 100}'}
                for n, r in enumerate(ids) if (start + n) % 50 == 0
            ])  # fmt: skip
            _bulk(conn, "check_results", [
                {"request_id": r, "route": "support-bot", "target": "prod", "arm": "primary",
                 "rule": "shipping", "rule_version": "v1", "check_name": "max-weight",
                 "result": "fail", "reason": "", "created_at": now}
                for n, r in enumerate(ids) if (start + n) % 40 == 1
            ])  # fmt: skip
    return time.perf_counter() - began


def _bulk(conn: sa.Connection, table: str, rows: list[dict[str, Any]]) -> None:
    """`rows` into `table`: PostgreSQL's COPY (three times the speed of psycopg's pipelined
    executemany here), SQLite's executemany."""
    if not rows:
        return
    columns = list(rows[0])
    if conn.dialect.name != "postgresql":
        conn.execute(sa.table(table, *(sa.column(c) for c in columns)).insert(), rows)
        return
    driver = conn.connection.driver_connection  # psycopg's, inside this transaction
    assert driver is not None  # a connection the pool handed out
    cursor = driver.cursor()
    with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row([row[c] for c in columns])


def measure(store: Store, rows: int, size: int) -> dict[str, Any]:
    now = datetime.now(UTC)
    seeded = seed(store, rows, now)
    if store.backend == "postgresql":
        with store.engine.begin() as conn:
            conn.execute(sa.text("ANALYZE"))
    tracemalloc.start()
    began = time.perf_counter()
    built = build_set(
        EvalStore(store), name="bench", route="support-bot", spec=SPEC, bodies="redacted",
        since=now - timedelta(days=7), until=now + timedelta(seconds=1), size=size,
    )  # fmt: skip
    took = time.perf_counter() - began
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    tasks = built.manifest["counts"]["task"]
    return {
        "backend": store.backend, "rows": rows, "size": len(built.cases),
        "held_out": len(built.held_out), "seed_s": round(seeded, 1), "build_s": round(took, 2),
        "peak_mib": round(peak / 2**20, 1), "tasks": len(tasks),
        "smallest_task": min(tasks.values()), "edge": built.manifest["counts"]["difficulty"].get(
            "edge", 0),
        "references": built.manifest["counts"]["reference"],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--no-pg", action="store_true")
    parser.add_argument("--no-sqlite", action="store_true")
    args = parser.parse_args(argv)
    results = []
    if not args.no_sqlite:
        with tempfile.TemporaryDirectory() as tmp:
            store = Store(f"sqlite:///{Path(tmp) / 'bench.db'}")
            store.migrate()
            results.append(measure(store, args.rows, args.size))
            store.close()
    if not args.no_pg:
        schema = f"bench_{uuid.uuid4().hex[:8]}"
        store = Store(args.pg_url, schema=schema)
        try:
            store.migrate()
            results.append(measure(store, args.rows, args.size))
        finally:
            with store.engine.begin() as conn:
                conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
            store.close()
    for result in results:
        print(json.dumps(result))
    return results


if __name__ == "__main__":
    main()
