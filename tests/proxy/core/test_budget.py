"""The hourly spend window: exact sums, constant memory."""

from __future__ import annotations

import pytest

from proxy.core.budget import HourlySpend


def test_spend_counts_the_last_hour_and_forgets_older_minutes() -> None:
    spend = HourlySpend()
    spend.add(0.0, 1.0)
    spend.add(30.0, 2.0)
    spend.add(1800.0, 4.0)
    assert spend.last_hour(1800.0) == pytest.approx(7.0)
    assert spend.last_hour(3660.0) == pytest.approx(4.0)  # the first minute left the window
    assert spend.last_hour(5460.0) == 0.0


def test_memory_is_bounded_by_minutes_not_calls() -> None:
    spend = HourlySpend()
    for i in range(100_000):
        spend.add(i * 0.1, 0.001)  # 10 calls a second for almost three hours
    assert len(spend.buckets) <= 61
    assert spend.last_hour(100_000 * 0.1) == pytest.approx(0.001 * 36_000, rel=0.02)
