"""Token buckets per caller: how often each caller may post, in bounded memory.

Each caller's bucket holds up to `burst` tokens and refills at `rate_per_s`; a post takes one. The
buckets of the callers seen least recently are forgotten beyond `max_callers` (a forgotten caller
starts again with a full bucket), so a flood of new callers costs bounded memory.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable


class TokenBuckets:
    """Rate limits keyed by caller id (not thread-safe: used on the event loop)."""

    def __init__(
        self,
        rate_per_s: float,
        burst: int,
        *,
        max_callers: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.max_callers = max_callers
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        """caller → (tokens, when they were counted), least recently used first."""

    def take(self, caller: str) -> float:
        """Take one token of `caller`'s bucket: 0.0 when there was one, else how many seconds
        until there is (nothing is taken then)."""
        now = self._clock()
        tokens, then = self._buckets.pop(caller, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - then) * self.rate_per_s)
        wait = 0.0
        if tokens >= 1.0:
            tokens -= 1.0
        else:
            wait = (1.0 - tokens) / self.rate_per_s
        self._buckets[caller] = (tokens, now)
        while len(self._buckets) > self.max_callers:
            self._buckets.popitem(last=False)
        return wait

    def __len__(self) -> int:
        return len(self._buckets)
