"""How much false-rollback risk each look at a rollout may spend (pure: numbers in, levels out).

The judge looks at the same rollout again every analysis interval. Testing each look at a fixed
level would inflate the chance of a false rollback with every look (ten looks at 5% fail an
identical candidate up to ~40% of the time). mirrorgate spends a fixed budget instead:

- **Budget.** `alpha` (default 1%) is the most a rollout — or one rule epoch, which counts its
  own looks — may risk failing a candidate that is within every threshold, over all its looks
  and all its metrics together.
- **Across metrics: Bonferroni.** Each of the `metrics` fail-capable verdicts of a look gets
  alpha / metrics. No assumption about how the metrics correlate (they do: slow requests time out).
- **Across looks: an alpha-spending function** (Lan & DeMets 1983) of the Kim-DeMets power
  family with rho = 2, A(t) = alpha · t², on the information time t = look / (look + scale).
  The budget of look k is A(t_k) - A(t_{k-1}). With rho = 2 the increments grow over the first
  `scale` looks: the first looks, which see the fewest samples and are where a noisy canary is
  most often rolled back, are the strictest (O'Brien-Fleming-like); rho = 1 would be Pocock-like
  (flat), rho = 3 close to O'Brien-Fleming (too strict to catch a broken rule within 30 s).
  Because t only tends to 1, looks never run out: there is no maximum number of looks, half
  the budget is spent by look 2.4·scale, and the increments then shrink like 1/k³.
- **Union bound, not exact boundaries.** The per-look levels simply sum to at most alpha, so the
  guarantee holds whatever the overlap between looks (cumulative or sliding windows alike) —
  at the price of being somewhat conservative against exact group-sequential boundaries, which
  need the correlation between looks and numerical integration.

With the defaults (alpha 1%, scale 180 looks, i.e. 30 minutes at a 10 s interval) the first
look of a single metric is tested at 3e-7 (z ≈ 5.0) and look 180 at 1.4e-5 (z ≈ 4.2).
"""

from __future__ import annotations

import math
from statistics import NormalDist

_STANDARD_NORMAL = NormalDist()


def spent_alpha(look: int, alpha: float, scale: int) -> float:
    """The part of `alpha` spent by the end of look `look` (0 for look 0):
    alpha · (look / (look + scale))²."""
    if look < 0:
        raise ValueError(f"look must be >= 0, got {look}")
    if scale < 1:
        raise ValueError(f"scale must be >= 1, got {scale}")
    t = look / (look + scale)
    return alpha * t * t


def look_alpha(look: int, alpha: float, scale: int, metrics: int = 1) -> float:
    """The one-sided level at which each of `metrics` metrics may fail at look `look` (1-based):
    the look's increment of the spending function, split evenly over the metrics."""
    if look < 1:
        raise ValueError(f"look is 1-based, got {look}")
    if metrics < 1:
        raise ValueError(f"metrics must be >= 1, got {metrics}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    increment = spent_alpha(look, alpha, scale) - spent_alpha(look - 1, alpha, scale)
    return increment / metrics


def z_for(alpha: float) -> float:
    """The standard normal quantile z with P(Z > z) = alpha (one-sided critical value)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    # inv_cdf of the small tail keeps its precision where 1 - alpha would round to 1.
    return -_STANDARD_NORMAL.inv_cdf(alpha)


def upper_tail(z: float) -> float:
    """P(Z > z) for a standard normal Z, precise far into the tail."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))
