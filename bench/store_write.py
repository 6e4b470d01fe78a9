"""How fast records reach the database: `Store.write_batch`, `Recorder.submit`, the drain.

Besides records/s it reports the CPU the writer thread spends per record inside `write_batch`
(`time.thread_time`, on the thread that writes): the time that thread may hold the GIL the event
loop needs (SQLite's own work and psycopg's waits for the server release it, so it is an upper
bound), and the recorder's threads' whole CPU per record while it drains (`/proc` task stat: the
writer's, and with `bodies: redacted` the redact thread's too).

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
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from proxy.core.records import Arm, ExchangeRecord, Status, StoredRecord, Usage
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


class TimedStore(Store):
    """A store that adds up the CPU time of the calling thread spent in `write_batch`."""

    cpu_s = 0.0

    def write_batch(self, records: Sequence[StoredRecord]) -> None:
        start = time.thread_time()
        try:
            super().write_batch(records)
        finally:
            self.cpu_s += time.thread_time() - start


def thread_cpu_s(native_id: int) -> float:
    """User + system CPU of this process's thread `native_id`, from /proc."""
    fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_write_batch(
    store: TimedStore, records: list[ExchangeRecord], batch: int
) -> tuple[float, float]:
    """(records/s, CPU µs per record in write_batch)."""
    store.cpu_s = 0.0
    start = time.perf_counter()
    for i in range(0, len(records), batch):
        store.write_batch(records[i : i + batch])
    return len(records) / (time.perf_counter() - start), store.cpu_s / len(records) * 1e6


def bench_recorder(
    store: TimedStore, records: list[ExchangeRecord], batch: int, policy: BodiesPolicy
) -> tuple[float, float, float, float]:
    """(microseconds per submit, records/s from the first submit until all are written, CPU µs
    per record in write_batch, the recorder's threads' CPU µs per record: the writer's, and with
    `redacted` the redact thread's too)."""
    store.cpu_s = 0.0
    recorder = Recorder(
        store,
        queue_size=len(records),
        batch_size=batch,
        flush_interval_s=0.2,
        registry=CollectorRegistry(),
        bodies_policy=policy,
    )
    recorder.start()
    threads = [
        t.native_id for t in threading.enumerate() if t.name.startswith("mirrorgate-recorder")
    ]
    assert threads and None not in threads
    thread_start = sum(thread_cpu_s(tid) for tid in threads if tid is not None)
    start = time.perf_counter()
    for record in records:
        recorder.submit(record)
    submitted = time.perf_counter()
    while recorder.pending():
        time.sleep(0.005)
    done = time.perf_counter()
    thread_s = sum(thread_cpu_s(tid) for tid in threads if tid is not None) - thread_start
    recorder.stop(timeout_s=10)
    n = len(records)
    return (
        (submitted - start) / n * 1e6,
        n / (done - start),
        store.cpu_s / n * 1e6,
        thread_s / n * 1e6,
    )


def run(
    name: str, open_store: Callable[[], TimedStore], records: list[ExchangeRecord], batch: int
) -> None:
    store = open_store()
    store.migrate()
    try:
        rate, cpu_us = bench_write_batch(store, records, batch)
        print(
            f"{name:10} write_batch({batch})            {rate:10,.0f} records/s"
            f"   write_batch CPU {cpu_us:6.1f} µs/record"
        )
        for policy in ("full", "redacted"):
            submit_us, drain, cpu_us, thread_us = bench_recorder(store, records, batch, policy)
            print(
                f"{name:10} recorder bodies={policy:8}      {drain:10,.0f} records/s"
                f"   write_batch CPU {cpu_us:6.1f} µs/record"
                f"   recorder threads' CPU {thread_us:6.1f} µs/record   submit {submit_us:.2f} µs"
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
        run("sqlite", lambda: TimedStore(url), records, args.batch)

    if not args.no_pg:
        schema = f"bench_{uuid.uuid4().hex[:8]}"
        try:
            run("postgres", lambda: TimedStore(args.pg_url, schema=schema), records, args.batch)
        finally:
            engine = sa.create_engine(args.pg_url)
            with engine.begin() as conn:
                conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
            engine.dispose()


if __name__ == "__main__":
    main()
