"""Spend over a sliding hour, for `max_usd_per_hour` limits (shadows, the judge)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(slots=True)
class HourlySpend:
    """USD spent in the last hour, by a monotonic clock the caller passes in."""

    window: deque[tuple[float, float]] = field(default_factory=deque)
    total: float = 0.0

    def add(self, now: float, usd: float) -> None:
        self.window.append((now, usd))
        self.total += usd

    def last_hour(self, now: float) -> float:
        while self.window and self.window[0][0] < now - 3600.0:
            self.total -= self.window.popleft()[1]
        return self.total
