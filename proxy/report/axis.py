"""A chart axis for the HTML report's SVG charts: data values to pixels, linear or log10, with
ticks at round values (1, 2, 2.5 or 5 times a power of ten; 1, 2, 5 per decade on a log axis)."""

from __future__ import annotations

import math


def nice_step(span: float, target_ticks: int = 5) -> float:
    raw = span / max(1, target_ticks)
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


class Axis:
    """Maps data values to pixels, linear or log10, with tick positions."""

    def __init__(self, low: float, high: float, start: float, end: float, *, log: bool) -> None:
        self.log = log
        if log:
            low, high = max(low, 1e-4), max(high, 1e-4)
            if high / low < 1.5:
                low, high = low / 2, high * 2
            candidates = [
                m * 10.0**k
                for k in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1)
                for m in (1, 2, 5)
            ]
            self.low = max(c for c in candidates if c <= low * (1 + 1e-9))
            self.high = min(c for c in candidates if c >= high * (1 - 1e-9))
            ticks = [c for c in candidates if self.low <= c <= self.high]
            if len(ticks) > 7:  # too crowded: keep the powers of ten
                decades = [t for t in ticks if _is_power_of_ten(t)]
                ticks = decades if len(decades) >= 2 else ticks[:: math.ceil(len(ticks) / 6)]
            self.ticks = ticks
        else:
            high = high if high > low else low + (abs(low) or 1.0)
            step = nice_step(high - min(low, 0.0))
            self.low = min(0.0, math.floor(low / step) * step)
            self.high = math.ceil(high / step - 1e-9) * step
            count = round((self.high - self.low) / step)
            self.ticks = [self.low + i * step for i in range(count + 1)]
        self.start, self.end = start, end

    def __call__(self, value: float) -> float:
        if self.log:
            value = min(max(value, self.low), self.high)
            share = math.log10(value / self.low) / math.log10(self.high / self.low)
        else:
            share = (value - self.low) / (self.high - self.low)
        return self.start + share * (self.end - self.start)


def _is_power_of_ten(value: float) -> bool:
    exponent = round(math.log10(value))
    return math.isclose(value, 10.0**exponent, rel_tol=1e-9)


TIME_STEPS_S = (
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
    172800, 604800,
)  # fmt: skip
"""Tick spacings of a time axis, in seconds: round seconds, minutes, hours, days and a week."""


class TimeAxis(Axis):
    """A linear axis of seconds since a first moment, from 0 to a round time past `span_s` (a
    little room after the last event), with ticks at round times (5 min, 1 h, ...)."""

    def __init__(self, span_s: float, start: float, end: float, target_ticks: int = 5) -> None:
        span_s = max(span_s, 1.0) * 1.05
        step = next((s for s in TIME_STEPS_S if s * target_ticks >= span_s), TIME_STEPS_S[-1])
        count = math.ceil(span_s / step)
        self.log = False
        self.low, self.high = 0.0, float(count * step)
        self.ticks = [float(i * step) for i in range(count + 1)]
        self.start, self.end = start, end
