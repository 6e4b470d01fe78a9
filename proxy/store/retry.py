"""The one retry loop for store writes: while the store is unavailable, wait and try again.

Only `StoreUnavailableError` is retried (the same call may succeed later); any other error leaves
the loop at once, because retrying a bug or a refused record would only repeat it. The waits start
at `initial_s` and double up to `max_s`; each write that gets through starts again from
`initial_s`. The recorder's writer thread drives the loop with `call`; the rule tracker, on the
event loop, with `call_async`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from .errors import StoreUnavailableError

T = TypeVar("T")

UnavailableHook = Callable[[StoreUnavailableError, int], object]
"""Told of each failed attempt: the error, and how many attempts have failed so far (1 at the
first: the place to log an outage once)."""


def _ignore(_exc: StoreUnavailableError, _failures: int) -> None:
    return None


@dataclass(frozen=True, slots=True)
class WriteRetry:
    """How a store write is retried while the store is unavailable."""

    initial_s: float = 0.05
    """The first wait, after the first failed attempt."""
    max_s: float = 5.0
    """No wait is longer than this, however long the outage."""

    def __post_init__(self) -> None:
        if not 0 < self.initial_s <= self.max_s:
            raise ValueError("need 0 < initial_s <= max_s")

    def delays(self) -> Iterator[float]:
        """The waits between attempts: `initial_s`, doubling, then `max_s` for ever."""
        delay = self.initial_s
        while True:
            yield delay
            delay = min(delay * 2, self.max_s)

    def call(
        self,
        write: Callable[[], T],
        *,
        wait: Callable[[float], bool],
        on_unavailable: UnavailableHook = _ignore,
    ) -> T:
        """`write()`'s result, calling it again while it raises `StoreUnavailableError`
        (blocking: for a worker thread).

        `wait(delay)` waits before the next attempt; when it returns False (the caller is
        stopping) the loop gives up and raises the last `StoreUnavailableError`.
        """
        delays = self.delays()
        failures = 0
        while True:
            try:
                return write()
            except StoreUnavailableError as exc:
                failures += 1
                on_unavailable(exc, failures)
                if not wait(next(delays)):
                    raise

    async def call_async(
        self, write: Callable[[], T], *, on_unavailable: UnavailableHook = _ignore
    ) -> T:
        """The same loop on the event loop: each attempt of the blocking `write` runs on a
        worker thread and the waits are `asyncio.sleep`, so cancelling the task ends the loop."""
        delays = self.delays()
        failures = 0
        while True:
            try:
                return await asyncio.to_thread(write)
            except StoreUnavailableError as exc:
                failures += 1
                on_unavailable(exc, failures)
                await asyncio.sleep(next(delays))
