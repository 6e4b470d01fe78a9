"""Writing an offline run's results to the store: in batches, each answer with its pair.

The gateway writes through `proxy.store.Recorder`, which never makes the client wait and drops
records when it must. An offline run has no client to protect and every record matters — a lost pair
means the request is sent again on the next run — so results are written here instead:

- a candidate's `ExchangeRecord` and its `PairRecord` always go in the same transaction, so a pair
  is never stored without its answer, nor the other way round;
- writing is awaited (on a worker thread), which slows the run down rather than dropping anything;
- the `store.bodies` policy is applied as the recorder applies it (`redacted` masks secrets in the
  request, the response and the answer text; `none` keeps none of them);
- nothing else the recorder does (retention, metrics) belongs to a replay.

A batch is written once `batch_size` records are waiting or `max_wait_s` after the previous write,
so an interrupted run loses at most that much.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Literal

from proxy.core import ExchangeRecord, PairRecord
from proxy.store import Store, apply_bodies_policy

StoredRecord = ExchangeRecord | PairRecord
BodiesPolicy = Literal["full", "redacted", "none"]


class ResultWriter:
    """Buffers results and writes them to `store`; `flush` at the end of the run."""

    def __init__(
        self,
        store: Store,
        bodies: BodiesPolicy,
        *,
        batch_size: int = 64,
        max_wait_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._bodies = bodies
        self._batch_size = batch_size
        self._max_wait_s = max_wait_s
        self._clock = clock
        self._buffer: list[StoredRecord] = []
        self._lock = asyncio.Lock()
        self._flushed_at = clock()
        self.written = 0
        """Records committed so far."""
        self.lost = 0
        """Records in batches the store refused (their requests will be replayed again)."""

    async def add(self, records: Sequence[StoredRecord]) -> None:
        """Queue `records` to be written together; write a batch if one is due.

        Raises `StoreError` when a batch cannot be written."""
        self._buffer.extend(records)
        due = self._clock() - self._flushed_at >= self._max_wait_s
        if len(self._buffer) >= self._batch_size or due:
            await self.flush()

    async def flush(self) -> None:
        """Write everything queued. Raises `StoreError` (those records are then lost)."""
        async with self._lock:
            batch, self._buffer = self._buffer, []
            self._flushed_at = self._clock()
            if not batch:
                return
            try:
                await asyncio.to_thread(self._write, batch)
            except Exception:
                self.lost += len(batch)
                raise
            self.written += len(batch)

    def _write(self, batch: list[StoredRecord]) -> None:
        self._store.write_batch([self._apply_policy(record) for record in batch])

    def _apply_policy(self, record: StoredRecord) -> StoredRecord:
        return apply_bodies_policy(record, self._bodies)
