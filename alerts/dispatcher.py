"""Delivers alerts to every sink in the background: bounded, deduplicated, retried, counted.

The caller (the rollout controller, the judge) calls `notify`, which never blocks and never raises.
Each sink has its own bounded queue and worker, so a sink that is down — retrying with backoff —
delays only its own deliveries, never the other sinks or the caller.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import httpx
from prometheus_client import Counter

from alerts.alert import Alert
from alerts.errors import SinkRejectedError, SinkUnavailableError
from alerts.sink import AlertSink

log = logging.getLogger("mirrorgate.alerts")

# Remembered fingerprints are pruned by age; this caps memory if many distinct alerts fire at once.
MAX_REMEMBERED_FINGERPRINTS = 10_000


class DeliveryMetrics(Protocol):
    """The families a dispatcher counts into. alerts defines no metric of its own: the gateway's
    catalogue (`proxy.observability.AlertDeliveryMetrics`) does, so every family has one home."""

    sent: Counter
    """`mirrorgate_alerts_sent{sink, kind}`"""
    failures: Counter
    """`mirrorgate_alert_failures{sink}`"""
    dropped: Counter
    """`mirrorgate_alerts_dropped{reason}`"""


class AlertDispatcher:
    """Fan-out of alerts to `sinks`.

    - `notify(alert)`: the same `alert.fingerprint` seen within `dedupe_window_s` (by `clock`) is
      dropped as `deduplicated` (the fingerprint holds the route, the kind and the rollout id,
      so a new rollout's alert of the same route and kind is delivered); a sink whose queue
      holds `queue_size` alerts drops it as `queue_full`.
    - Delivery: `SinkUnavailableError` (connection errors, timeouts, 5xx, 408/429) is retried up to
      `retries` times, sleeping `min(backoff_max_s, backoff_initial_s * 2**n)` scaled by a jitter
      factor in [0.5, 1); `SinkRejectedError` (other 4xx) and unexpected exceptions are not retried.
      Either way the failure is counted and logged, and the sink moves on to its next alert.

    Metrics, into `metrics` (the gateway's catalogue defines the families):
    `mirrorgate_alerts_sent_total{sink, kind}` — alerts a sink accepted;
    `mirrorgate_alert_failures_total{sink}` — alerts a sink never accepted (after retries);
    `mirrorgate_alerts_dropped_total{reason}` — `queue_full` (per sink queue) or `deduplicated`.
    """

    def __init__(
        self,
        sinks: Sequence[AlertSink],
        client: httpx.AsyncClient,
        metrics: DeliveryMetrics,
        clock: Callable[[], float] = time.monotonic,
        *,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
        retries: int = 5,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 30.0,
        dedupe_window_s: float = 300.0,
        queue_size: int = 1000,
    ) -> None:
        if retries < 0 or backoff_initial_s < 0 or backoff_max_s < 0 or dedupe_window_s < 0:
            raise ValueError("retries, backoff and dedupe window must not be negative")
        if queue_size < 1:
            raise ValueError("queue_size must be at least 1")
        self._sinks = list(sinks)
        self._client = client
        self._clock = clock
        self._sleep = sleep
        self._jitter = jitter
        self._retries = retries
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._dedupe_window_s = dedupe_window_s
        self._queues: list[asyncio.Queue[Alert]] = [
            asyncio.Queue(maxsize=queue_size) for _ in self._sinks
        ]
        self._pending = [0] * len(self._sinks)  # queued or in flight, per sink
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._workers: list[asyncio.Task[None]] = []
        self.sent = metrics.sent
        self.failures = metrics.failures
        self.dropped = metrics.dropped
        for sink in self._sinks:
            self.failures.labels(sink=sink.name)
        for reason in ("queue_full", "deduplicated"):
            self.dropped.labels(reason=reason)

    def notify(self, alert: Alert) -> bool:
        """Queue `alert` for every sink without waiting. True if every sink's queue took it;
        False if it was deduplicated or some sink's queue was full (counted, never raised)."""
        now = self._clock()
        fingerprint = alert.fingerprint
        self._forget_before(now - self._dedupe_window_s)
        if fingerprint in self._seen:
            self.dropped.labels(reason="deduplicated").inc()
            return False
        self._seen[fingerprint] = now
        accepted = True
        for index, (sink, queue) in enumerate(zip(self._sinks, self._queues, strict=True)):
            try:
                queue.put_nowait(alert)
                self._pending[index] += 1
            except asyncio.QueueFull:
                self.dropped.labels(reason="queue_full").inc()
                log.warning("alert queue of sink %s is full; dropped %s", sink.name, fingerprint)
                accepted = False
        return accepted

    def _forget_before(self, cutoff: float) -> None:
        # Entries are in insertion order, which is time order: prune from the oldest end.
        while self._seen:
            fingerprint, seen_at = next(iter(self._seen.items()))
            if seen_at > cutoff and len(self._seen) < MAX_REMEMBERED_FINGERPRINTS:
                break
            del self._seen[fingerprint]

    def start(self) -> None:
        """Start one worker task per sink on the running loop. Idempotent."""
        if self._workers:
            return
        loop = asyncio.get_running_loop()
        for index, sink in enumerate(self._sinks):
            # proxy.tasks is off limits here (alerts never imports proxy); the dispatcher keeps the
            # references itself, names the tasks and logs a worker's death in `_worker_done`.
            task = loop.create_task(self._work(index), name=f"alerts:{sink.name}")
            task.add_done_callback(self._worker_done)
            self._workers.append(task)

    @staticmethod
    def _worker_done(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("alert worker %s died", task.get_name(), exc_info=task.exception())

    async def stop(self, timeout_s: float = 5.0) -> int:
        """Let the workers finish queued alerts for up to `timeout_s`, then cancel them.
        Returns how many deliveries (an alert to a sink) were abandoned, queued or in flight."""
        if self._workers:
            try:
                await asyncio.wait_for(self._drain(), timeout_s)
            except TimeoutError:
                log.warning("alert delivery did not finish within %.1fs; abandoning", timeout_s)
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers.clear()
        return sum(self._pending)

    async def _drain(self) -> None:
        for queue in self._queues:
            await queue.join()

    async def _work(self, index: int) -> None:
        sink, queue = self._sinks[index], self._queues[index]
        while True:
            alert = await queue.get()
            try:
                await self._deliver(sink, alert)
                self._pending[index] -= 1
            finally:
                queue.task_done()

    def backoff_s(self, attempt: int) -> float:
        """The pause before retry number `attempt` (0-based): exponential, capped, jittered."""
        ceiling = min(self._backoff_max_s, self._backoff_initial_s * 2.0**attempt)
        return ceiling * (0.5 + 0.5 * self._jitter())

    async def _deliver(self, sink: AlertSink, alert: Alert) -> None:
        attempt = 0
        while True:
            try:
                await sink.send(alert, self._client)
            except SinkUnavailableError as exc:
                if attempt >= self._retries:
                    self._fail(sink, alert, f"gave up after {attempt + 1} attempts: {exc}")
                    return
                await self._sleep(self.backoff_s(attempt))
                attempt += 1
            except SinkRejectedError as exc:
                self._fail(sink, alert, f"rejected: {exc}")
                return
            except Exception as exc:  # a sink plugin's bug must not kill its worker
                self._fail(sink, alert, f"sink raised {type(exc).__name__}: {exc}")
                return
            else:
                self.sent.labels(sink=sink.name, kind=alert.kind).inc()
                return

    def _fail(self, sink: AlertSink, alert: Alert, why: str) -> None:
        self.failures.labels(sink=sink.name).inc()
        log.warning(
            "alert %s (%s) not delivered to %s: %s", alert.fingerprint, alert.kind, sink.name, why
        )
