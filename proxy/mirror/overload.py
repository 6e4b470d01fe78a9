"""Event-loop overload, measured, so that shadow traffic yields the CPU to the client path.

The gateway serves every client request on one event loop. Shadow calls run on the same loop and
cost about as much CPU as the client's own call; when the loop has no CPU to spare, every shadow
call started makes client requests wait longer. `LoopLoadMonitor` tells when that is the case.

It wakes up every `interval_s` and takes two readings, each an exponentially weighted moving
average:

- the **lag**: how late the loop ran the wake-up, i.e. how long any ready callback (a client's
  bytes, an upstream's answer) waits behind the work queued before it. It grows when the loop is
  saturated, and also when the process does not get the CPU (other processes on the core, another
  thread holding the GIL): whatever the cause, it is the delay the client path sees. Averaged over
  about the last `lag_window_s / interval_s` wake-ups, each counting at most `LAG_CAP` times the
  threshold, so that one long pause (a garbage collection, a thread holding the GIL, the process
  stopped) does not count as overload by itself: only a lag that lasts does.
- the **busy share**: the gateway's CPU time over the wall time since the previous wake-up,
  averaged over about `busy_window_s`. `cpu_clock` says whose CPU time: the loop's thread (the
  default), or the whole process when the gateway has it to itself (`mirrorgate serve`: its
  recorder and analysis threads compete with the loop for the same GIL). Near 1 the gateway is
  saturated by its own work. Unlike the lag it does not depend on the machine's speed, and other
  processes can only lower it (a loaded test machine does not make it look busy).

The loop is *overloaded* from the moment either reading reaches its threshold (`shed_lag_s`,
`shed_busy`) until both are back under their resume level (half the lag threshold; the busy
threshold less `BUSY_MARGIN`) and no reading reached a threshold for `hold_s`. The hysteresis
keeps the state from flapping when shedding itself brings the readings down.

The client path reads `overloaded` (a plain bool attribute); the monitor never touches a request.
Its own cost is one timer and two clock reads per wake-up, 40 a second at the default interval:
0.1-0.3 % of a core when the loop is idle (measured: 30-80 µs a wake-up, most of it the kernel
waking the thread), less when it is busy (the wake-up rides on an iteration that runs anyway).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from proxy.core import TaskSet

log = logging.getLogger("mirrorgate.overload")

INTERVAL_S = 0.025
"""Time between two wake-ups."""
LAG_WINDOW_S = 1.0
"""The lag is averaged over about this many seconds' worth of wake-ups (40 at the interval)."""
LAG_CAP = 4.0
"""One wake-up's lag counts at most this many times the lag threshold."""
BUSY_WINDOW_S = 0.5
"""Time constant of the busy share's moving average."""
HOLD_S = 2.0
"""The least time the loop stays overloaded after the last reading at or above a threshold."""
BUSY_MARGIN = 0.1
"""The loop recovers when the busy share is this much below its threshold (0.7 → 0.6)."""
LOG_EVERY_S = 60.0
"""Becoming overloaded is logged at most this often (the rest at debug level)."""


