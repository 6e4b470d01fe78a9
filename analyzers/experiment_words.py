"""Numbers as an experiment's decisions write them (pure: numbers in, short strings out).

Signs are always shown and minus is the typographic one (U+2212, not a hyphen), as in
"completion -0.4 pts [-2.1, +1.3], cost/operation -41 % [-44, -38]"; counts are rounded to two
significant figures with thousands separators ("≈1,200"), durations to the unit that reads best
("≈3 h 20 min").
"""

from __future__ import annotations

import math

_MINUS = "\N{MINUS SIGN}"


def signed(value: float, decimals: int) -> str:
    """`value` with its sign (+0.0 for zero) and a typographic minus."""
    text = f"{value:+.{decimals}f}"
    if text.lstrip("+-").strip("0.") == "":
        text = "+" + text[1:]  # a value that rounds to zero is +0, never -0
    return text.replace("-", _MINUS)


def points(estimate: float, low: float | None, high: float | None) -> str:
    """A difference of shares in points: `+2.1 pts [+0.3, +3.9]` (0.021 is 2.1 points)."""
    shown = f"{signed(estimate * 100, 1)} pts"
    if low is None or high is None:
        return shown
    return f"{shown} [{signed(low * 100, 1)}, {signed(high * 100, 1)}]"


def relative(estimate: float, low: float | None, high: float | None) -> str:
    """A relative change in percent: `-41 % [-44, -38]`; one decimal when every number is
    under 10 %."""
    values = [v for v in (estimate, low, high) if v is not None]
    decimals = 1 if max(abs(v) for v in values) < 0.1 else 0
    shown = f"{signed(estimate * 100, decimals)} %"
    if low is None or high is None:
        return shown
    return f"{shown} [{signed(low * 100, decimals)}, {signed(high * 100, decimals)}]"


def count(value: int) -> str:
    """A count to two significant figures with thousands separators: 1234 -> `1,200`."""
    if value < 100:
        return str(value)
    digits = math.floor(math.log10(value)) + 1
    return f"{round(value, 2 - digits):,}"


def duration(seconds: float) -> str:
    """A duration as it reads best: `40 s`, `25 min`, `3 h 20 min`, `4 days`."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    if hours < 48:
        rest = 10 * round(rest / 10)
        if rest == 60:
            hours, rest = hours + 1, 0
        return f"{hours} h" if rest == 0 else f"{hours} h {rest} min"
    return f"{round(seconds / 86400)} days"
