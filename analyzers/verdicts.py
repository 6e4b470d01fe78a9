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

from pydantic import BaseModel, ConfigDict, Field, model_validator

Tally = tuple[int, int]
"""(events, out of): e.g. (passed, total) of a check, (corrected, answers)."""

UnitTallies = tuple[Tally, ...]
"""One tally broken down by randomisation unit (a sticky user, tenant, API key or conversation):
one (events, out of) per unit, in any order; their sums are the tally."""


_PREFERENCE_SCORES = frozenset((0.0, 0.5, 1.0))


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
    adaptation: Tally | None = None
    """(not followed, probes): this arm's model's rule-flip probes of the route's rule that did
    not follow the flipped value (stuck or other), out of its scored probes; None when the rule
    has no probes."""
    preferences: tuple[float, ...] | None = None
    """Per blind human review of a pair of this arm's model against the primary's (the same
    request, both answers shown unlabelled in random order): 1.0 when the reviewer preferred this
    arm's answer, 0.0 the primary's, 0.5 a tie, oldest first. Read from the candidate's window;
    None when blind review is not judged, () when it is and nobody has reviewed yet."""
    units: Mapping[str, UnitTallies] = field(default_factory=dict)
    """The unit of the statistics is the unit of assignment: per tally of this window, the same
    tally broken down by the sticky unit whose requests made it (`UnitTallies`, summing to the
    tally). Keys name the tally: `errors` ((errors, requests)), `checks:<name>` ((passed, total),
    as `checks`), `corrections`, `findings`, `agreement`, `noise`, `adaptation`. A tally without
    an entry has independent requests (no sticky key): each request is a unit of its own."""
    sample_units: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """Per sample series (`latencies_s`, `ttfts_s`, `costs_usd`, `judge_deltas`,
    `preferences`): the unit of each sample, parallel to the series (same length, same order),
    as an index (0, 1, 2...; a request without a key has an index of its own). A series without
    an entry has one unit per sample."""

    def __post_init__(self) -> None:
        # The judge builds two windows on every look: one chained comparison per tally first,
        # and the named checks below only to say which one is wrong (the same first one).
        try:
            (e, n), (c, m), (a, p), (x, y), (f, g), (s, t) = (
                (self.errors, self.requests), self.corrections, self.agreement, self.noise,
                self.findings, (0, 0) if self.adaptation is None else self.adaptation,
            )  # fmt: skip
            plain = (
                0 <= e <= n and 0 <= c <= m and 0 <= a <= p and 0 <= x <= y and 0 <= f <= g
                and 0 <= s <= t
                and (not self.checks or all(0 <= k <= o for k, o in self.checks.values()))
            )  # fmt: skip
        except (TypeError, ValueError):
            plain = False
        if not plain:
            self._refuse()
        # A set, not a scan per value: the judge is handed every review so far on every look.
        if self.preferences is not None and not _PREFERENCE_SCORES.issuperset(self.preferences):
            raise ValueError("preferences: each must be 0, 0.5 or 1")
        if self.units or self.sample_units:
            self._check_units()

    def _check_units(self) -> None:
        """Each breakdown names a tally or series of this window and adds up to it."""
        for key, per_unit in self.units.items():
            kind, _, name = key.partition(":")
            if kind == "checks":
                whole = self.checks.get(name)
            elif key == "errors":
                whole = (self.errors, self.requests)
            else:
                whole = getattr(self, key) if key in _UNIT_TALLIES else None
            if whole is None:
                raise ValueError(f"units.{key}: no such tally")
            events = sum(e for e, _ in per_unit)
            total = sum(n for _, n in per_unit)
            if (events, total) != tuple(whole) or any(not 0 <= e <= n for e, n in per_unit):
                raise ValueError(
                    f"units.{key}: per-unit tallies add up to {events}/{total}, the tally is "
                    f"{whole[0]}/{whole[1]}"
                )
        for key, indexes in self.sample_units.items():
            if key not in _UNIT_SERIES:
                raise ValueError(f"sample_units.{key}: no such sample series")
            series = getattr(self, key)
            if series is None or len(series) != len(indexes):
                raise ValueError(
                    f"sample_units.{key}: {len(indexes)} units for "
                    f"{0 if series is None else len(series)} samples"
                )

    def _refuse(self) -> None:
        """Raise for the first tally out of order."""
        _check_tally("requests/errors", (self.errors, self.requests))
        for name, tally in self.checks.items():
            _check_tally(f"checks.{name}", tally)
        _check_tally("corrections", self.corrections)
        _check_tally("agreement", self.agreement)
        _check_tally("noise", self.noise)
        _check_tally("findings", self.findings)
        if self.adaptation is not None:
            _check_tally("adaptation", self.adaptation)


_UNIT_TALLIES = frozenset(("corrections", "findings", "agreement", "noise", "adaptation"))
"""The tally fields a `units` key may name besides `errors` and `checks:<name>`."""
_UNIT_SERIES = frozenset(("latencies_s", "ttfts_s", "costs_usd", "judge_deltas", "preferences"))


def refuse_removed(data: object, **removed: str) -> object:
    """`data` unchanged, unless it is a mapping holding a removed key: then a ValueError saying
    that the key was removed, why (the value given for its name), and to delete it."""
    if isinstance(data, dict):
        for key, why in removed.items():
            if key in data:
                raise ValueError(f"{key} was removed: {why}; delete the key")
    return data


