"""How fast records reach the database: `Store.write_batch`, `Recorder.submit`, the drain.

    .venv/bin/python -m bench.store_write [--records 50000] [--batch 500]
        [--pg-url postgresql+psycopg://postgres@127.0.0.1:5432/test] [--no-pg] [--no-bodies]

Each record carries a 1.8 KB request body, a 0.9 KB response body and 0.9 KB of answer text, like a
short chat exchange (`--no-bodies`: none of the three).
SQLite runs in a temporary directory; PostgreSQL in a temporary schema, dropped afterwards.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from proxy.core.records import Arm, ExchangeRecord, Status, Usage
from proxy.store.exchanges import Store
from proxy.store.recorder import BodiesPolicy, Recorder


def make_record(i: int) -> ExchangeRecord:
    content = "Where is my parcel? It has not arrived yet, order 12345. " * 30 + "ann@example.com"
    return ExchangeRecord(
        request_id=f"req-{i}",
        route="support-bot",
        target="prod",
        upstream_model="gpt-4o-mini",
        arm=Arm.PRIMARY,
        endpoint="chat.completions",
        provider="openai",
        streamed=True,
        started_at=datetime.now(UTC),
        duration_s=0.8,
        ttft_s=0.2,
        overhead_s=0.0004,
        status=Status.OK,
        http_status=200,
        usage=Usage(input_tokens=420, output_tokens=180),
        cost_usd=0.00017,
        rule="shipping-policy",
        rule_version="v2",
        request_body=json.dumps({"model": "support-bot", "messages": [{"content": content}]}),
        response_body="data: " + json.dumps({"choices": [{"delta": {"content": content[:900]}}]}),
        response_text=content[:900],
    )


def bench_write_batch(store: Store, records: list[ExchangeRecord], batch: int) -> float:
    start = time.perf_counter()
    for i in range(0, len(records), batch):
        store.write_batch(records[i : i + batch])
    return len(records) / (time.perf_counter() - start)


def bench_recorder(
    store: Store, records: list[ExchangeRecord], batch: int, policy: BodiesPolicy
) -> tuple[float, float]:
    """(microseconds per submit, records/s from the first submit until all are written)."""
    recorder = Recorder(
        store,
        queue_size=len(records),
        batch_size=batch,
        flush_interval_s=0.2,
        registry=CollectorRegistry(),
        bodies_policy=policy,
    )
    recorder.start()
    start = time.perf_counter()
    for record in records:
        recorder.submit(record)
    submitted = time.perf_counter()
    while recorder.pending():
        time.sleep(0.005)
    done = time.perf_counter()
    recorder.stop(timeout_s=10)
    return (submitted - start) / len(records) * 1e6, len(records) / (done - start)


def run(
    name: str, open_store: Callable[[], Store], records: list[ExchangeRecord], batch: int
) -> None:
    store = open_store()
    store.migrate()
    try:
        rate = bench_write_batch(store, records, batch)
        print(f"{name:10} write_batch({batch})            {rate:10,.0f} records/s")
        for policy in ("full", "redacted"):
            submit_us, drain = bench_recorder(store, records, batch, policy)
            print(
                f"{name:10} recorder bodies={policy:8}      {drain:10,.0f} records/s"
                f"   submit {submit_us:.2f} µs"
            )
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--no-pg", action="store_true")
    parser.add_argument("--no-bodies", action="store_true")
    args = parser.parse_args()
    records = [make_record(i) for i in range(args.records)]
    if args.no_bodies:
        records = [
            dataclasses.replace(r, request_body=None, response_body=None, response_text=None)
            for r in records
        ]

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}"
        run("sqlite", lambda: Store(url), records, args.batch)

    if not args.no_pg:
        schema = f"bench_{uuid.uuid4().hex[:8]}"
        try:
            run("postgres", lambda: Store(args.pg_url, schema=schema), records, args.batch)
        finally:
            engine = sa.create_engine(args.pg_url)
            with engine.begin() as conn:
                conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
            engine.dispose()


if __name__ == "__main__":
    main()
