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
SKIP_SIGMAS = 4.0
"""How far below its walk's spread a metric's limit may be for the walk to start there."""
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
    share: float | None = None
    """A rate's share of bad events (both arms alike): then the walk counts events, so that a
    run with more of them early has both a higher estimate and a wider bound, as the judge's
    adjusted rates do (a rate near 0 is skewed: a Gaussian walk would make its tail too thin).
    None: the Gaussian walk."""
    ratio: float = 1.0
    """With `share`: the baseline's answers per candidate answer."""


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
    tables = [[_OffsetTable(m.tau, beta) for m in channel.metrics] for channel in channels]
    times: list[float] = []
    for _ in range(runs):
        took = 0.0
        for channel, (counts, limits), offsets in zip(channels, grids, tables, strict=True):
            n = _first_pass(channel.metrics, counts, limits, offsets, rng)
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


def _first_pass(
    metrics: Sequence[MetricCurve],
    counts: list[int],
    limits: list[list[float]],
    offsets: Sequence[_OffsetTable],
    rng: random.Random,
) -> int:
    """The first count at which every metric passes at once (the last count if none): a
    Gaussian metric when its walk is below its limit; a rate when its adjusted difference of
    event counts plus the bound's width is within the margin."""
    if not limits or not limits[0]:
        return counts[0]
    # Below the first count where every metric's limit is within SKIP_SIGMAS of its walk's
    # spread, a pass is a one-in-thirty-thousand event: the walk starts there, in one draw.
    start = next(
        (j for j, (c, row) in enumerate(zip(counts, limits, strict=True))
         if all(limit >= -SKIP_SIGMAS * math.sqrt(c) for limit in row)),
        len(counts) - 1,
    )  # fmt: skip
    walks = [0.0] * len(limits[0])
    events = [[0, 0] for _ in metrics]  # a rate's (candidate, baseline) bad events
    before = 0  # the first step draws B(counts[start]) whole
    for count, row in zip(counts[start:], limits[start:], strict=True):
        grown = count - before
        step = math.sqrt(grown)
        before = count
        passing = True
        for i, limit in enumerate(row):
            m = metrics[i]
            if m.share is None:
                walks[i] += step * rng.gauss(0.0, 1.0)
                passing = passing and walks[i] <= limit
                continue
            tally = events[i]
            tally[0] += _poisson(rng, m.share * grown)
            tally[1] += _poisson(rng, m.share * m.ratio * grown)
            if passing and limit > -math.inf:
                passing = _rate_passes(m, tally, count, offsets[i])
        if passing:
            return count
    return counts[-1]


def _rate_passes(m: MetricCurve, tally: list[int], count: int, offsets: _OffsetTable) -> bool:
    """The judge's adjusted rates (one event and one non-event added to each arm)."""
    n_c, n_p = count, count * m.ratio
    p_c, p_p = (tally[0] + 1) / (n_c + 2), (tally[1] + 1) / (n_p + 2)
    se = math.sqrt(p_c * (1 - p_c) / (n_c + 2) + p_p * (1 - p_p) / (n_p + 2))
    margin = max(m.margin, 0.0)
    return p_c - p_p + offsets(se) <= margin


class _OffsetTable:
    """`offset(se, tau, beta)` on a log grid of standard errors, interpolated (it is smooth in
    se, and solving it afresh at every point of every run would cost a Newton solve each)."""

    LOW, HIGH, POINTS = 1e-6, 10.0, 400

    def __init__(self, tau: float, beta: float) -> None:
        self.log_low = math.log(self.LOW)
        self.step = (math.log(self.HIGH) - self.log_low) / (self.POINTS - 1)
        self.tau, self.beta = tau, beta
        self.values: list[float] | None = None

    def __call__(self, se: float) -> float:
        if self.values is None:  # built when a rate first asks
            self.values = [
                offset(math.exp(self.log_low + i * self.step), self.tau, self.beta)
                for i in range(self.POINTS)
            ]
        x = (math.log(max(se, self.LOW)) - self.log_low) / self.step
        i = min(self.POINTS - 2, int(x))
        frac = min(1.0, x - i)
        return self.values[i] + frac * (self.values[i + 1] - self.values[i])


def _poisson(rng: random.Random, mean: float) -> int:
    """A Poisson count: by multiplying uniforms for small means, by its normal approximation
    above 30."""
    if mean <= 0:
        return 0
    if mean > 30:
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    limit, k, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        k += 1
        product *= rng.random()
    return k


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
