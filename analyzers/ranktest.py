"""Distribution-free tests on latency samples (pure: sorted floats in, numbers out).

- `mann_whitney`: the Mann-Whitney U test (Wilcoxon rank-sum), one-sided "candidate tends to be
  larger", by the normal approximation with the tie correction and a continuity correction
  (Lehmann 1975, ch. 1). U counts, over every (primary, candidate) pair, 1 when the candidate
  value is larger and 1/2 when they are equal; U / (n_p·n_c) estimates P(C > P) + P(C = P)/2.
  It is computed with two binary searches per candidate value, so it costs O(n log n) in C code.
- `quantile_bounds`: the order-statistic confidence bounds of a quantile (the binomial method,
  by its normal approximation): the q-quantile lies between the ranks n·q -+ z·√(n·q·(1-q)).
  No bootstrap, no distributional assumption.

Inputs must be sorted ascending; the judge sorts each arm once (timsort is linear on data that
arrives already sorted) and hands the same lists to every test.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat

from analyzers.sequential import upper_tail


@dataclass(frozen=True, slots=True)
class RankTest:
    """The Mann-Whitney U test of "candidate larger than primary"."""

    u: float
    """U of the candidate: pairs where the candidate is larger, plus half the ties."""
    z: float
    """The standardised U (tie- and continuity-corrected); 0 when every value is equal."""
    p_value: float
    """One-sided: the chance of a U at least this large if both arms had one distribution."""


def mann_whitney(primary: Sequence[float], candidate: Sequence[float]) -> RankTest:
    """One-sided Mann-Whitney U of `candidate` (sorted) against `primary` (sorted).
    Raises ValueError when either arm is empty."""
    n_p, n_c = len(primary), len(candidate)
    if n_p == 0 or n_c == 0:
        raise ValueError("Mann-Whitney needs at least one value in each arm")
    below = sum(map(bisect_left, repeat(primary, n_c), candidate))
    below_or_equal = sum(map(bisect_right, repeat(primary, n_c), candidate))
    u = (below + below_or_equal) / 2
    n = n_p + n_c
    ties = 0
    if len(set(primary).union(candidate)) < n:
        ties = sum(t * t * t - t for t in Counter([*primary, *candidate]).values() if t > 1)
    variance = n_p * n_c / 12 * ((n + 1) - ties / (n * (n - 1)))
    if variance <= 0:
        return RankTest(u, 0.0, 1.0)
    excess = u - n_p * n_c / 2
    # Continuity correction towards the null, never past it.
    z = math.copysign(max(abs(excess) - 0.5, 0.0), excess) / math.sqrt(variance)
    return RankTest(u, z, upper_tail(z))


def quantile_bounds(values: Sequence[float], q: float, z: float) -> tuple[float, float]:
    """Lower and upper confidence bounds of the q-quantile of sorted `values`, each one-sided
    at the level of `z`: the order statistics of ranks ⌊n·q - z·s⌋ and ⌈n·q + z·s⌉ (1-based),
    s = √(n·q·(1-q)). A rank below 1 gives -inf, above n gives +inf: the data cannot bound it."""
    n = len(values)
    if n == 0:
        return -math.inf, math.inf
    spread = z * math.sqrt(n * q * (1 - q))
    low_rank = math.floor(n * q - spread)
    high_rank = math.ceil(n * q + spread)
    low = values[low_rank - 1] if low_rank >= 1 else -math.inf
    high = values[high_rank - 1] if high_rank <= n else math.inf
    return low, high
