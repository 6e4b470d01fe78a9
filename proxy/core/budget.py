"""Spend over a sliding hour, for `max_usd_per_hour` limits (shadows, the judge)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

BUCKET_S = 60.0
"""Spend is kept per minute: memory stays constant whatever the call rate."""


@dataclass(slots=True)
class HourlySpend:
    """USD spent in the last hour (to the minute), by a monotonic clock the caller passes in."""

    buckets: deque[list[float]] = field(default_factory=deque)
    """[minute start, USD] pairs, oldest first; at most 61."""
    total: float = 0.0

    def add(self, now: float, usd: float) -> None:
        start = now - now % BUCKET_S
        if self.buckets and self.buckets[-1][0] == start:
            self.buckets[-1][1] += usd
        else:
            self.buckets.append([start, usd])
        self.total += usd
        self._expire(now)

    def last_hour(self, now: float) -> float:
        self._expire(now)
        return self.total

    def _expire(self, now: float) -> None:
        while self.buckets and self.buckets[0][0] + BUCKET_S <= now - 3600.0:
            self.total -= self.buckets.popleft()[1]
        if not self.buckets:
            self.total = 0.0  # no float residue once everything has expired
