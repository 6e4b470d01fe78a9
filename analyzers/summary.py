"""Descriptive statistics of arms and pairs (pure: plain numbers in, frozen summaries out).

What `mirrorgate report` prints, and what the rollout judge can reuse:

- `percentile`: the linear-interpolation percentile (Hyndman & Fan type 7; numpy's and R's
  default, Excel's PERCENTILE.INC). For sorted values x[0..n-1] and q in [0, 1], h = (n-1)·q and
  the result is x[⌊h⌋] + (h-⌊h⌋)·(x[⌊h⌋+1] - x[⌊h⌋]). It never leaves the range of the data,
  the median of an even count is the mean of the middle two, and one value is every percentile of
  itself.
- `Rate`: a proportion k/n with its Wilson score 95% interval (Wilson 1927), which stays inside
  [0, 1] and keeps its coverage near 0 and 1 and for small n, where the textbook p ± z·√(p(1-p)/n)
  does not.
- `Difference`: a difference of two independent proportions with Newcombe's hybrid score interval
  (Newcombe 1998, method 10), built from the two Wilson intervals.
- `ArmSummary`: count, errors, latency and time-to-first-token percentiles, cost and tokens of one
  arm (one arm and target of one route) in one window.
- `AgreementSummary`: how often a candidate's answers equal the primary's (exact, normalised,
  JSON), and `attributable_disagreement`: the candidate's disagreement beyond the noise floor, the
  disagreement of the primary with itself when asked the same question twice.
- `CheckSummary`: one rule check's verdicts on one arm's answers, and its pass rate.

Everything here takes sequences of floats, ints and bools; the caller decides which records go in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

Z95 = 1.959963984540054
"""The two-sided 95% quantile of the standard normal distribution."""


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile (q in [0, 1]) of `values` by linear interpolation (type 7, see the module
    docstring); None for no values. Raises ValueError for q outside [0, 1] or a non-finite value."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q}")
    if not values:
        return None
    if not all(map(math.isfinite, values)):
        raise ValueError("percentile of non-finite values")
    ordered = sorted(values)
    h = (len(ordered) - 1) * q
    low = math.floor(h)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (h - low) * (ordered[high] - ordered[low])


def median(values: Sequence[float]) -> float | None:
    """The 0.5 percentile; None for no values."""
    return percentile(values, 0.5)


def mean(values: Sequence[float]) -> float | None:
    """The arithmetic mean (summed with `math.fsum`); None for no values."""
    if not values:
        return None
    return math.fsum(values) / len(values)


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for `successes` out of `n`; (0, 1) when n is 0 (nothing is known)."""
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes}/{n}")
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # At k = 0 and k = n the bound is exactly 0 or 1; rounding must not move it off.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


@dataclass(frozen=True, slots=True)
class Rate:
    """A proportion with its 95% Wilson interval."""

    successes: int
    """How many of the `n` had the property (errors, agreements...)."""
    n: int
    """How many were looked at."""
    value: float | None
    """successes / n; None when n is 0."""
    low: float
    """Lower bound of the 95% Wilson interval (0 when n is 0)."""
    high: float
    """Upper bound of the 95% Wilson interval (1 when n is 0)."""

    @classmethod
    def of(cls, successes: int, n: int) -> Rate:
        low, high = wilson_interval(successes, n)
        return cls(successes, n, successes / n if n else None, low, high)

    @classmethod
    def count(cls, flags: Sequence[bool]) -> Rate:
        """The share of true flags."""
        return cls.of(sum(1 for flag in flags if flag), len(flags))

    def complement(self) -> Rate:
        """The rate of the opposite property (n - successes out of n)."""
        return Rate.of(self.n - self.successes, self.n)


@dataclass(frozen=True, slots=True)
class Difference:
    """a - b for two independent proportions, with Newcombe's 95% interval."""

    value: float | None
    """a - b; None when either side has no observations."""
    low: float
    """Lower bound of the 95% interval (-1 when unknown)."""
    high: float
    """Upper bound of the 95% interval (1 when unknown)."""

    @property
    def significant(self) -> bool:
        """True when the interval excludes 0: a real difference at the 95% level."""
        return self.value is not None and (self.low > 0 or self.high < 0)


def newcombe_difference(a: Rate, b: Rate) -> Difference:
    """a - b with Newcombe's hybrid score interval (method 10): with Wilson bounds (l, u) of each,
    low = d - √((p_a - l_a)² + (u_b - p_b)²) and high = d + √((u_a - p_a)² + (p_b - l_b)²)."""
    if a.value is None or b.value is None:
        return Difference(None, -1.0, 1.0)
    d = a.value - b.value
    low = d - math.sqrt((a.value - a.low) ** 2 + (b.high - b.value) ** 2)
    high = d + math.sqrt((a.high - a.value) ** 2 + (b.value - b.low) ** 2)
    return Difference(d, max(-1.0, low), min(1.0, high))


