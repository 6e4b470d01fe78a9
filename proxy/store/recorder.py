"""The recorder: exchange records from the event loop to the store, batched, bounded, non-blocking.

`Recorder.submit` is called on the event loop for every exchange. It appends to a bounded queue in a
few microseconds and never waits: when the queue is full the record is dropped and counted
(`mirrorgate_recorder_dropped_total{reason="queue_full"}`). One writer thread
(`mirrorgate-recorder`) takes up to `batch_size` records at a time and writes them in one
transaction, as soon as a batch is full or `flush_interval_s` after the previous write, whichever
comes first.

What happens to an accepted record:

- written: counted in `mirrorgate_recorder_written_total` and `Recorder.written_total`;
- the database is unavailable (`StoreUnavailableError`): the writer keeps the batch and retries
  it with exponential backoff (`retry_initial_s` doubling up to `retry_max_s`, the store's one
  retry loop: `proxy.store.retry`) until it succeeds.
  Meanwhile `submit` keeps queueing up to `queue_size`; beyond that it drops (`queue_full`). The
  outage is logged once when it starts and once when it ends, not at every retry;
- the records held (queued, or taken by the writer and not yet settled) would exceed
  `queue_max_bytes`, as `record_size` estimates them: bodies may fill three quarters of it, the
  last quarter is kept for records without them. Beyond, an exchange record is kept without its
  bodies if that fits, tagged `bodies_dropped` and counted in
  `mirrorgate_recorder_bodies_dropped_total` (the record of an answered request matters more than
  its text); a record that does not fit even so is dropped (`reason="queue_bytes"`). So a store
  outage with large bodies holds a bounded amount of memory, not `queue_size` times 10 MB;
- the database refuses the batch itself (`RecordRejectedError`, e.g. text the driver cannot encode):
  the records are written one by one so that only the offending ones are dropped
  (`reason="rejected"`, logged), instead of one bad record blocking the queue for ever;
- `stop(timeout_s)` is called: the writer drains the queue without waiting for the flush interval;
  what is still unwritten at the deadline is dropped (`reason="shutdown"`), and so is any record
  submitted after the writer has finished.

The `store.bodies` policy is applied here, never on the event loop: `full` stores bodies as
received, `redacted` passes request_body, response_body and response_text through
`proxy.store.redaction.redact`, `none` stores none of the three. With `redacted`, a second thread
(`mirrorgate-recorder-redact`) takes the next full batch from the queue and redacts it while the
writer waits for the database to take the current one (the driver releases the GIL while it
waits), so that redaction and the round trip overlap. It holds at most one prepared batch: until
the writer has taken it, it prepares no other. A prepared batch is written after the one before
it, in queue order; its records count as held (`queue_max_bytes`, `pending`) until they are
settled, and as dropped at shutdown if `stop`'s deadline passes first, like queued ones. A partial
batch (at the flush interval, or while stopping) the writer redacts itself, as it does every batch
with `full` and `none`, which have no second thread.

Readiness: `write_problem` says why records cannot be written right now (the store unavailable,
its SQLite file deleted or replaced and not yet reopened), None while they can; `/readyz` answers
503 with it. Before every write, and every flush interval when idle, the writer checks that the
SQLite file at the configured path is the one open (SQLite would keep writing into a deleted
file's inode, where nobody can read the rows); if not, it opens the file at the path anew (created
and migrated) and counts it (`mirrorgate_store_file_reopened_total`).

Retention runs on the same thread: when `retention_days` is set, records older than that are
deleted at start and then every `retention_interval_s`, `retention_chunk` rows at a time in the idle
time between two batches, so a large purge never holds up writing for long.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Literal

from prometheus_client import CollectorRegistry

from proxy.config import StoreSpec
from proxy.core import CheckRecord, ExchangeRecord, FindingRecord, ProbeRecord, StoredRecord
from proxy.observability import RecorderMetrics

from .errors import StoreError, StoreUnavailableError
from .exchanges import Store
from .redaction import apply_bodies_policy
from .retry import WriteRetry
from .reviews import ReviewStore

log = logging.getLogger(__name__)

BodiesPolicy = Literal["full", "redacted", "none"]
"""What the recorder writes: exchanges, pair comparisons, check verdicts and findings."""
DropReason = Literal["queue_full", "queue_bytes", "shutdown", "rejected"]
_DROP_REASONS: tuple[DropReason, ...] = ("queue_full", "queue_bytes", "shutdown", "rejected")
BODIES_DROPPED_TAG = "bodies_dropped"
"""The tag of an exchange record stored without its bodies because the queue was at
`queue_max_bytes`."""
RECORD_OVERHEAD_BYTES = 2048
"""What `record_size` counts for a record besides its text fields: the object, its small fields,
its row in a batch."""
_JOIN_GRACE_S = 1.0
"""How long `stop` waits past its deadline for a write already in progress to return."""
_REDACT_SLICE_S = 0.0005
"""How long the redact thread redacts before it gives up the GIL (`time.sleep(0)`): the writer
thread, back from the database, and the event loop, back from its poll, then wait for it about
this long, not a whole switch interval (1 ms under `serve`, CPython's default 5 ms elsewhere)
each time; measured in bench/README.md (issue 17)."""


def _utc_now() -> datetime:
    return datetime.now(UTC)


def record_size(record: StoredRecord) -> int:
    """The memory a queued record holds, estimated cheaply: the characters of its text fields
    (bodies, reasons, details) and `RECORD_OVERHEAD_BYTES`. A character of a non-ASCII text takes
    up to 4 bytes in memory; the bound is on this estimate."""
    size = RECORD_OVERHEAD_BYTES
    if isinstance(record, ExchangeRecord):
        for text in (record.request_body, record.response_body, record.response_text):
            if text is not None:
                size += len(text)
    elif isinstance(record, CheckRecord):
        size += len(record.reason)
    elif isinstance(record, FindingRecord):
        size += len(record.detail)
    elif isinstance(record, ProbeRecord) and record.answered_value is not None:
        size += len(record.answered_value)
    return size


def _without_bodies(record: StoredRecord) -> ExchangeRecord | None:
    """`record` stripped of its bodies and tagged so; None when it has none to strip."""
    if not isinstance(record, ExchangeRecord):
        return None
    if (record.request_body, record.response_body, record.response_text) == (None, None, None):
        return None
    return dataclasses.replace(
        record,
        request_body=None,
        response_body=None,
        response_text=None,
        tags=(*record.tags, BODIES_DROPPED_TAG),
    )


class Retention:
    """Deletes records older than `days`, due at start and then every `interval_s`, and at the
    end of each purge closes the review items whose exchanges it deleted.

    Not thread-safe: it is driven by the recorder's writer thread, one `step` at a time.
    """

    def __init__(
        self,
        store: Store,
        *,
        days: int,
        clock: Callable[[], datetime],
        interval_s: float = 3600.0,
        chunk: int = 5000,
    ) -> None:
        if days < 1 or interval_s <= 0 or chunk < 1:
            raise ValueError("retention needs days >= 1, interval_s > 0 and chunk >= 1")
        self._store = store
        self._reviews = ReviewStore(store)
        self._age = timedelta(days=days)
        self._clock = clock
        self._interval_s = interval_s
        self._chunk = chunk
        self._next_run = time.monotonic()
        self._cutoff: datetime | None = None
        self.deleted_total = 0
        """Records deleted since this object was made."""

    def due(self, now: float) -> bool:
        """True while a purge is under way or the next one is due (`now` is `time.monotonic()`)."""
        return self._cutoff is not None or now >= self._next_run

    def step(self, now: float) -> None:
        """Delete one chunk of the current purge, starting a purge if one is due."""
        if self._cutoff is None:
            self._cutoff = self._clock() - self._age
        try:
            deleted = self._store.delete_older_than(self._cutoff, limit=self._chunk)
        except Exception as exc:  # retention must never stop the writer thread
            log.warning("retention: could not delete old records (will retry): %s", exc)
            self._cutoff = None
            self._next_run = now + min(self._interval_s, 60.0)
            return
        self.deleted_total += deleted
        if deleted < self._chunk:
            if self.deleted_total:
                log.info("retention: deleted records older than %s", self._cutoff.isoformat())
            self._close_reviews(self._cutoff)
            self._cutoff = None
            self._next_run = now + self._interval_s

    def _close_reviews(self, cutoff: datetime) -> None:
        """Review items whose exchanges this purge deleted can no longer be shown: closed, so
        reviewers are not offered them (their reviews are kept)."""
        try:
            self._reviews.close_older_than(cutoff)
        except Exception as exc:  # retention must never stop the writer thread
            log.warning("retention: could not close old review items (next purge retries): %s", exc)


class Recorder:
    """Accepts records on the event loop and writes them to `store` on its own thread.

    Metrics, registered on `registry`:

    - `mirrorgate_recorder_dropped_total{reason}`: records accepted by nobody: `queue_full` (the
      queue was at `queue_size`), `queue_bytes` (at `queue_max_bytes`, even without bodies),
      `shutdown` (not written by the `stop` deadline, or submitted after it), `rejected` (the
      database refused the record);
    - `mirrorgate_recorder_bodies_dropped_total`: exchange records queued without their bodies
      (at `queue_max_bytes`);
    - `mirrorgate_recorder_queue_bytes`: `record_size` of the records held, queued, prepared or
      being written (read at scrape time);
    - `mirrorgate_recorder_written_total`: records committed to the store;
    - `mirrorgate_recorder_queue_depth`: records waiting in the queue (read at scrape time);
    - `mirrorgate_recorder_write_errors_total`: failed write attempts (every retry counts).
    """

    def __init__(
        self,
        store: Store,
        *,
        queue_size: int,
        batch_size: int,
        flush_interval_s: float,
        registry: CollectorRegistry,
        bodies_policy: BodiesPolicy,
        queue_max_bytes: int = 256 * 2**20,
        retention_days: int | None = None,
        clock: Callable[[], datetime] = _utc_now,
        retry_initial_s: float = 0.05,
        retry_max_s: float = 5.0,
        retention_interval_s: float = 3600.0,
        retention_chunk: int = 5000,
        on_settled: Callable[[Sequence[StoredRecord]], object] | None = None,
    ) -> None:
        """`on_settled` hears, on the writer thread, every batch committed and every record
        the database refused for good (the crash journal forgets them)."""
        if queue_size < 1 or batch_size < 1 or flush_interval_s <= 0:
            raise ValueError("queue_size and batch_size must be >= 1, flush_interval_s > 0")
        if queue_max_bytes < RECORD_OVERHEAD_BYTES:
            raise ValueError(f"queue_max_bytes must be at least {RECORD_OVERHEAD_BYTES}")
        if bodies_policy not in ("full", "redacted", "none"):
            raise ValueError(f"bodies_policy must be full, redacted or none, not {bodies_policy!r}")
        if not 0 < retry_initial_s <= retry_max_s:
            raise ValueError("need 0 < retry_initial_s <= retry_max_s")
        self._retry = WriteRetry(retry_initial_s, retry_max_s)
        self._outage_started: float | None = None
        self._failing: str | None = None  # the last write error, while writes fail
        self._file_failing: str | None = None  # the SQLite file is gone and cannot be made
        self._store = store
        self._queue_size = queue_size
        self._queue_max_bytes = queue_max_bytes
        self._bodies_max_bytes = queue_max_bytes * 3 // 4
        self._batch_size = batch_size
        self._flush_interval_s = flush_interval_s
        self._bodies_policy = bodies_policy
        self._on_settled = on_settled
        self._retention = (
            Retention(
                store,
                days=retention_days,
                clock=clock,
                interval_s=retention_interval_s,
                chunk=retention_chunk,
            )
            if retention_days is not None
            else None
        )

        self._queue: deque[StoredRecord] = deque()
        self._sizes: deque[int] = deque()  # `record_size` of each queued record, in step
        self._held_bytes = 0  # `record_size` of the records queued, prepared or being written
        self._batch_bytes = 0  # of them, those in the writer's batch
        self._lock = threading.Lock()  # the bounds, `_accepted`, `_accepting`, the prepared batch
        # The redact thread's one batch: taken from the queue (`_prepared_raw`, counted in
        # `_prepared_bytes`), then redacted (`_prepared`, or the error that stopped it), until the
        # writer takes it. `_preparing` is signalled when either side may proceed.
        self._preparing = threading.Condition(self._lock)
        self._prepared_raw: list[StoredRecord] | None = None
        self._prepared: list[StoredRecord] | None = None
        self._prepare_error: BaseException | None = None
        self._prepared_bytes = 0
        self._preparer_exit = False
        self._preparer: threading.Thread | None = None
        self._redacting: list[StoredRecord] | None = None
        """A batch the writer took from the queue and is applying the bodies policy to."""
        self._accepting = True
        self._accepted = 0
        self._settled = 0  # written, rejected or dropped at shutdown, after being accepted
        self._written = 0
        self._dropped_at_shutdown = 0
        self._wake = threading.Event()
        self._stop_requested = threading.Event()
        self._deadline: float | None = None
        self._thread: threading.Thread | None = None

        metrics = RecorderMetrics(registry)
        self._dropped = {reason: metrics.dropped.labels(reason) for reason in _DROP_REASONS}
        self._written_counter = metrics.written
        self._write_errors = metrics.write_errors
        self._reopened = metrics.file_reopened
        self._bodies_dropped = metrics.bodies_dropped
        metrics.queue_depth.set_function(lambda: len(self._queue))
        metrics.queue_bytes.set_function(lambda: self._held_bytes)

    @classmethod
    def from_spec(
        cls,
        store: Store,
        spec: StoreSpec,
        *,
        registry: CollectorRegistry,
        clock: Callable[[], datetime] = _utc_now,
        on_settled: Callable[[Sequence[StoredRecord]], object] | None = None,
    ) -> Recorder:
        """A recorder configured by the `store:` section of the configuration."""
        return cls(
            store,
            queue_size=spec.queue_size,
            batch_size=spec.batch_size,
            flush_interval_s=spec.flush_interval_ms / 1000,
            registry=registry,
            bodies_policy=spec.bodies,
            queue_max_bytes=spec.queue_max_bytes,
            retention_days=spec.retention_days,
            clock=clock,
            on_settled=on_settled,
        )

    # --- event loop side ------------------------------------------------------------------------

    def submit(self, record: StoredRecord) -> bool:
        """Queue `record` for writing; False if it was dropped (and counted). Never blocks.

        Safe to call from any thread, before `start` too. At `queue_max_bytes` an exchange record
        is queued without its bodies, if that fits (still True).
        """
        size = record_size(record)
        stripped: StoredRecord | None = None
        with self._lock:
            if not self._accepting:
                reason: DropReason | None = "shutdown"
            elif len(self._queue) >= self._queue_size:
                reason = "queue_full"
            else:
                reason = None
                if self._held_bytes + size > self._bodies_max_bytes:
                    stripped = _without_bodies(record)
                    if stripped is not None:
                        record, size = stripped, record_size(stripped)
                    if self._held_bytes + size > self._queue_max_bytes:
                        reason, stripped = "queue_bytes", None
                if reason is None:
                    self._queue.append(record)
                    self._sizes.append(size)
                    self._held_bytes += size
                    self._accepted += 1
                    depth = len(self._queue)
                    if depth == self._batch_size:
                        self._preparing.notify()  # the redact thread, if any, may take a batch
        if stripped is not None:
            self._bodies_dropped.inc()
        if reason is None:
            if depth >= self._batch_size and not self._wake.is_set():
                self._wake.set()  # a full batch is waiting: do not let it wait for the timer
            return True
        self._dropped[reason].inc()
        return False

    def pending(self) -> int:
        """Records accepted but not yet settled (written, rejected, or dropped at shutdown)."""
        settled = self._settled  # read first: pending() can only over-count, never under-count
        return self._accepted - settled

    @property
    def write_problem(self) -> str | None:
        """Why records cannot be written now, or None while they can (for `/readyz`)."""
        return self._failing or self._file_failing

    @property
    def written_total(self) -> int:
        """Records committed to the store by this recorder."""
        return self._written

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the writer thread (and the first retention run), and with `bodies: redacted` the
        redact thread. Call once."""
        if self._thread is not None:
            raise RuntimeError("the recorder was already started")
        if self._bodies_policy == "redacted":
            self._preparer = threading.Thread(
                target=self._prepare_batches, name="mirrorgate-recorder-redact", daemon=False
            )
            self._preparer.start()
        self._thread = threading.Thread(target=self._run, name="mirrorgate-recorder", daemon=False)
        self._thread.start()

    def stop(self, timeout_s: float) -> bool:
        """Write everything queued, then stop the writer; give up after `timeout_s` seconds.

        Returns True when every accepted record was settled: written, or rejected by the database.
        Records still unwritten at the deadline are dropped and counted (`reason="shutdown"`). If a
        write is still in progress at the deadline, its records count as written or dropped when it
        returns (the thread is not a daemon, so the process waits for it). A recorder that was
        never started drains in the calling thread.
        """
        if self._deadline is None:
            self._deadline = time.monotonic() + max(0.0, timeout_s)
        self._stop_requested.set()
        self._wake.set()
        thread = self._thread
        if thread is None:
            self._run()  # never started: drain in the calling thread
        else:
            thread.join(max(0.0, self._deadline - time.monotonic()) + _JOIN_GRACE_S)
            if thread.is_alive():
                log.error(
                    "recorder: a write was still in progress %.1fs after the stop deadline; "
                    "%d records may not be stored",
                    _JOIN_GRACE_S,
                    self.pending(),
                )
                return False
        if self._preparer is not None:  # told to end by the writer's close; ends within one batch
            self._preparer.join(max(0.0, self._deadline - time.monotonic()) + _JOIN_GRACE_S)
        return self._dropped_at_shutdown == 0

    def __enter__(self) -> Recorder:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop(timeout_s=10.0)

    # --- writer thread --------------------------------------------------------------------------

    def _run(self) -> None:
        batch: list[StoredRecord] = []
        next_flush = time.monotonic() + self._flush_interval_s
        try:
            while True:
                stopping = self._stop_requested.is_set()
                if stopping and self._past_deadline():
                    break
                if not batch:
                    if not stopping:
                        self._idle_until(next_flush)
                        self._check_store_file()
                    next_flush = time.monotonic() + self._flush_interval_s
                    batch = self._take()
                    if not batch:
                        if self._stop_requested.is_set() and not self._queue:
                            break
                        continue
                try:
                    batch = self._write_until_stored(batch)
                    self._release_batch()
                except StoreUnavailableError:
                    continue  # stopping, and past the deadline: the loop's top gives up
        except BaseException:
            log.exception("recorder: the writer thread failed")
            raise
        finally:
            self._close(held=batch)

    def _idle_until(self, next_flush: float) -> None:
        """Wait until `next_flush`, a full or prepared batch, or `stop`; run retention chunks
        meanwhile."""
        while (
            len(self._queue) < self._batch_size
            and self._prepared_raw is None
            and not self._stop_requested.is_set()
        ):
            now = time.monotonic()
            if now >= next_flush:
                return
            if self._retention is not None and self._retention.due(now):
                self._retention.step(now)
                continue
            self._wake.wait(next_flush - now)
            self._wake.clear()  # the loop condition re-checks the queue: no wake-up is lost

    def _take(self) -> list[StoredRecord]:
        """The next batch to write, bodies policy applied: the prepared one, once the redact
        thread has finished it, else up to `batch_size` records from the queue."""
        with self._lock:
            while self._prepared_raw is not None and self._prepared is None:
                if self._prepare_error is not None:
                    raise self._prepare_error  # `_close` counts the batch as lost
                self._preparing.wait()
            if self._prepared is not None:
                batch, self._prepared, self._prepared_raw = self._prepared, None, None
                self._batch_bytes, self._prepared_bytes = self._prepared_bytes, 0
                self._preparing.notify()  # the redact thread may take the next batch
                return batch
            batch, self._batch_bytes = self._pop_batch()
        if self._bodies_policy == "full":
            return batch
        self._redacting = batch  # `_close` counts them as lost if the policy raises
        applied = [self._apply_bodies_policy(record) for record in batch]
        self._redacting = None
        return applied

    def _pop_batch(self) -> tuple[list[StoredRecord], int]:
        """Up to `batch_size` records from the queue's head, and their `record_size`s' sum. Call
        with `_lock` held."""
        queue, sizes = self._queue, self._sizes
        batch = [queue.popleft() for _ in range(min(self._batch_size, len(queue)))]
        return batch, sum(sizes.popleft() for _ in batch)

    # --- redact thread (bodies: redacted) -------------------------------------------------------

    def _prepare_batches(self) -> None:
        """While the writer writes one batch, take the next full one and redact it; one at most."""
        while True:
            with self._lock:
                while not self._preparer_exit and (
                    self._prepared_raw is not None or len(self._queue) < self._batch_size
                ):
                    self._preparing.wait()
                if self._preparer_exit:
                    return
                raw, self._prepared_bytes = self._pop_batch()
                self._prepared_raw = raw
            try:
                prepared: list[StoredRecord] = []
                slice_end = time.perf_counter() + _REDACT_SLICE_S
                for record in raw:
                    prepared.append(self._apply_bodies_policy(record))
                    if time.perf_counter() >= slice_end:
                        time.sleep(0)  # let a thread waiting for the GIL have it now
                        slice_end = time.perf_counter() + _REDACT_SLICE_S
            except BaseException as exc:  # the writer raises it in its thread, as if its own
                with self._lock:
                    if self._prepared_raw is raw:
                        self._prepare_error = exc
                    self._preparing.notify()
                return
            with self._lock:
                if self._prepared_raw is raw:  # else the writer closed and counted it meanwhile
                    self._prepared = prepared
                self._preparing.notify()
            self._wake.set()  # the writer may be idle, waiting for a batch

    def _apply_bodies_policy(self, record: StoredRecord) -> StoredRecord:
        return apply_bodies_policy(record, self._bodies_policy)

    def _write_until_stored(self, batch: list[StoredRecord]) -> list[StoredRecord]:
        """Write `batch`, waiting out an outage; return what is left (nothing). Raises
        `StoreUnavailableError` only when `stop`'s deadline passes first."""

        def unavailable(exc: StoreUnavailableError, _failures: int) -> None:
            self._write_errors.inc()
            self._failing = str(exc)
            if self._outage_started is None:
                self._outage_started = time.monotonic()
                log.error(
                    "recorder: the store is unavailable; holding %d records and retrying "
                    "(logged once per outage): %s",
                    len(batch) + len(self._prepared_raw or ()) + len(self._queue),
                    exc,
                )

        # `_write` drops what it wrote from `batch` in place, so a retry resumes after it.
        left = self._retry.call(
            functools.partial(self._write, batch),
            wait=self._wait_to_retry,
            on_unavailable=unavailable,
        )
        self._store_reached()
        return left

    def _store_reached(self) -> None:
        """A write went through: the outage, if any, is over. Called before the write is counted,
        so that whoever sees `written_total` grow also sees `write_problem` cleared."""
        if self._outage_started is not None:
            log.warning(
                "recorder: the store is available again after %.1fs",
                time.monotonic() - self._outage_started,
            )
            self._outage_started = None
        self._failing = None

    def _release_batch(self) -> None:
        """The writer's batch is settled: its bytes no longer count toward `queue_max_bytes`."""
        with self._lock:
            self._held_bytes -= self._batch_bytes
            self._batch_bytes = 0

    def _wait_to_retry(self, delay: float) -> bool:
        self._backoff(delay)
        return not self._past_deadline()

    def _write(self, batch: list[StoredRecord]) -> list[StoredRecord]:
        """Write `batch`; return what is left to retry. Raises `StoreUnavailableError` (nothing was
        written) or returns []. A rejected batch is retried record by record."""
        try:
            self._repair_store_file()
            self._store.write_batch(batch)
        except StoreUnavailableError:
            raise
        except Exception as exc:
            log.warning("recorder: the store refused a batch of %d, isolating: %s", len(batch), exc)
            return self._write_one_by_one(batch)
        self._store_reached()
        self._settle_written(len(batch))
        self._notify_settled(batch)
        return []

    def _repair_store_file(self) -> None:
        """Reopen the SQLite file if it was deleted or replaced; raises `StoreUnavailableError`
        while it cannot be made."""
        repaired = self._store.reopen_if_replaced()
        self._file_failing = None
        if repaired is not None:
            self._reopened.inc()
            log.error("recorder: %s; writing to a new database file at that path", repaired)

    def _check_store_file(self) -> None:
        try:
            self._repair_store_file()
        except StoreError as exc:
            if self._file_failing is None:
                log.error("recorder: records cannot be written: %s", exc)
            self._file_failing = str(exc)

    def _write_one_by_one(self, batch: list[StoredRecord]) -> list[StoredRecord]:
        for index, record in enumerate(batch):
            try:
                self._store.write_batch([record])
            except StoreUnavailableError:
                del batch[:index]
                raise
            except Exception as exc:
                log.error(
                    "recorder: dropped a record the store refused (request_id=%s): %s",
                    record.request_id,
                    exc,
                )
                self._dropped["rejected"].inc()
                self._settled += 1
            else:
                self._store_reached()
                self._settle_written(1)
            self._notify_settled((record,))
        return []

    def _notify_settled(self, records: Sequence[StoredRecord]) -> None:
        if self._on_settled is None:
            return
        try:
            self._on_settled(records)
        except Exception:  # the journal must never stop the writer thread
            log.exception("recorder: on_settled failed")

    def _settle_written(self, count: int) -> None:
        self._written += count
        self._written_counter.inc(count)
        self._settled += count

    def _backoff(self, delay: float) -> None:
        if self._deadline is not None:
            delay = min(delay, max(0.0, self._deadline - time.monotonic()))
            time.sleep(delay)  # stopping: no reason to wait for anything but the clock
        else:
            self._stop_requested.wait(delay)

    def _past_deadline(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def _close(self, held: list[StoredRecord] | None = None) -> None:
        """Stop accepting and end the redact thread; count whatever is left (held by the writer,
        prepared or queued) as shutdown."""
        with self._lock:
            self._accepting = False
            self._preparer_exit = True
            left = (
                len(held or ())
                + len(self._redacting or ())
                + len(self._prepared_raw or ())
                + len(self._queue)
            )
            self._redacting = None
            self._queue.clear()
            self._sizes.clear()
            self._prepared_raw = self._prepared = None
            self._held_bytes = self._batch_bytes = self._prepared_bytes = 0
            self._preparing.notify_all()
        if left:
            log.error("recorder: %d records could not be written before shutdown", left)
            self._dropped["shutdown"].inc(left)
            self._dropped_at_shutdown += left
            self._settled += left
