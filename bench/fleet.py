"""A fleet on one PostgreSQL: N gateway recorders, one process each, writing into one database.

Each writer process builds its store and `Recorder` the way the gateway does (`Store(url,
bodies=...)`, `Recorder.from_spec` with a `StoreSpec` whose `bodies` is `redacted`) and submits
exchange records of realistic chat JSON (~2.1 KB of request body, response body and answer text)
for `--seconds`: at `--rate` records/s per process, paced, or flat out (without `--rate`). Flat
out, the submitter keeps a few batches queued and waits 1 ms whenever more are waiting, so the
figure is the recorder's capacity, not how fast a loop can overflow a queue.

Per process and in total it reports: submitted, written (`Recorder.written_total`), dropped
(`submit` returned False), the backlog at the end of the window (accepted, not yet written: a
recorder that falls behind its rate shows it long before its queue of `store.queue_size` fills and
it drops), rows/s written during the window, the CPU per row written in the window of each of the
recorder's threads (`mirrorgate-recorder`, the writer, and `mirrorgate-recorder-redact`, from
/proc/self/task), and PostgreSQL's CPU over the run (utime + stime of every `postgres` process in
/proc, when readable). After the writers have stopped it counts the
rows in the table: written == rows.

    .venv/bin/python -m bench.fleet --processes 1 4 10 [--rate 1000] [--seconds 10]
        [--retention-chunks 10] [--keep] [--drain 45000]
        [--admin-url postgresql+psycopg://postgres@127.0.0.1:5432/postgres]

It creates the database `bench_fleet` on the server (dropped first if a previous run left it, and
dropped at the end unless `--keep`), migrates it once, then runs one step per `--processes` value.
`--drain N` first measures the recorder alone, in this process: N records queued before `start`,
then drained with nobody submitting (rows/s and its threads' CPU per row).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from bench import databases
from bench.processes import process_stats
from proxy.config import StoreSpec
from proxy.core.records import Arm, ExchangeRecord, Status, Usage
from proxy.store.exchanges import Store
from proxy.store.recorder import Recorder

DATABASE = "bench_fleet"
_BACKLOG_BATCHES = 4
"""Flat out, the submitter keeps this many batches queued: enough that the writer never idles."""
_STOP_TIMEOUT_S = 120.0

_QUESTION = (
    "Hi, I ordered a pair of running shoes last week (order 48213, size 42) and the tracking page "
    "has said 'label created' for five days. I paid for express shipping. Can you tell me where "
    "the parcel is and whether I can get the shipping fee back? My e-mail is ann.lee@example.com "
    "and my phone is +44 20 7946 0958 if you need to call. "
)
_SYSTEM = (
    "You are the support assistant of an online sports shop. Answer politely and briefly, quote "
    "the order number, never promise refunds above the shipping fee, and hand over to a human when "
    "the customer asks for one. Policies: express shipping is refunded when a parcel is more than "
    "two working days late; standard shipping is never refunded. "
)
_ANSWER = (
    "I'm sorry about the delay with order 48213. I checked with the carrier: the parcel was "
    "collected yesterday evening and is now at the regional hub, so it should reach you within "
    "two working days. Since you paid for express shipping and the parcel is more than two working "
    "days late, I have refunded the shipping fee of 7.90 EUR to your card; it will show within "
    "three to five days. Is there anything else I can help with? "
)


def make_record(worker: int, i: int) -> ExchangeRecord:
    """One chat exchange: a 1.0 KB request body, a 0.7 KB response body, a 0.4 KB answer."""
    request = {
        "model": "support-bot",
        "temperature": 0.2,
        "max_tokens": 400,
        "messages": [
            {"role": "system", "content": _SYSTEM},
            {"role": "user", "content": _QUESTION},
            {"role": "assistant", "content": "Could you confirm the delivery address?"},
            {"role": "user", "content": f"Yes, 12 Elm Street, Leeds. Ticket {worker}-{i}."},
        ],
    }
    response = {
        "id": f"chatcmpl-{worker}-{i}",
        "object": "chat.completion",
        "created": 1_764_000_000 + i,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": _ANSWER},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 312, "completion_tokens": 96, "total_tokens": 408},
    }
    return ExchangeRecord(
        request_id=f"req-{worker}-{i}",
        route="support-bot",
        target="prod",
        upstream_model="gpt-4o-mini",
        arm=Arm.PRIMARY,
        endpoint="chat.completions",
        provider="openai",
        streamed=False,
        started_at=datetime.now(UTC),
        duration_s=0.8,
        ttft_s=None,
        overhead_s=0.0004,
        status=Status.OK,
        http_status=200,
        usage=Usage(input_tokens=312, output_tokens=96),
        cost_usd=0.00011,
        rule="shipping-policy",
        rule_version="v2",
        request_body=json.dumps(request),
        response_body=json.dumps(response),
        response_text=_ANSWER,
    )


@dataclasses.dataclass(frozen=True)
class WriterResult:
    """What one writer process did."""

    submitted: int
    dropped: int
    written_in_window: int
    backlog: int
    """Accepted but not yet written at the end of the window."""
    written: int
    """`Recorder.written_total` after `stop`: every accepted record, when stop drained in time."""
    window_s: float
    cpu_s: float
    """This process's CPU from the first submit until `stop` returned: building the records,
    submitting, redacting, writing."""
    thread_cpu_s: dict[str, float] = dataclasses.field(default_factory=dict)
    """CPU of each of the recorder's threads, by name, during the window (empty where
    /proc/self/task is unreadable)."""

    @property
    def rows_per_s(self) -> float:
        return self.written_in_window / self.window_s

    def thread_us_per_row(self) -> dict[str, float]:
        """CPU per row written in the window, by recorder thread."""
        rows = max(self.written_in_window, 1)
        return {name: cpu / rows * 1e6 for name, cpu in sorted(self.thread_cpu_s.items())}


def recorder_thread_cpu_s() -> dict[str, float]:
    """CPU seconds (utime + stime) so far of each live thread of this process whose name starts
    with `mirrorgate-recorder`; a thread /proc does not show is left out."""
    found: dict[str, float] = {}
    for thread in threading.enumerate():
        if not thread.name.startswith("mirrorgate-recorder") or thread.native_id is None:
            continue
        try:
            with open(f"/proc/self/task/{thread.native_id}/stat") as file:
                stat = file.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        found[thread.name] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return found


@dataclasses.dataclass(frozen=True)
class FleetResult:
    processes: int
    rate: float | None
    writers: tuple[WriterResult, ...]
    rows_in_table: int
    postgres_cpu_s: float | None

    def total(self, field: str) -> int:
        return sum(int(getattr(w, field)) for w in self.writers)

    @property
    def rows_per_s(self) -> float:
        return sum(w.rows_per_s for w in self.writers)

    @property
    def writers_cpu_us_per_row(self) -> float:
        return sum(w.cpu_s for w in self.writers) / max(self.total("written"), 1) * 1e6


def write_for(url: str, worker: int, rate: float | None, seconds: float) -> WriterResult:
    """One gateway's recorder: submit for `seconds`, then drain and stop (in this process)."""
    spec = StoreSpec(url=url, bodies="redacted", journal=False)
    store = Store(spec.url, bodies=spec.bodies)
    recorder = Recorder.from_spec(store, spec, registry=CollectorRegistry())
    recorder.start()
    threads_at_start = recorder_thread_cpu_s()
    submitted = dropped = 0
    cpu_start = time.process_time()
    start = time.monotonic()
    end = start + seconds
    try:
        while (now := time.monotonic()) < end:
            if rate is None:
                if recorder.pending() >= spec.batch_size * _BACKLOG_BATCHES:
                    time.sleep(0.001)
                    continue
            else:
                due = int((now - start) * rate)  # records due by now: a late submitter catches up
                if submitted >= due:
                    time.sleep(min(1 / rate, end - now))
                    continue
            if not recorder.submit(make_record(worker, submitted)):
                dropped += 1
            submitted += 1
        window_s = time.monotonic() - start
        written_in_window = recorder.written_total
        backlog = recorder.pending()
        thread_cpu_s = {
            name: cpu - threads_at_start.get(name, 0.0)
            for name, cpu in recorder_thread_cpu_s().items()
        }
    finally:
        recorder.stop(timeout_s=_STOP_TIMEOUT_S)
        store.close()
    return WriterResult(
        submitted=submitted,
        dropped=dropped,
        written_in_window=written_in_window,
        backlog=backlog,
        written=recorder.written_total,
        window_s=window_s,
        cpu_s=time.process_time() - cpu_start,
        thread_cpu_s=thread_cpu_s,
    )