@dataclass(frozen=True, slots=True)
class ArmSummary:
    """One arm's traffic in one window. Latency covers every exchange, failed ones included (the
    client waited for them too); time to first token covers streamed exchanges that produced one."""

    count: int
    """Exchanges."""
    errors: int
    """Exchanges that did not end well."""
    error_rate: Rate
    """errors / count with its Wilson interval."""
    latency_p50_s: float | None
    latency_p95_s: float | None
    latency_p99_s: float | None
    ttft_count: int
    """Exchanges with a time to first token (streams)."""
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    cost_total_usd: float
    cost_per_request_usd: float | None
    """cost_total_usd / count; None for no exchanges."""
    cost_per_1k_usd: float | None
    """Cost of 1,000 requests at this arm's mean cost per request."""
    tokens_in: int
    """Prompt tokens, cached and cache writes included."""
    tokens_out: int
    """Completion tokens, reasoning included."""

    @classmethod
    def from_samples(
        cls,
        *,
        durations_s: Sequence[float],
        failed: Sequence[bool],
        ttfts_s: Sequence[float] = (),
        costs_usd: Sequence[float] = (),
        tokens_in: Sequence[int] = (),
        tokens_out: Sequence[int] = (),
    ) -> ArmSummary:
        """Summarise one arm: one duration and one `failed` flag per exchange; `ttfts_s` only for
        streamed exchanges that have one; costs and tokens per exchange (missing ones count 0)."""
        if len(failed) != len(durations_s):
            raise ValueError("durations_s and failed must have one entry per exchange")
        count = len(durations_s)
        error_rate = Rate.count(failed)
        cost = math.fsum(costs_usd)
        per_request = cost / count if count else None
        return cls(
            count=count,
            errors=error_rate.successes,
            error_rate=error_rate,
            latency_p50_s=percentile(durations_s, 0.50),
            latency_p95_s=percentile(durations_s, 0.95),
            latency_p99_s=percentile(durations_s, 0.99),
            ttft_count=len(ttfts_s),
            ttft_p50_s=percentile(ttfts_s, 0.50),
            ttft_p95_s=percentile(ttfts_s, 0.95),
            cost_total_usd=cost,
            cost_per_request_usd=per_request,
            cost_per_1k_usd=per_request * 1000 if per_request is not None else None,
            tokens_in=sum(tokens_in),
            tokens_out=sum(tokens_out),
        )


@dataclass(frozen=True, slots=True)
class AgreementSummary:
    """How often a candidate's answers equal the primary's, over `n` pairs."""

    n: int
    exact: Rate
    """Byte-for-byte equal answers."""
    normalized: Rate
    """Equal after normalisation (case, whitespace, edge punctuation)."""
    json: Rate
    """Equal as JSON, over the pairs where both answers are JSON (its own n)."""
    agreed: Rate
    """Agreed under the route's agreement settings (mode, fields, tolerance), over the pairs that
    comparison applies to (its own n): the headline agreement, and what `disagreement` reads."""

    @classmethod
    def from_pairs(
        cls,
        exact: Sequence[bool],
        normalized: Sequence[bool],
        json_equal: Sequence[bool | None],
        agreed: Sequence[bool | None] | None = None,
    ) -> AgreementSummary:
        """One entry per pair in each sequence; a `json_equal` of None (not JSON) is left out of
        the JSON rate, an `agreed` of None (the route's comparison does not apply) out of the
        agreement rate. Without `agreed` the route's mode is taken to be `normalized`."""
        verdicts: Sequence[bool | None] = normalized if agreed is None else agreed
        if not len(exact) == len(normalized) == len(json_equal) == len(verdicts):
            raise ValueError(
                "exact, normalized, json_equal and agreed must have one entry per pair"
            )
        return cls(
            n=len(exact),
            exact=Rate.count(exact),
            normalized=Rate.count(normalized),
            json=Rate.count([flag for flag in json_equal if flag is not None]),
            agreed=Rate.count([flag for flag in verdicts if flag is not None]),
        )

    @property
    def disagreement(self) -> Rate:
        """Share of the pairs the route's comparison applies to that disagree."""
        return self.agreed.complement()


def attributable_disagreement(candidate: AgreementSummary, noise: AgreementSummary) -> Difference:
    """The candidate's disagreement with the primary minus the primary's disagreement with itself
    (the noise floor), with Newcombe's 95% interval. The two samples are different requests, so
    they are independent. An interval above 0 means the candidate differs more than sampling
    noise explains; an interval containing 0 means its differences look like the primary's own."""
    return newcombe_difference(candidate.disagreement, noise.disagreement)


@dataclass(frozen=True, slots=True)
class CheckSummary:
    """One rule check's verdicts on one arm's answers. A check that crashed (`error`) counts
    against the pass rate like a failure: an answer nobody could verify is not a passing one."""

    passed: int
    failed: int
    errors: int
    pass_rate: Rate
    """passed / (passed + failed + errors), with its Wilson interval."""

    @property
    def count(self) -> int:
        """Verdicts of every kind."""
        return self.pass_rate.n

    @classmethod
    def from_results(cls, results: Sequence[str]) -> CheckSummary:
        """One verdict per answer: `pass`, `fail`, or anything else, which counts as `error`."""
        passed = sum(1 for result in results if result == "pass")
        failed = sum(1 for result in results if result == "fail")
        return cls(passed, failed, len(results) - passed - failed, Rate.of(passed, len(results)))
