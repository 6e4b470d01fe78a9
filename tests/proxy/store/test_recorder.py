"""The recorder against real stores: bursts, full queues, outages, shutdown, bodies, retention
(review items closed with the exchanges it deletes)."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from proxy.config.specs import StoreSpec
from proxy.core.records import ExchangeRecord, StoredRecord
from proxy.store import ANY_VERSION, ReviewStore
from proxy.store.errors import StoreUnavailableError
from proxy.store.exchanges import Store
from proxy.store.recorder import BODIES_DROPPED_TAG, RECORD_OVERHEAD_BYTES, Recorder, record_size
from proxy.store.redaction import apply_bodies_policy
from tests.conftest import seed_sqlite, wait_until
from tests.proxy.console.test_review_queue import candidate
from tests.proxy.store import test_exchanges as test_store
from tests.proxy.store.test_exchanges import make_record
from tests.proxy.store.test_reviews import queued

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


@pytest.mark.parametrize("policy", ["full", "redacted"])  # redacted: with a prepared batch
def test_records_wait_out_a_locked_database(
    sqlite_path: Path,
    make_recorder: Callable[..., tuple[Recorder, Any]],
    caplog: pytest.LogCaptureFixture,
    policy: str,
) -> None:
    store = sqlite_store(sqlite_path, busy_timeout_ms=10)
    recorder, registry = make_recorder(store, batch_size=50, bodies_policy=policy)
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
    # pending() settles a batch just after its commit, so both are waited for
    wait_until(
        lambda: store.count() == 20 and recorder.pending() == 5, what="two full batches settled"
    )
    assert store.count() == 20  # the partial batch waits for the timer (or stop)
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


@pytest.mark.parametrize("policy", ["full", "redacted"])
def test_a_record_the_database_refuses_does_not_block_the_others(
    sqlite_path: Path, make_recorder: Callable[..., tuple[Recorder, Any]], policy: str
) -> None:
    store = sqlite_store(sqlite_path)
    recorder, registry = make_recorder(
        store, batch_size=7, flush_interval_s=3600, bodies_policy=policy
    )
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


def test_a_purge_closes_the_review_items_whose_exchanges_it_deleted(
    sqlite_path: Path, make_recorder: Callable[..., tuple[Recorder, Any]]
) -> None:
    store = sqlite_store(sqlite_path)
    now = datetime(2025, 6, 1, tzinfo=UTC)
    reviews = ReviewStore(store)
    old, young = (
        queued(replace(candidate(pair_id=name, request_id=name), exchanged_at=now - age))
        for name, age in (("old", timedelta(days=15)), ("young", timedelta(days=13)))
    )
    reviews.enqueue([old, young])
    assert reviews.open_count("support-bot", ANY_VERSION, "bob") == 2
    recorder, _ = make_recorder(store, retention_days=14, clock=lambda: now)
    recorder.start()
    wait_until(
        lambda: reviews.open_count("support-bot", ANY_VERSION, "bob") == 1,
        what="the purge closing the old item",
    )
    assert reviews.next_item("support-bot", ANY_VERSION, "bob") == young


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


# --- bodies: redacted, the next batch redacted while the database takes the last ------------------


class ScriptedStore(Store):
    """A real store that is down while `down` is set (every write raises
    `StoreUnavailableError`), waits for `gate` before each write that goes through, and keeps the
    request ids of every batch it committed, in order."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self.down = threading.Event()
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.attempts = 0
        self.committed: list[list[str]] = []

    def write_batch(self, records: Sequence[StoredRecord]) -> None:
        self.attempts += 1
        if self.down.is_set():
            raise StoreUnavailableError("the test took the database down")
        self.entered.set()
        if not self.gate.wait(30):
            raise RuntimeError("the test never opened the gate")
        super().write_batch(records)
        self.committed.append([r.request_id for r in records])


@pytest.fixture
def redactions(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """request_id -> the name of the thread that applied the bodies policy to it (last time)."""
    seen: dict[str, str] = {}

    def spy(record: Any, bodies: Any) -> Any:
        seen[record.request_id] = threading.current_thread().name
        return apply_bodies_policy(record, bodies)

    monkeypatch.setattr("proxy.store.recorder.apply_bodies_policy", spy)
    return seen


def secret(request_id: str, **overrides: Any) -> ExchangeRecord:
    """A record whose request body holds a key that redaction replaces."""
    return fresh(request_id=request_id, request_body=f'{{"key": "{OPENAI_KEY}"}}', **overrides)


def recorder_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("mirrorgate-recorder")}


