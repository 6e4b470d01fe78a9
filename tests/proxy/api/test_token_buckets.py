"""Token buckets per caller: a burst, then the sustained rate, in bounded memory."""

from __future__ import annotations

import pytest

from proxy.api.token_buckets import TokenBuckets


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_caller_gets_its_burst_then_its_rate() -> None:
    clock = Clock()
    buckets = TokenBuckets(2.0, 3, clock=clock)
    assert [buckets.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("a") == pytest.approx(0.5)  # one token every 0.5 s
    assert buckets.take("b") == 0.0  # another caller has its own bucket
    clock.now += 0.5
    assert buckets.take("a") == 0.0
    assert buckets.take("a") > 0
    clock.now += 60  # refills up to the burst, never beyond
    assert [buckets.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("a") > 0


def test_refused_calls_take_nothing() -> None:
    clock = Clock()
    buckets = TokenBuckets(1.0, 1, clock=clock)
    assert buckets.take("a") == 0.0
    for _ in range(5):
        assert buckets.take("a") > 0
    clock.now += 1.0
    assert buckets.take("a") == 0.0


def test_memory_is_bounded_by_forgetting_the_least_recent_callers() -> None:
    clock = Clock()
    buckets = TokenBuckets(1.0, 1, max_callers=100, clock=clock)
    buckets.take("kept")
    for i in range(1000):
        buckets.take(f"flood-{i}")
        buckets.take("kept")  # used all along: never the least recent
    assert len(buckets) == 100
    assert buckets.take("kept") > 0  # its bucket survived the flood, still empty