def drain(url: str, records: int) -> None:
    """The recorder alone: `records` queued before `start` (up to `store.queue_size`), drained
    with no submitter beside it; prints rows/s and the recorder's threads' CPU per row."""
    spec = StoreSpec(url=url, bodies="redacted", journal=False)
    store = Store(spec.url, bodies=spec.bodies)
    recorder = Recorder.from_spec(store, spec, registry=CollectorRegistry())
    queued = sum(recorder.submit(make_record(-1, i)) for i in range(records))
    try:
        start = time.monotonic()
        recorder.start()
        cpu_start = recorder_thread_cpu_s()
        while recorder.pending():
            time.sleep(0.005)
        drain_s = time.monotonic() - start
        cpu = recorder_thread_cpu_s()
    finally:
        recorder.stop(timeout_s=_STOP_TIMEOUT_S)
        store.close()
    threads = ", ".join(
        f"{name} {(cpu[name] - cpu_start.get(name, 0.0)) / queued * 1e6:.1f}"
        for name in sorted(cpu)
    )
    print(
        f"--- drain: {queued:,} queued records written in {drain_s:.2f} s,"
        f" {queued / drain_s:,.0f} rows/s; CPU µs per row: {threads}"
        f"   load {os.getloadavg()[0]:.2f}"
    )