def test_the_next_batch_is_redacted_while_the_database_takes_the_last_and_still_counts_as_held(
    sqlite_path: Path,
    make_recorder: Callable[..., tuple[Recorder, Any]],
    redactions: dict[str, str],
) -> None:
    store = sqlite_store(sqlite_path, ScriptedStore)
    assert isinstance(store, ScriptedStore)
    size = record_size(secret("r0"))
    # Room for the bodies of four records (two being written, two prepared), not of a fifth.
    bound = (4 * size + size // 2) * 4 // 3
    recorder, registry = make_recorder(
        store, bodies_policy="redacted", batch_size=2, flush_interval_s=3600, queue_max_bytes=bound
    )
    store.gate.clear()
    recorder.start()
    for i in (1, 2):
        recorder.submit(secret(f"r{i}"))
    assert store.entered.wait(10), "the writer never began the first batch"
    for i in (3, 4):
        recorder.submit(secret(f"r{i}"))
    wait_until(lambda: {"r3", "r4"} <= redactions.keys(), what="the next batch to be redacted")
    # The first batch is still in the database's hands: the second was redacted meanwhile, by
    # the redact thread, and its records are still held: not queued, not settled, their bytes
    # counted.
    assert redactions["r3"] == redactions["r4"] == "mirrorgate-recorder-redact"
    assert store.committed == []
    assert recorder.pending() == 4
    assert metric(registry, "mirrorgate_recorder_queue_depth") == 0
    assert metric(registry, "mirrorgate_recorder_queue_bytes") == 4 * size
    assert recorder.submit(secret("r5")) is True  # past the bodies' share: kept without them
    assert metric(registry, "mirrorgate_recorder_bodies_dropped_total") == 1
    store.gate.set()
    assert recorder.stop(timeout_s=10) is True
    assert store.committed == [["r1", "r2"], ["r3", "r4"], ["r5"]]
    stored = {r.request_id: r for r in store.query()}
    redacted = '{"key": "[REDACTED:openai_key]"}'
    assert [stored[f"r{i}"].request_body for i in (1, 2, 3, 4)] == [redacted] * 4
    assert stored["r5"].request_body is None and BODIES_DROPPED_TAG in stored["r5"].tags
    assert metric(registry, "mirrorgate_recorder_queue_bytes") == 0
    assert recorder_threads() == set()


def test_a_prepared_batch_waits_out_an_outage_and_follows_the_retried_one_once(
    sqlite_path: Path,
    make_recorder: Callable[..., tuple[Recorder, Any]],
    redactions: dict[str, str],
) -> None:
    store = sqlite_store(sqlite_path, ScriptedStore)
    assert isinstance(store, ScriptedStore)
    settled: list[str] = []
    recorder, registry = make_recorder(
        store,
        bodies_policy="redacted",
        batch_size=2,
        flush_interval_s=3600,
        on_settled=lambda records: settled.extend(r.request_id for r in records),
    )
    store.down.set()
    recorder.start()
    for i in (1, 2):
        recorder.submit(secret(f"r{i}"))
    wait_until(lambda: store.attempts >= 1, what="the first failed write")
    for i in (3, 4, 5, 6):
        recorder.submit(secret(f"r{i}"))
    wait_until(lambda: {"r3", "r4"} <= redactions.keys(), what="the next batch to be prepared")
    attempts = store.attempts
    wait_until(lambda: store.attempts > attempts, what="a retry with a batch prepared")
    assert "r5" not in redactions  # one batch prepared ahead, no more
    assert recorder.write_problem is not None
    assert recorder.pending() == 6
    store.down.clear()
    wait_until(lambda: recorder.pending() == 0, what="the held records to be written")
    assert store.committed == [["r1", "r2"], ["r3", "r4"], ["r5", "r6"]]
    assert settled == ["r1", "r2", "r3", "r4", "r5", "r6"]
    assert store.count() == 6
    assert recorder.write_problem is None
    assert metric(registry, "mirrorgate_recorder_written_total") == 6
    assert recorder.stop(timeout_s=10) is True


def test_a_rejected_prepared_batch_is_isolated_record_by_record(
    sqlite_path: Path,
    make_recorder: Callable[..., tuple[Recorder, Any]],
    redactions: dict[str, str],
) -> None:
    store = sqlite_store(sqlite_path, ScriptedStore)
    assert isinstance(store, ScriptedStore)
    settled: list[str] = []
    recorder, registry = make_recorder(
        store,
        bodies_policy="redacted",
        batch_size=3,
        flush_interval_s=3600,
        on_settled=lambda records: settled.extend(r.request_id for r in records),
    )
    store.gate.clear()
    recorder.start()
    for i in (1, 2, 3):
        recorder.submit(secret(f"r{i}"))
    assert store.entered.wait(10), "the writer never began the first batch"
    for i in (4, 5, 6):
        recorder.submit(secret(f"r{i}", http_status=2**70 if i == 5 else 200))
    wait_until(lambda: "r6" in redactions, what="the next batch to be prepared")
    assert redactions["r6"] == "mirrorgate-recorder-redact"
    store.gate.set()
    wait_until(lambda: recorder.pending() == 0, what="both batches to settle")
    assert store.committed == [["r1", "r2", "r3"], ["r4"], ["r6"]]
    assert settled == ["r1", "r2", "r3", "r4", "r5", "r6"]  # the journal forgets r5 too
    assert metric(registry, "mirrorgate_recorder_dropped_total", reason="rejected") == 1
    assert recorder.written_total == 5


def test_stop_writes_a_prepared_batch_and_ends_both_threads(
    sqlite_path: Path,
    make_recorder: Callable[..., tuple[Recorder, Any]],
    redactions: dict[str, str],
) -> None:
    store = sqlite_store(sqlite_path, ScriptedStore)
    assert isinstance(store, ScriptedStore)
    recorder, registry = make_recorder(
        store, bodies_policy="redacted", batch_size=2, flush_interval_s=3600
    )
    store.gate.clear()
    recorder.start()
    for i in (1, 2):
        recorder.submit(secret(f"r{i}"))
    assert store.entered.wait(10), "the writer never began the first batch"
    for i in (3, 4, 5):
        recorder.submit(secret(f"r{i}"))
    wait_until(lambda: {"r3", "r4"} <= redactions.keys(), what="the next batch to be prepared")
    stopped: list[bool] = []
    stopper = threading.Thread(target=lambda: stopped.append(recorder.stop(timeout_s=10)))
    stopper.start()
    store.gate.set()
    stopper.join(20)
    assert stopped == [True]
    assert store.committed == [["r1", "r2"], ["r3", "r4"], ["r5"]]
    assert metric(registry, "mirrorgate_recorder_dropped_total", reason="shutdown") == 0
    assert recorder.pending() == 0
    assert recorder_threads() == set()


def test_stop_during_an_outage_counts_a_prepared_batch_as_lost_like_queued_records(
    sqlite_path: Path,
    make_recorder: Callable[..., tuple[Recorder, Any]],
    redactions: dict[str, str],
) -> None:
    store = sqlite_store(sqlite_path, ScriptedStore)
    assert isinstance(store, ScriptedStore)
    settled: list[str] = []
    recorder, registry = make_recorder(
        store,
        bodies_policy="redacted",
        batch_size=2,
        flush_interval_s=3600,
        on_settled=lambda records: settled.extend(r.request_id for r in records),
    )
    store.down.set()
    recorder.start()
    for i in (1, 2):
        recorder.submit(secret(f"r{i}"))
    wait_until(lambda: store.attempts >= 1, what="the first failed write")
    for i in (3, 4, 5):
        recorder.submit(secret(f"r{i}"))
    wait_until(lambda: {"r3", "r4"} <= redactions.keys(), what="the next batch to be prepared")
    assert recorder.stop(timeout_s=0.2) is False
    assert metric(registry, "mirrorgate_recorder_dropped_total", reason="shutdown") == 5
    assert recorder.pending() == 0
    assert metric(registry, "mirrorgate_recorder_queue_bytes") == 0
    assert settled == []
    assert store.count() == 0
    assert recorder_threads() == set()
    assert recorder.submit(secret("late")) is False


@pytest.mark.parametrize(
    ("policy", "threads"),
    [
        ("full", {"mirrorgate-recorder"}),
        ("none", {"mirrorgate-recorder"}),
        ("redacted", {"mirrorgate-recorder", "mirrorgate-recorder-redact"}),
    ],
)
def test_only_redaction_gets_a_second_thread_and_stop_ends_it(
    sqlite_path: Path,
    make_recorder: Callable[..., tuple[Recorder, Any]],
    policy: str,
    threads: set[str],
) -> None:
    store = sqlite_store(sqlite_path)
    before = set(threading.enumerate())
    recorder, _ = make_recorder(store, bodies_policy=policy)
    recorder.start()
    started = set(threading.enumerate()) - before
    assert {t.name for t in started} == threads
    assert all(t.daemon is False for t in started)
    recorder.submit(secret("r1"))
    assert recorder.stop(timeout_s=10) is True
    assert not any(t.is_alive() for t in started)
    assert store.count() == 1


def test_the_redact_thread_gives_up_the_gil_between_slices_and_still_redacts_every_record(
    sqlite_path: Path,
    make_recorder: Callable[..., tuple[Recorder, Any]],
    redactions: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("proxy.store.recorder._REDACT_SLICE_S", 0.0)  # a slice ends every record
    yields: list[str] = []
    sleep = time.sleep

    def spy(seconds: float) -> None:
        if seconds == 0:
            yields.append(threading.current_thread().name)
        sleep(seconds)

    monkeypatch.setattr("proxy.store.recorder.time.sleep", spy)
    store = sqlite_store(sqlite_path, ScriptedStore)
    assert isinstance(store, ScriptedStore)
    recorder, _ = make_recorder(
        store, bodies_policy="redacted", batch_size=3, flush_interval_s=3600
    )
    store.gate.clear()
    recorder.start()
    for i in (1, 2, 3):
        recorder.submit(secret(f"r{i}"))
    assert store.entered.wait(10), "the writer never began the first batch"
    for i in (4, 5, 6):
        recorder.submit(secret(f"r{i}"))
    wait_until(lambda: "r6" in redactions, what="the next batch to be prepared")
    store.gate.set()
    assert recorder.stop(timeout_s=10) is True
    assert yields.count("mirrorgate-recorder-redact") >= 3  # after each of r4, r5, r6
    assert store.committed == [["r1", "r2", "r3"], ["r4", "r5", "r6"]]
    stored = [r.request_body for r in store.query()]
    assert stored == ['{"key": "[REDACTED:openai_key]"}'] * 6


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_redaction_that_fails_ends_the_recorder_as_on_the_writer_thread_and_counts_the_rest(
    sqlite_path: Path,
    make_recorder: Callable[..., tuple[Recorder, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def policy(record: Any, bodies: Any) -> Any:
        if record.request_id == "bad":
            raise RuntimeError("a redaction bug")
        return apply_bodies_policy(record, bodies)

    monkeypatch.setattr("proxy.store.recorder.apply_bodies_policy", policy)
    store = sqlite_store(sqlite_path, ScriptedStore)
    assert isinstance(store, ScriptedStore)
    recorder, registry = make_recorder(
        store, bodies_policy="redacted", batch_size=2, flush_interval_s=3600
    )
    store.gate.clear()
    recorder.start()
    for request_id in ("r1", "r2"):
        recorder.submit(secret(request_id))
    assert store.entered.wait(10), "the writer never began the first batch"
    for request_id in ("bad", "r4"):
        recorder.submit(secret(request_id))
    store.gate.set()
    wait_until(lambda: recorder_threads() == set(), what="both threads to end")
    assert recorder.stop(timeout_s=5) is False
    assert store.committed == [["r1", "r2"]]
    assert metric(registry, "mirrorgate_recorder_dropped_total", reason="shutdown") == 2
    assert recorder.pending() == 0


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_bodies_policy_that_fails_on_the_writer_thread_counts_its_batch_as_lost(
    sqlite_path: Path,
    make_recorder: Callable[..., tuple[Recorder, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `bodies: none` has no redact thread: the writer applies the policy to the batch it took
    # from the queue, and a policy that raises there lost those records from every count.
    def policy(record: Any, bodies: Any) -> Any:
        if record.request_id == "bad":
            raise RuntimeError("a policy bug")
        return apply_bodies_policy(record, bodies)

    monkeypatch.setattr("proxy.store.recorder.apply_bodies_policy", policy)
    store = sqlite_store(sqlite_path, ScriptedStore)
    assert isinstance(store, ScriptedStore)
    recorder, registry = make_recorder(
        store, bodies_policy="none", batch_size=2, flush_interval_s=3600
    )
    store.gate.clear()
    recorder.start()
    for request_id in ("r1", "r2"):
        recorder.submit(secret(request_id))
    assert store.entered.wait(10), "the writer never began the first batch"
    for request_id in ("bad", "r4"):
        recorder.submit(secret(request_id))
    store.gate.set()
    wait_until(lambda: recorder_threads() == set(), what="the writer to end")
    assert recorder.stop(timeout_s=5) is False
    assert store.committed == [["r1", "r2"]]
    assert metric(registry, "mirrorgate_recorder_dropped_total", reason="shutdown") == 2
    assert recorder.pending() == 0
