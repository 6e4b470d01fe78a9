"""How long a step takes, as a median and a 90th percentile (pure: curves in, times out; used by
`proxy.rollout.plan` for `rollout plan` and the ETA of `rollout status`).

A metric passes at the first look where its anytime-valid upper bound is within its margin. With
n answers the judge's estimate is the true value `c` plus noise of standard error `se(n)`, and
as answers accumulate that noise is a random walk: `estimate(n) = c + s·B(n)/n`, `B` a standard
Brownian motion in the number of answers, `s = se(n)·√n` (what the central limit theorem says of
a mean, a difference of rates, and — through its Bahadur representation — a quantile). So the
metric passes at n when

    B(n) <= n · (margin - c - width(n)) / s,

`width(n)` being the bound's half-width at `se(n)` (`analyzers.sequential.offset`). A step
passes at the first look where every metric of every channel passes at once; answers (and
rule-flip probes, a channel of their own that counts from the rollout's start) arrive as Poisson
processes, looks every `interval_s`, and a step lasts at least `step_interval_s`.

`simulate_step` draws that `runs` times with a fixed seed (an API call answers the same twice)
on a geometric grid of answer counts: about 200 runs of some 100 grid points per metric, a few
tens of milliseconds. The metrics' noises are drawn independently (latency p50 and p95 move
together in truth, so the forecast's spread is on the safe side).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from analyzers.sequential import offset

GRID_RATIO = 1.04
"""Successive answer counts of the simulated grid differ by 4 %: finer than the spread of the
times it measures."""
GRID_SPAN = 8.0
"""The grid reaches this many times the largest noise-free need; a run not passed by then is
counted there (the p90 is then a lower bound, rare at the spans the judge needs)."""


@dataclass(frozen=True, slots=True)
class MetricCurve:
    """One metric's estimate and its noise, as read off the judge's noise-free verdicts."""

    name: str
    centre: float
    """The estimate without noise, on the judge's additive scale (a log for ratios)."""
    sigma: float
    """Standard error times √n: the noise of one answer."""
    margin: float
    """The margin on the same scale."""
    tau: float
    """The confidence sequence's mixing scale."""
    least: int
    """Fewer answers than this are inconclusive (the metric's minimum sample)."""


@dataclass(frozen=True, slots=True)
class Channel:
    """Metrics fed by one arrival process (canary answers, or rule-flip probes per model)."""

    rate_per_s: float
    metrics: tuple[MetricCurve, ...]
    need: int
    """The largest noise-free need of its metrics (sizes the grid)."""


def simulate_step(
    channels: Sequence[Channel],
    *,
    beta: float,
    interval_s: float,
    step_interval_s: float,
    runs: int = 200,
    seed: int = 1,
) -> list[float]:
    """The step's time in each of `runs` simulated steps, in the order drawn (so that the
    draws of several steps add up run by run)."""
    rng = random.Random(seed)
    grids = [_grid(channel, beta) for channel in channels]
    times: list[float] = []
    for _ in range(runs):
        took = 0.0
        for channel, (counts, limits) in zip(channels, grids, strict=True):
            n = _first_pass(counts, limits, rng)
            took = max(took, _arrival(rng, n, channel.rate_per_s))
        # The pass is seen at the next look; the step lasts at least step_interval_s.
        took = max(step_interval_s, took + rng.uniform(0.0, interval_s))
        times.append(took)
    return times


def _grid(channel: Channel, beta: float) -> tuple[list[int], list[list[float]]]:
    """The grid's answer counts and, per count, each metric's limit on B(n) to pass."""
    low = max(1, min(m.least for m in channel.metrics)) if channel.metrics else 1
    high = max(low + 1, math.ceil(channel.need * GRID_SPAN))
    counts: list[int] = []
    n = float(low)
    while n < high:
        if not counts or int(n) > counts[-1]:
            counts.append(int(n))
        n *= GRID_RATIO
    counts.append(high)
    limits = []
    for count in counts:
        row = []
        for m in channel.metrics:
            if count < m.least:
                row.append(-math.inf)
                continue
            se = m.sigma / math.sqrt(count)
            room = m.margin - m.centre - offset(se, m.tau, beta)
            row.append(
                count * room / m.sigma if m.sigma > 0 else (math.inf if room >= 0 else -math.inf)
            )
        limits.append(row)
    return counts, limits


def _first_pass(counts: list[int], limits: list[list[float]], rng: random.Random) -> int:
    """The first count at which every metric's walk is below its limit (the last count if
    none)."""
    if not limits or not limits[0]:
        return counts[0]
    walks = [0.0] * len(limits[0])
    before = 0
    for count, row in zip(counts, limits, strict=True):
        step = math.sqrt(count - before)
        before = count
        passing = True
        for i, limit in enumerate(row):
            walks[i] += step * rng.gauss(0.0, 1.0)
            if walks[i] > limit:
                passing = False
        if passing:
            return count
    return counts[-1]


def _arrival(rng: random.Random, n: int, rate_per_s: float) -> float:
    """When the n-th arrival of a Poisson process of `rate_per_s` comes (a gamma time, drawn by
    its normal approximation above a few dozen)."""
    if rate_per_s <= 0:
        return math.inf
    if n < 30:
        return rng.gammavariate(n, 1.0) / rate_per_s if n > 0 else 0.0
    return max(0.0, (n + math.sqrt(n) * rng.gauss(0.0, 1.0)) / rate_per_s)


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile of sorted values (the smallest value with at least q of them at or
    below it)."""
    index = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[index]


def sigma_for(width: float, count: int, tau: float, beta: float) -> float:
    """The noise of one answer (se·√n) behind a bound of half-width `width` at `count` answers:
    `offset` inverted (it grows with the standard error), by bisection on a log scale."""
    if width <= 0 or count <= 0:
        return 0.0
    low, high = width * 1e-3, width
    while offset(high, tau, beta) < width:
        high *= 2
    for _ in range(40):
        mid = math.sqrt(low * high)
        if offset(mid, tau, beta) < width:
            low = mid
        else:
            high = mid
    return math.sqrt(low * high) * math.sqrt(count)