def _writer_main(url: str, worker: int, rate: float | None, seconds: float, out: Any) -> None:
    result = write_for(url, worker, rate, seconds)
    out.put((worker, dataclasses.asdict(result)))


def postgres_cpu_s() -> float | None:
    """CPU seconds of every process named `postgres` on this machine and of its exited children
    (the backends of closed connections), None if none is readable (a server elsewhere, or /proc
    hidden). Other clients of the same server count too."""
    ticks = 0
    found = False
    for _pid, name, fields in process_stats():
        if name != "postgres":
            continue
        # utime + stime + cutime + cstime: the backends that exited since, reaped by the postmaster
        ticks += sum(int(field) for field in fields[11:15])
        found = True
    return ticks / os.sysconf("SC_CLK_TCK") if found else None


def count_rows(url: str) -> int:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT count(*) FROM exchanges")).scalar_one())
    finally:
        engine.dispose()


def run_fleet(url: str, processes: int, rate: float | None, seconds: float) -> FleetResult:
    """`processes` writers on the already migrated store at `url`, started together (spawn)."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    before_rows = count_rows(url)
    cpu_before = postgres_cpu_s()
    workers = [
        context.Process(target=_writer_main, args=(url, worker, rate, seconds, out))
        for worker in range(processes)
    ]
    for process in workers:
        process.start()
    # Read the results before joining: a child does not exit while its queue item is unread.
    results = dict(out.get(timeout=seconds + _STOP_TIMEOUT_S + 60) for _ in workers)
    for process in workers:
        process.join()
        if process.exitcode != 0:
            raise RuntimeError(f"a writer process exited with {process.exitcode}")
    cpu_after = postgres_cpu_s()
    return FleetResult(
        processes=processes,
        rate=rate,
        writers=tuple(WriterResult(**results[worker]) for worker in range(processes)),
        rows_in_table=count_rows(url) - before_rows,
        postgres_cpu_s=(
            cpu_after - cpu_before if cpu_before is not None and cpu_after is not None else None
        ),
    )


def table_bytes(url: str) -> tuple[int, int]:
    """(pg_total_relation_size of exchanges, its rows): table, TOAST and indexes."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            size = conn.execute(sa.text("SELECT pg_total_relation_size('exchanges')")).scalar_one()
            rows = conn.execute(sa.text("SELECT count(*) FROM exchanges")).scalar_one()
            return int(size), int(rows)
    finally:
        engine.dispose()


