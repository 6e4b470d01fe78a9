"""The event-loop overload monitor's decision, fed readings by hand (no real clock involved)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from proxy.mirror.overload import HOLD_S, LoopLoadMonitor

STEP = 0.025


class Feed:
    """Drives a monitor through simulated time: wake-ups `STEP` apart plus their lag."""

    def __init__(self, monitor: LoopLoadMonitor) -> None:
        self.monitor = monitor
        self.now = 0.0
        self.flips: list[tuple[float, bool]] = []
        """(time, new state) at every change of `overloaded`."""

    def run(self, seconds: float, lag_s: float = 0.0, busy: float = 0.0) -> bool:
        """`seconds` of wake-ups, each `lag_s` late, the loop's thread on the CPU `busy` of the
        time; return the state at the end."""
        end = self.now + seconds
        while self.now < end:
            elapsed = STEP + lag_s
            self.now += elapsed
            before = self.monitor.overloaded
            after = self.monitor.observe(self.now, elapsed, lag_s, busy * elapsed)
            if after != before:
                self.flips.append((self.now, after))
        return self.monitor.overloaded


def test_a_lightly_loaded_loop_is_never_overloaded() -> None:
    feed = Feed(LoopLoadMonitor(0.010, 0.70))
    assert not feed.run(60, lag_s=0.0008, busy=0.45)
    assert feed.flips == [] and feed.monitor.episodes == 0
    assert feed.monitor.lag_s == pytest.approx(0.0008, rel=0.01)
    assert feed.monitor.busy == pytest.approx(0.45, rel=0.01)


def test_a_lasting_lag_sheds_and_recovers_with_hysteresis() -> None:
    feed = Feed(LoopLoadMonitor(0.010, 0.0))
    assert feed.run(3, lag_s=0.020)
    (became,) = feed.flips
    assert 0.5 < became[0] < 2.0  # a lag that lasts, noticed within the averaging window
    # Between the resume level (5 ms) and the threshold (10 ms): still overloaded, no flapping.
    assert feed.run(20, lag_s=0.007)
    assert len(feed.flips) == 1
    calm_from = feed.now
    assert not feed.run(5, lag_s=0.0005)
    assert [state for _, state in feed.flips] == [True, False]
    assert feed.flips[-1][0] - calm_from < 1.0
    assert feed.monitor.episodes == 1


def test_one_long_pause_is_not_overload() -> None:
    """A garbage collection or a thread holding the GIL stalls the loop once: shedding after
    it would not help, so one wake-up counts at most a few times the threshold."""
    feed = Feed(LoopLoadMonitor(0.010, 0.70))
    feed.run(5, lag_s=0.0005, busy=0.3)
    assert not feed.run(STEP / 2, lag_s=0.800)  # one wake-up, 800 ms late, the CPU idle
    assert not feed.run(5, lag_s=0.0005, busy=0.3)
    assert feed.flips == []


def test_a_saturated_loop_sheds_by_its_busy_share_with_hysteresis() -> None:
    feed = Feed(LoopLoadMonitor(0.0, 0.70))
    assert feed.run(2, lag_s=0.002, busy=0.95)
    assert feed.run(20, lag_s=0.002, busy=0.65)  # above the resume level (60 %)
    assert not feed.run(5, lag_s=0.002, busy=0.30)
    assert [state for _, state in feed.flips] == [True, False]


def test_it_stays_overloaded_for_the_hold_time_after_the_last_hot_reading() -> None:
    monitor = LoopLoadMonitor(0.0, 0.70)
    feed = Feed(monitor)
    feed.run(2, busy=1.0)
    feed.run(10, busy=0.0)
    went_hot, recovered = (t for t, _ in feed.flips)
    # The busy share falls under 70 % within a quarter of a second once the load stops at t=2 s;
    # the loop recovers `hold_s` later, not before.
    assert 2.0 + HOLD_S <= recovered <= 2.0 + HOLD_S + 0.5
    assert went_hot < 1.0


def test_overload_under_alternating_load_does_not_flap() -> None:
    """Shedding removes the load that made the loop busy, and the load comes back as soon as
    shedding stops: each shedding period still lasts the hold time, not one wake-up."""
    monitor = LoopLoadMonitor(0.010, 0.70)
    feed = Feed(monitor)
    for _ in range(1200):  # 30 s
        if monitor.overloaded:
            feed.run(STEP, busy=0.40)  # shadows shed: the client path alone
        else:
            feed.run(STEP, busy=0.90)  # shadows running
    shed_periods = [(t, u) for (t, on), (u, _) in itertools.pairwise(feed.flips) if on]
    assert len(shed_periods) >= 5  # it does resume, again and again
    assert all(end - start >= HOLD_S for start, end in shed_periods)


def test_zero_thresholds_never_shed() -> None:
    feed = Feed(LoopLoadMonitor(0.0, 0.0))
    assert not feed.run(10, lag_s=0.5, busy=1.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"shed_lag_s": -1.0},
        {"shed_lag_s": 0.01, "shed_busy": 1.5},
        {"shed_lag_s": 0.01, "interval_s": 0.0},
        {"shed_lag_s": 0.01, "lag_window_s": 0.0},
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        LoopLoadMonitor(**kwargs)


def test_the_watch_task_reads_its_clocks_and_stops_cleanly() -> None:
    async def scenario() -> None:
        readings = itertools.count()
        # Every clock reading 60 ms after the previous one: each 1 ms wake-up looks 59 ms late.
        monitor = LoopLoadMonitor(
            0.010, interval_s=0.001, lag_window_s=0.004,
            clock=lambda: next(readings) * 0.060, cpu_clock=lambda: 0.0,
        )  # fmt: skip
        monitor.start()
        monitor.start()  # a second start is a no-op
        assert len(monitor._tasks) == 1
        deadline = asyncio.get_running_loop().time() + 10
        while not monitor.overloaded:
            assert asyncio.get_running_loop().time() < deadline, "never overloaded"
            await asyncio.sleep(0.002)
        assert monitor.busy == 0.0 and monitor.lag_s >= 0.010
        await monitor.stop()
        assert not monitor.running and not monitor.overloaded
        assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("overload:")]

    asyncio.run(scenario())
