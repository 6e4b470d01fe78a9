"""What the rollout judge reads and what it says (pure records, validated on construction).

- `ArmWindow`: one arm's counts and samples in one analysis window (the caller chooses the
  window: since the rollout or rule epoch started, or the last N seconds; both arms must cover
  the same one).
- `Thresholds`: how much worse a candidate may be before it fails, and the false-rollback budget.
  A frozen pydantic model, so a route's `canary.analysis.thresholds` config validates into it with
  errors that name the key; the defaults are meant to be left alone.
- `MetricVerdict`: one metric's pass / fail / inconclusive with the numbers behind it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

Tally = tuple[int, int]
"""(events, out of): e.g. (passed, total) of a check, (corrected, answers)."""


def _check_tally(name: str, tally: Tally) -> None:
    events, total = tally
    if not 0 <= events <= total:
        raise ValueError(f"{name}: need 0 <= events <= total, got {events}/{total}")


@dataclass(frozen=True, slots=True)
class ArmWindow:
    """One arm (primary or candidate) of one route in one analysis window."""

    requests: int
    """Exchanges served by this arm in the window."""
    errors: int
    """Those that did not end well (upstream error, timeout, 5xx)."""
    latencies_s: tuple[float, ...] = ()
    """Total duration of each exchange, seconds (failed ones included: the client waited)."""
    ttfts_s: tuple[float, ...] = ()
    """Time to first token of each streamed exchange that produced one, seconds."""
    costs_usd: tuple[float, ...] = ()
    """Cost of each priced exchange, USD."""
    checks: Mapping[str, Tally] = field(default_factory=dict)
    """Per rule check name: (passed, total) verdicts on this arm's answers."""
    corrections: Tally = (0, 0)
    """(corrected, answers): answers a downstream user or reviewer had to correct."""
    agreement: Tally = (0, 0)
    """(disagree, pairs): candidate answers differing from the primary's to the same request.
    Read from the candidate's window; (0, 0) when agreement is not measured."""
    noise: Tally = (0, 0)
    """(disagree, pairs): the primary differing from itself when asked twice (the noise floor).
    Read from the primary's window."""
    judge_deltas: tuple[float, ...] = ()
    """Per LLM-judged shadow pair: the candidate's score minus the primary's (both orders
    averaged, on the judge's 1-10 scale). Read from the candidate's window; () when no judge."""
    findings: Tally = (0, 0)
    """(answers with a finding at or above the configured severity, answers analysed)."""

    def __post_init__(self) -> None:
        _check_tally("requests/errors", (self.errors, self.requests))
        for name, tally in self.checks.items():
            _check_tally(f"checks.{name}", tally)
        _check_tally("corrections", self.corrections)
        _check_tally("agreement", self.agreement)
        _check_tally("noise", self.noise)
        _check_tally("findings", self.findings)


class Thresholds(BaseModel):
    """How much worse than the primary a candidate may be, per metric, and the budget of false
    rollbacks. Margins of rates are absolute (0.01 = one percentage point); ratios bound
    candidate / primary."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    false_rollback_rate: float = Field(0.01, gt=0.0, lt=0.5)
    """At most this share of rollouts (or rule epochs) of a candidate within every threshold may
    fail, over all looks and metrics (see `analyzers.sequential`)."""
    spending_scale_looks: int = Field(180, ge=1)
    """Looks after which a quarter of the budget is spent (180 = 30 min at a 10 s interval)."""
    pass_confidence: float = Field(0.95, gt=0.5, lt=1.0)
    """A metric passes when this one-sided bound of its regression is within its threshold."""
    error_rate_increase: float = Field(0.01, ge=0.0, le=1.0)
    """The candidate's error rate may exceed the primary's by this much."""
    check_pass_rate_drop: float = Field(0.05, ge=0.0, le=1.0)
    """Each rule check's pass rate may fall below the primary's by this much."""
    correction_rate_increase: float = Field(0.02, ge=0.0, le=1.0)
    """The candidate's correction rate may exceed the primary's by this much."""
    disagreement_increase: float = Field(0.05, ge=0.0, le=1.0)
    """Candidate-primary disagreement may exceed primary-primary disagreement by this much."""
    latency_p50_ratio: float = Field(1.2, ge=1.0)
    """Candidate p50 / primary p50 (latency and time to first token)."""
    latency_p95_ratio: float = Field(1.25, ge=1.0)
    """Candidate p95 / primary p95 (latency and time to first token)."""
    cost_ratio: float = Field(1.2, ge=1.0)
    """Candidate mean cost per request / primary's."""
    min_samples_rate: int = Field(50, ge=1)
    """Fewer observations than this in either arm make a rate inconclusive."""
    min_samples_latency: int = Field(30, ge=2)
    """Fewer samples than this in either arm make latency, TTFT and cost inconclusive."""


class Outcome(StrEnum):
    """One metric's verdict. Only `fail` rolls back; `inconclusive` holds the rollout."""

    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True, slots=True)
class MetricVerdict:
    """One metric of one look, with the numbers behind it."""

    metric: str
    """`error_rate`, `check_pass_rate:<check>`, `correction_rate`, `disagreement`,
    `latency_p50`, `latency_p95`, `ttft_p50`, `ttft_p95` or `cost_per_request`."""
    outcome: Outcome
    estimate: float | None
    """Rates: the regression, candidate minus primary in the bad direction (a drop of a pass
    rate is positive). Latency, TTFT, cost: candidate / primary. None when not computable."""
    low: float | None
    """Lower bound of the interval of `estimate` whose each bound is a one-sided
    `pass_confidence` bound (a 90% two-sided interval by default); None if unbounded."""
    high: float | None
    """Upper bound of that interval; None if unbounded. Pass when the bound on the bad side
    is within `threshold`."""
    threshold: float
    """The margin (rates) or ratio bound (latency, cost) the estimate is judged against."""
    n_primary: int
    n_candidate: int
    alpha: float
    """The one-sided level of this look's fail test for this metric (after the corrections)."""
    reason: str
    """One line a human can read in an alert."""