def report(result: FleetResult) -> None:
    pace = f"{result.rate:,.0f}/s each" if result.rate is not None else "flat out"
    cpu = (
        f"postgres CPU {result.postgres_cpu_s:.1f} s"
        if result.postgres_cpu_s is not None
        else "postgres CPU unreadable"
    )
    print(f"--- {result.processes} processes, {pace}")
    for i, w in enumerate(result.writers):
        print(
            f"  writer {i:2}: submitted {w.submitted:8,} dropped {w.dropped:7,}"
            f" backlog {w.backlog:7,} written {w.written:8,} {w.rows_per_s:8,.0f} rows/s"
        )
        threads = ", ".join(f"{name} {us:.1f}" for name, us in w.thread_us_per_row().items())
        if threads:
            print(f"             CPU µs per row written in the window: {threads}")
    print(
        f"  total    : submitted {result.total('submitted'):8,}"
        f" dropped {result.total('dropped'):7,} backlog {result.total('backlog'):7,}"
        f" written {result.total('written'):8,} {result.rows_per_s:8,.0f} rows/s"
        f"   writers' CPU {result.writers_cpu_us_per_row:.0f} µs/row"
        f"   rows in table {result.rows_in_table:,}   {cpu}"
        f"   load {os.getloadavg()[0]:.2f}"
    )


def time_retention(url: str, chunks: int, chunk: int) -> None:
    """What retention costs on the table the runs filled: `Store.delete_older_than` in chunks of
    `chunk` rows, as the recorder's `Retention` calls it, then TRUNCATE of what is left (the cost
    of dropping a day's partition: files unlinked, no row visited)."""
    store = Store(url)
    cutoff = datetime.now(UTC)
    deleted = 0
    cpu_before = postgres_cpu_s()
    start = time.perf_counter()
    for _ in range(chunks):
        n = store.delete_older_than(cutoff, limit=chunk)
        deleted += n
        if n < chunk:
            break
    delete_s = time.perf_counter() - start
    cpu_after = postgres_cpu_s()
    store.close()
    size, rows = table_bytes(url)
    engine = sa.create_engine(url)
    try:
        start = time.perf_counter()
        with engine.begin() as conn:
            conn.execute(sa.text("TRUNCATE exchanges"))
        truncate_s = time.perf_counter() - start
    finally:
        engine.dispose()
    pg = (
        f", postgres CPU {(cpu_after - cpu_before) / max(deleted, 1) * 1e6:.0f} µs/row"
        if cpu_before is not None and cpu_after is not None
        else ""
    )
    print(
        f"retention: deleted {deleted:,} rows in chunks of {chunk:,} in {delete_s:.2f} s"
        f" ({deleted / delete_s:,.0f} rows/s, {delete_s / max(deleted, 1) * 1e6:.0f} µs/row{pg});"
        f" TRUNCATE of the other {rows:,} rows ({size / 2**20:,.0f} MiB) {truncate_s * 1e3:.0f} ms"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 4, 10])
    parser.add_argument("--rate", type=float, nargs="+", default=None, help="records/s per process")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--admin-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    )
    parser.add_argument(
        "--retention-chunks",
        type=int,
        default=0,
        help="then time this many retention deletes of 5,000 rows, and a TRUNCATE",
    )
    parser.add_argument("--keep", action="store_true", help="do not drop bench_fleet at the end")
    parser.add_argument(
        "--drain",
        type=int,
        default=0,
        help="first drain this many queued records, nobody submitting",
    )
    args = parser.parse_args(argv)
    with databases.fresh_database(args.admin_url, DATABASE, keep=args.keep) as url:
        store = Store(url)
        store.migrate()
        store.close()
        if args.drain:
            drain(url, args.drain)
        for processes in args.processes:
            for rate in args.rate or [None]:
                result = run_fleet(url, processes, rate, args.seconds)
                report(result)
        size, rows = table_bytes(url)
        print(
            f"exchanges: {rows:,} rows, {size / 2**20:,.1f} MiB with TOAST and indexes,"
            f" {size / max(rows, 1):,.0f} bytes per row"
        )
        if args.retention_chunks:
            time_retention(url, args.retention_chunks, chunk=5000)


if __name__ == "__main__":
    main()
