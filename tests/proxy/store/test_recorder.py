"""The recorder against real stores: bursts, full queues, outages, shutdown, bodies, retention."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from proxy.config.specs import StoreSpec
from proxy.core.records import ExchangeRecord
from proxy.store.exchanges import Store
from proxy.store.recorder import BODIES_DROPPED_TAG, RECORD_OVERHEAD_BYTES, Recorder, record_size
from tests.conftest import seed_sqlite, wait_until
from tests.proxy.store import test_exchanges as test_store
from tests.proxy.store.test_exchanges import make_record

db_url = test_store.db_url  # shared fixtures (until they move to tests/conftest.py)
open_store = test_store.open_store

OPENAI_KEY = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz_0123456789"


class StalledStore(Store):
    """A real store whose writes wait until the test opens the gate."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self.gate = threading.Event()
        self.entered = threading.Event()

    def write_batch(self, records: Sequence[ExchangeRecord]) -> None:
        self.entered.set()
        if not self.gate.wait(30):
            raise RuntimeError("the test never opened the gate")
        super().write_batch(records)


def fresh(**overrides: Any) -> ExchangeRecord:
    """A record started now (older ones would be eaten by retention)."""
    return make_record(started_at=datetime.now(UTC), **overrides)


def metric(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
def make_recorder() -> Iterator[Callable[..., tuple[Recorder, CollectorRegistry]]]:
    """Build recorders with a fresh registry each; after the test every one is stopped, then
    its store is closed."""
    recorders: list[Recorder] = []
    stores: list[Store] = []

    def make(store: Store, **overrides: Any) -> tuple[Recorder, CollectorRegistry]:
        registry = CollectorRegistry()
        options: dict[str, Any] = {
            "queue_size": 20_000,
            "batch_size": 500,
            "flush_interval_s": 0.05,
            "bodies_policy": "full",
            "retry_initial_s": 0.01,
            "retry_max_s": 0.05,
        }
        options.update(overrides)
        recorder = Recorder(store, registry=registry, **options)
        recorders.append(recorder)
        stores.append(store)
        return recorder, registry

    yield make
    for recorder in recorders:
        recorder.stop(timeout_s=5)
    for store in stores:
        store.close()


@pytest.fixture
def sqlite_path(tmp_path: Path, migrated_sqlite: Path) -> Path:
    """A SQLite file of its own, a copy of the session's migrated database."""
    path = tmp_path / "recorder.db"
    seed_sqlite(f"sqlite:///{path}", migrated_sqlite)
    return path


def sqlite_store(path: Path, cls: type[Store] = Store, **kwargs: Any) -> Store:
    store = cls(f"sqlite:///{path}", **kwargs)
    store.migrate()
    return store


def test_a_burst_of_10000_lands_exactly(open_store: Callable[..., Store]) -> None:
    store = open_store()
    registry = CollectorRegistry()
    recorder = Recorder.from_spec(store, StoreSpec(url="sqlite:///unused.db"), registry=registry)
    recorder.start()
    try:
        accepted = sum(recorder.submit(fresh()) for _ in range(10_000))
        wait_until(lambda: recorder.pending() == 0, what="the burst to be written")
    finally:
        assert recorder.stop(timeout_s=10) is True
    assert accepted == 10_000
    assert store.count() == 10_000
    assert recorder.written_total == 10_000
    assert metric(registry, "mirrorgate_recorder_written_total") == 10_000
    assert metric(registry, "mirrorgate_recorder_dropped_total", reason="queue_full") == 0


def test_a_restarted_recorder_appends(
    open_store: Callable[..., Store], make_recorder: Callable[..., tuple[Recorder, Any]]
) -> None:
    for expected in (100, 150):
        store = open_store()
        recorder, _ = make_recorder(store)
        recorder.start()
        for _ in range(expected - store.count()):
            recorder.submit(fresh())
        assert recorder.stop(timeout_s=10) is True
        assert store.count() == expected
        store.close()


def test_stop_drains_everything_queued(
    open_store: Callable[..., Store], make_recorder: Callable[..., tuple[Recorder, Any]]
) -> None:
    store = open_store()
    # A flush interval far longer than the test: only stop() can make these records land.
    recorder, registry = make_recorder(store, batch_size=10_000, flush_interval_s=3600)
    recorder.start()
    for _ in range(700):
        recorder.submit(fresh())
    assert recorder.stop(timeout_s=10) is True
    assert store.count() == 700
    assert metric(registry, "mirrorgate_recorder_dropped_total", reason="shutdown") == 0
    assert recorder.submit(fresh()) is False  # after stop: dropped and counted
    assert metric(registry, "mirrorgate_recorder_dropped_total", reason="shutdown") == 1


def test_a_full_queue_drops_and_counts_exactly(
    sqlite_path: Path, make_recorder: Callable[..., tuple[Recorder, Any]]
) -> None:
    store = sqlite_store(sqlite_path, StalledStore)
    assert isinstance(store, StalledStore)
    recorder, registry = make_recorder(store, queue_size=100, batch_size=10)
    recorder.start()
    assert recorder.submit(fresh()) is True
    assert store.entered.wait(10), "the writer never took the first record"
    # The writer is now stuck holding one record; the queue has room for exactly 100 more.
    results = [recorder.submit(fresh()) for _ in range(150)]
    assert results.count(True) == 100
    assert results[100:] == [False] * 50
    assert metric(registry, "mirrorgate_recorder_dropped_total", reason="queue_full") == 50
    assert metric(registry, "mirrorgate_recorder_queue_depth") == 100
    assert recorder.pending() == 101
    store.gate.set()
    wait_until(lambda: recorder.pending() == 0, what="the queue to drain")
    assert store.count() == 101
    assert metric(registry, "mirrorgate_recorder_queue_depth") == 0
    assert recorder.stop(timeout_s=10) is True


def test_records_wait_out_a_locked_database(
    sqlite_path: Path,
    make_recorder: Callable[..., tuple[Recorder, Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = sqlite_store(sqlite_path, busy_timeout_ms=10)
    recorder, registry = make_recorder(store, batch_size=50)
    holder = sqlite3.connect(sqlite_path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # the database is unwritable until this commits
    caplog.set_level(logging.INFO, logger="proxy.store.recorder")
    try:
        recorder.start()
        for _ in range(500):
            assert recorder.submit(fresh()) is True
        wait_until(
            lambda: metric(registry, "mirrorgate_recorder_write_errors_total") >= 3,
            what="several failed attempts",
        )
        for _ in range(500):
            assert recorder.submit(fresh()) is True  # still queueing during the outage
    finally:
        holder.execute("COMMIT")
        holder.close()
    wait_until(lambda: recorder.pending() == 0, what="the held records to be written")
    assert store.count() == 1000
    assert metric(registry, "mirrorgate_recorder_dropped_total", reason="queue_full") == 0
    messages = [r.getMessage() for r in caplog.records if r.name == "proxy.store.recorder"]
    assert sum("unavailable" in m for m in messages) == 1  # once per outage, not per retry
    assert sum("available again" in m for m in messages) == 1
    assert recorder.stop(timeout_s=10) is True


def test_shutdown_during_an_outage_counts_what_is_left(
    sqlite_path: Path, make_recorder: Callable[..., tuple[Recorder, Any]]
) -> None:
    store = sqlite_store(sqlite_path, busy_timeout_ms=10)
    recorder, registry = make_recorder(store, queue_size=100, batch_size=10)
    holder = sqlite3.connect(sqlite_path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        recorder.start()
        recorder.submit(fresh())
        wait_until(
            lambda: metric(registry, "mirrorgate_recorder_write_errors_total") >= 1,
            what="the first failed write",
        )
        results = [recorder.submit(fresh()) for _ in range(150)]
        assert results.count(True) == 100
        assert recorder.stop(timeout_s=0.2) is False
    finally:
        holder.execute("COMMIT")
        holder.close()
    assert metric(registry, "mirrorgate_recorder_dropped_total", reason="queue_full") == 50
    assert metric(registry, "mirrorgate_recorder_dropped_total", reason="shutdown") == 101
    assert recorder.pending() == 0
    assert store.count() == 0


def test_a_batch_is_written_when_full_without_waiting_for_the_timer(
    sqlite_path: Path, make_recorder: Callable[..., tuple[Recorder, Any]]
) -> None:
    store = sqlite_store(sqlite_path)
    recorder, _ = make_recorder(store, batch_size=10, flush_interval_s=3600)
    recorder.start()
    for _ in range(25):
        recorder.submit(fresh())
    wait_until(lambda: store.count() == 20, what="two full batches")
    assert recorder.pending() == 5  # the partial batch waits for the timer (or stop)
    assert recorder.stop(timeout_s=10) is True
    assert store.count() == 25


def test_a_partial_batch_is_written_after_the_flush_interval(
    sqlite_path: Path, make_recorder: Callable[..., tuple[Recorder, Any]]
) -> None:
    store = sqlite_store(sqlite_path)
    recorder, _ = make_recorder(store, batch_size=10_000, flush_interval_s=0.02)
    recorder.start()
    for _ in range(3):
        recorder.submit(fresh())
    wait_until(lambda: store.count() == 3, what="the timer to flush a partial batch")


def test_a_record_the_database_refuses_does_not_block_the_others(
    sqlite_path: Path, make_recorder: Callable[..., tuple[Recorder, Any]]
) -> None:
    store = sqlite_store(sqlite_path)
    recorder, registry = make_recorder(store, batch_size=7, flush_interval_s=3600)
    for i in range(7):
        recorder.submit(fresh(http_status=2**70 if i == 3 else 200))
    recorder.start()
    wait_until(lambda: recorder.pending() == 0, what="the batch to settle")
    assert store.count() == 6
    assert metric(registry, "mirrorgate_recorder_dropped_total", reason="rejected") == 1
    assert recorder.written_total == 6


@pytest.mark.parametrize("policy", ["full", "redacted", "none"])
def test_the_bodies_policy_is_visible_in_stored_rows(
    sqlite_path: Path, make_recorder: Callable[..., tuple[Recorder, Any]], policy: str
) -> None:
    store = sqlite_store(sqlite_path)
    recorder, _ = make_recorder(store, bodies_policy=policy)
    recorder.start()
    request = f'{{"api_key": "{OPENAI_KEY}", "messages": "write to ann@example.com"}}'
    recorder.submit(
        fresh(
            request_id="with-bodies",
            request_body=request,
            response_body=f"data: key {OPENAI_KEY}\n\n",
            response_text="Sure, ann@example.com.",
        )
    )
    recorder.submit(fresh(request_id="without-bodies"))
    assert recorder.stop(timeout_s=10) is True
    (stored,) = store.query(request_id="with-bodies")
    if policy == "full":
        assert stored.request_body == request
        assert stored.response_body == f"data: key {OPENAI_KEY}\n\n"
        assert stored.response_text == "Sure, ann@example.com."
    elif policy == "redacted":
        assert stored.request_body == (
            '{"api_key": "[REDACTED:secret_field]", "messages": "write to [REDACTED:email]"}'
        )
        assert stored.response_body == "data: key [REDACTED:openai_key]\n\n"
        assert stored.response_text == "Sure, [REDACTED:email]."
    else:
        assert (stored.request_body, stored.response_body, stored.response_text) == (
            None,
            None,
            None,
        )
    (plain,) = store.query(request_id="without-bodies")
    assert plain.request_body is plain.response_body is plain.response_text is None


def test_retention_deletes_only_old_records_at_start_and_later(
    sqlite_path: Path, make_recorder: Callable[..., tuple[Recorder, Any]]
) -> None:
    store = sqlite_store(sqlite_path)
    now = [datetime(2025, 6, 1, tzinfo=UTC)]
    old = [make_record(started_at=now[0] - timedelta(days=15, minutes=i)) for i in range(23)]
    young = [make_record(started_at=now[0] - timedelta(days=13, minutes=i)) for i in range(4)]
    store.write_batch(old + young)
    recorder, _ = make_recorder(
        store,
        retention_days=14,
        clock=lambda: now[0],
        retention_chunk=5,  # 23 old rows: five chunks
        retention_interval_s=0.05,
    )
    recorder.start()
    wait_until(lambda: store.count() == 4, what="the first purge")
    assert {r.request_id for r in store.query()} == {r.request_id for r in young}
    recorder.submit(make_record(started_at=now[0]))
    wait_until(lambda: store.count() == 5, what="a new record")
    now[0] += timedelta(days=30)  # everything is old now; the next periodic run removes it
    wait_until(lambda: store.count() == 0, what="the periodic purge")


def test_the_writer_is_one_named_non_daemon_thread(
    sqlite_path: Path, make_recorder: Callable[..., tuple[Recorder, Any]]
) -> None:
    store = sqlite_store(sqlite_path)
    before = set(threading.enumerate())
    recorder, _ = make_recorder(store, retention_days=14)
    recorder.start()
    (writer,) = set(threading.enumerate()) - before
    assert writer.name == "mirrorgate-recorder"
    assert writer.daemon is False
    with pytest.raises(RuntimeError):
        recorder.start()
    assert recorder.stop(timeout_s=10) is True
    assert not writer.is_alive()


def test_records_submitted_before_start_are_kept(
    sqlite_path: Path, make_recorder: Callable[..., tuple[Recorder, Any]]
) -> None:
    store = sqlite_store(sqlite_path)
    recorder, registry = make_recorder(store)
    for _ in range(5):
        recorder.submit(fresh())
    recorder.start()
    assert recorder.stop(timeout_s=10) is True
    assert store.count() == 5
    never_started, registry = make_recorder(store)
    never_started.submit(fresh())
    assert never_started.stop(timeout_s=10) is True  # drains in the calling thread
    assert store.count() == 6
    assert never_started.submit(fresh()) is False
    assert metric(registry, "mirrorgate_recorder_dropped_total", reason="shutdown") == 1


@pytest.mark.parametrize(
    "bad",
    [
        {"queue_size": 0},
        {"batch_size": 0},
        {"flush_interval_s": 0},
        {"bodies_policy": "some"},
        {"retry_initial_s": 1, "retry_max_s": 0.5},
    ],
)
def test_bad_settings_are_refused(sqlite_path: Path, bad: dict[str, Any]) -> None:
    options: dict[str, Any] = {
        "queue_size": 10,
        "batch_size": 10,
        "flush_interval_s": 0.1,
        "bodies_policy": "full",
    }
    with Store(f"sqlite:///{sqlite_path}") as store, pytest.raises(ValueError):
        Recorder(store, registry=CollectorRegistry(), **{**options, **bad})


def test_write_problem_says_why_while_the_database_is_locked_and_clears_after(
    make_recorder: Callable[..., tuple[Recorder, CollectorRegistry]], sqlite_path: Path
) -> None:
    store = sqlite_store(sqlite_path, busy_timeout_ms=20)
    recorder, _registry = make_recorder(store)
    recorder.start()
    holder = sqlite3.connect(sqlite_path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")  # another process holding the write lock
        assert recorder.submit(make_record())
        problem = wait_until(lambda: recorder.write_problem, what="the write to fail")
        assert "locked" in problem
        assert recorder.written_total == 0
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    wait_until(lambda: recorder.written_total == 1, what="the write to get through")
    assert recorder.write_problem is None


def test_a_deleted_sqlite_file_is_reopened_and_counted(
    make_recorder: Callable[..., tuple[Recorder, CollectorRegistry]], sqlite_path: Path
) -> None:
    store = sqlite_store(sqlite_path)
    recorder, registry = make_recorder(store)
    recorder.start()
    recorder.submit(make_record(request_id="before"))
    wait_until(lambda: recorder.written_total == 1, what="the first write")
    assert store.file_problem() is None
    sqlite_path.unlink()
    assert store.file_problem() == f"the database file {sqlite_path} was deleted"
    recorder.submit(make_record(request_id="after"))
    wait_until(lambda: recorder.written_total == 2, what="the second write")
    assert store.file_problem() is None and sqlite_path.exists()
    assert [r.request_id for r in store.query()] == ["after"]  # in the file at the path
    assert registry.get_sample_value("mirrorgate_store_file_reopened_total") == 1


def test_at_queue_max_bytes_records_keep_their_place_without_bodies_and_the_bound_holds(
    sqlite_path: Path, make_recorder: Callable[..., tuple[Recorder, Any]]
) -> None:
    body = "x" * 100_000
    size = record_size(fresh(request_body=body, response_body=body))
    store = sqlite_store(sqlite_path, StalledStore)
    assert isinstance(store, StalledStore)
    bound = 10 * size
    recorder, registry = make_recorder(store, queue_max_bytes=bound, batch_size=5)
    recorder.start()
    assert recorder.submit(fresh(request_body=body, response_body=body)) is True
    assert store.entered.wait(10), "the writer never took the first record"
    # The writer holds one record (its bytes still count); bodies may fill 3/4 of the bound, so
    # six more keep theirs, and the rest come without them, in the last quarter.
    held: list[float] = []
    for _ in range(40):
        assert recorder.submit(fresh(request_body=body, response_body=body)) is True
        held.append(metric(registry, "mirrorgate_recorder_queue_bytes"))
    assert max(held) <= bound
    assert metric(registry, "mirrorgate_recorder_bodies_dropped_total") == 34
    assert metric(registry, "mirrorgate_recorder_dropped_total", reason="queue_bytes") == 0
    store.gate.set()
    wait_until(lambda: recorder.pending() == 0, what="the queue to drain")
    records = store.query(limit=100)
    assert len(records) == 41
    bare = [r for r in records if BODIES_DROPPED_TAG in r.tags]
    assert len(bare) == 34
    assert all(r.request_body is None and r.response_body is None for r in bare)
    assert all(r.request_body == body for r in records if r not in bare)
    assert metric(registry, "mirrorgate_recorder_queue_bytes") == 0
    # Settled records free their bytes: bodies are kept again.
    assert recorder.submit(fresh(request_body=body)) is True
    assert metric(registry, "mirrorgate_recorder_bodies_dropped_total") == 34


def test_a_record_that_does_not_fit_even_without_bodies_is_dropped_and_counted(
    sqlite_path: Path, make_recorder: Callable[..., tuple[Recorder, Any]]
) -> None:
    store = sqlite_store(sqlite_path, StalledStore)
    assert isinstance(store, StalledStore)
    bound = 3 * RECORD_OVERHEAD_BYTES
    recorder, registry = make_recorder(store, queue_max_bytes=bound, batch_size=1)
    recorder.start()
    results = [recorder.submit(fresh(request_body="y" * 5000)) for _ in range(5)]
    assert results == [True, True, True, False, False]
    assert metric(registry, "mirrorgate_recorder_dropped_total", reason="queue_bytes") == 2
    assert metric(registry, "mirrorgate_recorder_queue_bytes") == bound
    store.gate.set()
    wait_until(lambda: recorder.pending() == 0, what="the queue to drain")
    assert store.count() == 3


def test_queue_max_bytes_comes_from_the_store_section(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path / "spec.db")
    spec = StoreSpec(url=f"sqlite:///{tmp_path / 'spec.db'}", queue_max_bytes=2**20)
    recorder = Recorder.from_spec(store, spec, registry=CollectorRegistry())
    try:
        assert recorder.submit(fresh(request_body="z" * 2**20)) is True  # bodies dropped
        assert recorder.submit(fresh()) is True
        assert recorder.stop(timeout_s=10) is True
        assert sum(BODIES_DROPPED_TAG in r.tags for r in store.query()) == 1
    finally:
        store.close()
    with pytest.raises(ValueError, match="queue_max_bytes"):
        StoreSpec(queue_max_bytes=1000)