class LoopLoadMonitor:
    """Measures the event loop's lag and busy share; says whether the loop is overloaded.

    `shed_lag_s` or `shed_busy` at 0 leaves that reading out of the decision (both 0: the monitor
    never says overloaded). `clock` is wall time and `cpu_clock` the gateway's CPU time (by default
    the thread that runs the loop), both in seconds; tests inject readings through `observe`.
    """

    def __init__(
        self,
        shed_lag_s: float,
        shed_busy: float = 0.0,
        *,
        interval_s: float = INTERVAL_S,
        lag_window_s: float = LAG_WINDOW_S,
        busy_window_s: float = BUSY_WINDOW_S,
        hold_s: float = HOLD_S,
        clock: Callable[[], float] = time.perf_counter,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        if shed_lag_s < 0 or not 0 <= shed_busy <= 1:
            raise ValueError("need shed_lag_s >= 0 and 0 <= shed_busy <= 1")
        if min(interval_s, lag_window_s, busy_window_s) <= 0:
            raise ValueError("the interval and the windows must be positive")
        self.shed_lag_s = shed_lag_s
        self.resume_lag_s = shed_lag_s / 2
        self.shed_busy = shed_busy
        self.resume_busy = max(shed_busy - BUSY_MARGIN, 0.0)
        self.interval_s = interval_s
        self.lag_weight = min(interval_s / lag_window_s, 1.0)
        self.busy_window_s = busy_window_s
        self.hold_s = hold_s
        self.clock = clock
        self.cpu_clock = cpu_clock
        self.lag_s = 0.0
        """The smoothed lag, seconds."""
        self.busy = 0.0
        """The smoothed busy share, 0 to 1."""
        self.overloaded = False
        """True while shadow work should be shed. Read on the client path: keep it a plain bool."""
        self.episodes = 0
        """Times the loop became overloaded since the start."""
        self._last_hot = -float("inf")
        self._logged_at = -float("inf")
        self._tasks = TaskSet("overload")

    def observe(self, now: float, elapsed_s: float, lag_s: float, cpu_s: float) -> bool:
        """Take one wake-up's readings and return `overloaded`.

        `now` is the wake-up's time, `elapsed_s` the wall time since the previous wake-up, `lag_s`
        how late this one was and `cpu_s` the loop thread's CPU time in between.
        """
        lag = max(lag_s, 0.0)
        if self.shed_lag_s > 0:
            lag = min(lag, LAG_CAP * self.shed_lag_s)
        self.lag_s += self.lag_weight * (lag - self.lag_s)
        if elapsed_s > 0:
            weight = min(elapsed_s / self.busy_window_s, 1.0)
            self.busy += weight * (min(max(cpu_s / elapsed_s, 0.0), 1.0) - self.busy)
        lag_hot = self.shed_lag_s > 0 and self.lag_s >= self.shed_lag_s
        busy_hot = self.shed_busy > 0 and self.busy >= self.shed_busy
        if lag_hot or busy_hot:
            self._last_hot = now
            if not self.overloaded:
                self._become(True, now)
        elif (
            self.overloaded
            and now - self._last_hot >= self.hold_s
            and (self.shed_lag_s == 0 or self.lag_s < self.resume_lag_s)
            and (self.shed_busy == 0 or self.busy < self.resume_busy)
        ):
            self._become(False, now)
        return self.overloaded

    def _become(self, overloaded: bool, now: float) -> None:
        self.overloaded = overloaded
        readings = (self.lag_s * 1e3, self.busy * 100)
        if not overloaded:
            log.debug("event loop recovered (lag %.1f ms, busy %.0f%%)", *readings)
            return
        self.episodes += 1
        level = logging.INFO if now - self._logged_at >= LOG_EVERY_S else logging.DEBUG
        if level == logging.INFO:
            self._logged_at = now
        log.log(
            level,
            "event loop overloaded (lag %.1f ms, busy %.0f%%): new shadow calls are dropped "
            "until it recovers (%d times since the start)",
            *readings, self.episodes,
        )  # fmt: skip

    async def _watch(self) -> None:
        clock, cpu_clock, interval = self.clock, self.cpu_clock, self.interval_s
        last, last_cpu = clock(), cpu_clock()
        while True:
            await asyncio.sleep(interval)
            now, cpu = clock(), cpu_clock()
            elapsed = now - last
            self.observe(now, elapsed, elapsed - interval, cpu - last_cpu)
            last, last_cpu = now, cpu

    @property
    def running(self) -> bool:
        return len(self._tasks) > 0

    def start(self) -> None:
        """Start the wake-ups on the running loop (from the gateway's lifespan)."""
        if not self.running:
            self._tasks.spawn(self._watch(), "watch")

    async def stop(self) -> None:
        """Stop the wake-ups; the loop counts as not overloaded from then on."""
        await self._tasks.cancel_all()
        self.overloaded = False