class Thresholds(BaseModel):
    """How much worse than the primary a candidate may be, per metric, and the budget of false
    rollbacks. Margins of rates are absolute (0.01 = one percentage point) or, when larger, a share
    of the primary's rate; ratios bound candidate / primary, with an absolute floor for latency."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    false_rollback_rate: float = Field(0.01, gt=0.0, lt=0.5)
    """At most this share of rollout steps (or rule epochs) of a candidate within every threshold
    may fail, however often the judge looks, over all metrics (see `analyzers.sequential`)."""
    pass_confidence: float = Field(0.95, gt=0.5, lt=1.0)
    """A metric passes when its anytime-valid bound at this confidence is within its margin: at
    most 1 - pass_confidence of candidates worse than the margin pass a metric."""
    error_rate_increase: float = Field(0.005, ge=0.0, le=1.0)
    """The candidate's error rate may exceed the primary's by this much (half a point; with
    `rate_margin_relative` the margin is half the primary's rate when that is larger, so a
    doubled error rate is beyond the margin, never promoted)."""
    check_pass_rate_drop: float = Field(0.05, ge=0.0, le=1.0)
    """Each rule check's pass rate may fall below the primary's by this much."""
    correction_rate_increase: float = Field(0.05, ge=0.0, le=1.0)
    """The candidate's correction rate may exceed the primary's by this much."""
    disagreement_increase: float = Field(0.05, ge=0.0, le=1.0)
    """Candidate-primary disagreement may exceed primary-primary disagreement by this much."""
    finding_rate_increase: float = Field(0.05, ge=0.0, le=1.0)
    """The share of answers with a severe analyzer finding may exceed the primary's by this much."""
    rule_adaptation_drop: float = Field(0.05, ge=0.0, le=1.0)
    """The candidate's adaptation rate on rule-flip probes may fall below the primary's by this
    much."""
    human_preference_drop: float = Field(0.1, ge=0.0, le=0.5)
    """The candidate's share of blind human preferences against the primary (ties count half)
    may fall this far below one half (0.1: preferred in 40% of reviewed pairs)."""
    rate_margin_relative: float = Field(0.5, ge=0.0, le=10.0)
    """Every rate's margin is at least this share of the primary's rate (0.5: a 2% error rate
    may become 3%, not 4%), so that noisy high rates do not need a tiny absolute margin; and at
    most half the distance from the primary's rate to 1 (an 80% rate's margin is 10 points)."""
    latency_p50_ratio: float = Field(1.15, ge=1.0)
    """Candidate p50 / primary p50 (latency and time to first token). 1.15, like the p95's, so
    that a slowdown of the whole distribution is held to the same bound as one of its tail."""
    latency_p95_ratio: float = Field(1.15, ge=1.0)
    """Candidate p95 / primary p95 (latency and time to first token). 1.15 so that a tail 30 %
    slower is beyond the margin by enough to be rolled back, not only held
    (bench/quantile_simulation.py measures it at 2, 20 and 200 req/s)."""
    latency_min_increase_s: float = Field(0.05, ge=0.0)
    """Latency and TTFT may always grow by this many seconds, whatever the ratio says (a 4 ms
    endpoint is not failed for 1 ms)."""
    cost_ratio: float = Field(1.2, ge=1.0)
    """Candidate mean cost per request / primary's."""
    judge_score_drop: float = Field(0.5, ge=0.0, le=9.0)
    """The candidate's LLM-judge score (1-10) may be this much below the primary's."""
    min_samples_rate: int = Field(50, ge=1)
    """Fewer observations than this in either arm make a rate inconclusive."""
    min_samples_probes: int = Field(30, ge=1)
    """Fewer scored rule-flip probes than this in either arm make `rule_adaptation`
    inconclusive (probes come at a fraction of the traffic, so their minimum is its own)."""
    min_samples_reviews: int = Field(20, ge=2)
    """Fewer blind reviews than this of the candidate against the primary make
    `human_preference` inconclusive (people review far fewer pairs than traffic brings)."""
    min_samples_latency: int = Field(30, ge=2)
    """Fewer samples than this in either arm make latency, TTFT, cost and judge scores
    inconclusive."""

    @model_validator(mode="before")
    @classmethod
    def _removed_keys(cls, data: object) -> object:
        return refuse_removed(
            data,
            spending_scale_looks="the judge's bounds are anytime-valid, so no budget is spent "
            "per look",
        )


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
    `latency_p50`, `latency_p95`, `ttft_p50`, `ttft_p95`, `cost_per_request`, `judge_score`,
    `findings`, `rule_adaptation` (against the primary), `rule_adaptation:min_adaptation`
    (against the rule's floor) or `human_preference` (blind reviews against the primary)."""
    outcome: Outcome
    estimate: float | None
    """Rates: the regression, candidate minus primary in the bad direction (a drop of a pass
    rate is positive); `rule_adaptation:min_adaptation`: the floor minus the candidate's
    adaptation rate; `human_preference`: one half minus the candidate's preference share.
    Latency, TTFT, cost: candidate / primary. Judge score: primary minus candidate. None when
    not computable."""
    low: float | None
    """Lower anytime-valid bound of `estimate` at `pass_confidence`; None if unbounded."""
    high: float | None
    """Upper bound, likewise; None if unbounded. Pass when it is within `threshold`."""
    threshold: float
    """The margin (rates, judge score) or ratio bound (latency, cost) of this look."""
    n_primary: int
    n_candidate: int
    alpha: float
    """The level of this metric's fail test (the false-rollback budget over its metrics and
    sequences); valid however often the judge looks."""
    reason: str
    """One line a human can read in an alert."""
    needs: int | None = None
    """More candidate answers this metric needs to pass if its estimate holds: 0 when it passes,
    None when more of the same can only fail it (the estimate is beyond the margin)."""
