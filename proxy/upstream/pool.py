"""The idle-connection pool of one upstream origin: LIFO reuse, a hard cap, FIFO waiters.

Every operation is O(1) on the request path. `acquire` pops the most recently used idle connection
and asks only that one whether it is still usable (an attribute check, no syscall); it never scans
the pool. Connections that went stale at the bottom of the stack are evicted one per `release`, so
a burst that opened many connections drains back down without a sweep.

The pool counts *slots*, not objects: a slot is taken from the moment `acquire` says "open a new
connection" until the connection is `discard`ed, so connections being opened count against
`max_connections` too. When every slot is busy, callers queue in arrival order; a freed connection
or slot goes straight to the oldest waiter, so nobody can jump the queue.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar


class PooledConnection(Protocol):
    """What the pool needs from a connection."""

    def is_usable(self) -> bool:
        """Open, idle and clean: a new request may be written to it now. Must be cheap."""

    def close(self) -> None:
        """Close at once (abortively); idempotent."""


C = TypeVar("C", bound=PooledConnection)


class ConnectionPool(Generic[C]):
    """Idle connections and connection slots of one origin.

    `acquire` returns an idle connection, or None when the caller holds a fresh slot and must open
    a connection itself. Whoever holds a connection (or a fresh slot) hands it back exactly once:
    `release(conn)` when the connection can carry another request, `discard()` otherwise (after
    closing it, or when opening it failed). `clock` (monotonic seconds) dates idle connections.
    """

    __slots__ = ("_clock", "_closed", "_expiry_s", "_idle", "_max", "_open", "_waiters")

    def __init__(
        self,
        max_connections: int,
        keepalive_expiry_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, not {max_connections}")
        self._max = max_connections
        self._clock = clock
        self._expiry_s = keepalive_expiry_s
        self._idle: deque[tuple[float, C]] = deque()
        """(expiry deadline, connection), most recently released on the right."""
        self._waiters: deque[asyncio.Future[C | None]] = deque()
        self._open = 0
        """Slots taken: idle + busy + being opened."""
        self._closed = False

    @property
    def open_connections(self) -> int:
        """Connections open or being opened (idle ones included)."""
        return self._open

    @property
    def idle_connections(self) -> int:
        return len(self._idle)

    async def acquire(self, timeout_s: float) -> C | None:
        """An idle usable connection, or None: the caller got a slot and opens a connection.

        Waits up to `timeout_s` in FIFO order when all slots are taken; raises `TimeoutError`
        then, and `RuntimeError` once the pool is closed.
        """
        if self._closed:
            raise RuntimeError("the connection pool is closed")
        idle = self._idle
        if idle:
            now = self._clock()
            while idle:
                deadline, conn = idle.pop()
                if deadline > now and conn.is_usable():
                    return conn
                conn.close()
                self._open -= 1
        if self._open < self._max:
            self._open += 1
            return None
        return await self._wait(timeout_s)

    async def _wait(self, timeout_s: float) -> C | None:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[C | None] = loop.create_future()
        self._waiters.append(waiter)
        timer = loop.call_later(timeout_s, _expire, waiter)
        try:
            return await waiter
        except BaseException:
            # Cancelled (or timed out) after a connection or slot was handed over: pass it on.
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                handed = waiter.result()
                if handed is None:
                    self.discard()
                else:
                    self.release(handed)
            raise
        finally:
            timer.cancel()
            # A waiter that gave up stays in the deque; hand-offs skip it (O(1) here).

    def release(self, conn: C) -> None:
        """Take back a connection that finished its exchange cleanly and may carry another."""
        if self._closed:
            conn.close()
            self._open -= 1
            return
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        now = self._clock()
        idle = self._idle
        idle.append((now + self._expiry_s, conn))
        # Evict at most one expired connection from the bottom of the stack per release.
        if idle[0][0] <= now:
            _, stale = idle.popleft()
            stale.close()
            self._open -= 1

    def discard(self) -> None:
        """Free the slot of a connection that was closed (or never opened)."""
        self._open -= 1
        if self._closed:
            return
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                self._open += 1
                waiter.set_result(None)
                return

    def close(self) -> None:
        """Close every idle connection; busy ones are closed when released. Waiters fail."""
        self._closed = True
        while self._idle:
            _, conn = self._idle.pop()
            conn.close()
            self._open -= 1
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(RuntimeError("the connection pool is closed"))


def _expire(waiter: asyncio.Future[Any]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())
