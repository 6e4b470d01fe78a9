"""The statistics of an online A/B experiment: which arm is better than control on a business
metric, by how much, with what confidence, looked at as often as one likes (pure: `Unit`s in,
frozen decisions out; no clock, no I/O).

**The statistics in plain words.** Traffic is split at random between a control arm and one or
more other arms, by *unit* (an operation, or all of a user's operations), so each unit's outcome
belongs to exactly one arm. For each metric mirrorgate compares an arm with control and shows
the *lift* — the difference in points for a rate (completion +2.1 pts), the relative change for
cost and latency (cost/operation -41 %) — with an interval that holds at every look: mirrorgate
looks again every few seconds and may stop the moment the evidence is clear, and an ordinary
95 % interval looked at that often would cry wolf far more than 5 % of the time. These intervals
are *confidence sequences*: the chance that the true lift ever leaves them, over the whole life of
the experiment, is at most the error budget. The budget (5 % by default) is shared by every
interval an experiment shows, so all of them hold at once, and no verdict is given before 30
units on each side. An arm **ships** when it is surely better on the primary metric, or surely no
worse than the minimum detectable effect on it and surely cheaper or faster; it is **worse** when
surely worse on the primary metric; it is **stopped** when a guardrail metric is surely worse
(its whole interval on the worse side of zero: a guardrail promises no harm);
there is **no difference** when the whole interval lies within ± the minimum detectable effect;
otherwise it is **inconclusive**, and mirrorgate says how many more units it needs if the current
estimate holds, and how long that takes at the current rate. A separate check compares how many
units each arm received with the configured weights: a *sample-ratio mismatch* means the
assignment is broken (a bug, a bot, a filter that drops one arm's traffic) and no lift can be
trusted until it is explained.

**The methods.**

- *Rates* (completion, adoption, correction, errors, a check's pass rate) are ratios of sums over
  units, k/n with each unit contributing its own k and n (one operation, or several of a user's).
  Each arm's variance is the delta-method variance of that ratio, Σ(kᵢ - R·nᵢ)² / (Σnᵢ)² · m/(m-1)
  for m units, which is the binomial p(1-p)/n when every unit is one operation and grows when a
  user's operations resemble each other; it is floored at the Agresti-Caffo variance (one event
  and one non-event added), so 0 of 40 still has a spread. The lift is the difference of the
  two rates, in points.
- *Ratio metrics* (cost per operation, calls per operation) are Σcostᵢ / Σoperationsᵢ over units,
  their variance by the delta method over units the same way (Deng, Knoblich & Lu 2018). The lift
  is the log of the ratio of the two arms' values, shown as a relative change.
- *Latency* p50 and p95 over every operation: the log of the ratio of the two quantiles, each
  quantile's standard error over units (`analyzers.unit_quantile`: Woodruff's interval from the
  cluster-robust variance of the empirical distribution at the quantile, so a tenant's
  operations slow alike count as one unit, not as many independent ones; on the
  mid-distribution function, so latencies rounded to 1 s still have a spread). An interval needs
  `MIN_UNITS` units with a latency on each side.
- *The interval* is the normal-mixture confidence sequence of `analyzers.sequential` (Robbins
  1970; Howard, Ramdas, McAuliffe & Sekhon 2021), two-sided, at level alpha / (metrics x arms
  compared with control) — Bonferroni over the family, so every interval shown holds at once —
  with its mixing scale at the minimum detectable effect (the size of lift that matters; floors
  of 1 point and 5 %). With estimated variances it is an asymptotic confidence sequence
  (Waudby-Smith et al. 2024), hence the minimum of `MIN_UNITS` units per side. `bench/
  experiment_simulation.py` measures its coverage at every look.
- *Sample-ratio mismatch*: an anytime-valid test of the units per arm against the weights
  (Lindon & Malek 2022, "Anytime-Valid Inference for Multinomial Count Data"): the Bayes factor
  of a Dirichlet-multinomial mixture centred on the weights (concentration `SRM_CONCENTRATION`)
  against the weights themselves, `analyzers.dirichlet_multinomial`. Under a correct split it is
  a martingale, so the chance that it *ever* reaches 1/`SRM_ALPHA` is at most `SRM_ALPHA`
  however often it is looked at: a correct split is flagged in at most 1 % of experiments over
  their whole life (0.6 % measured), where Pearson's chi-square at p < 0.001, looked at on every
  tick, flagged 3.8 % by 200,000 units and more the longer it ran. A broken assignment drives it
  up exponentially: 10 % of one of two arms' units lost is flagged after a median of ~3,800
  units (`bench/experiment_simulation.py` measures both). Its p-value is 1 / the Bayes factor
  (at most 1), valid at every look; Pearson's statistic is kept for reading.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from typing import Literal

from analyzers import experiment_words as words
from analyzers.dirichlet_multinomial import log_bayes_factor
from analyzers.sequential import bounds
from analyzers.unit_quantile import unit_quantile

Kind = Literal["proportion", "ratio", "quantile"]
Better = Literal["higher", "lower"]
Scale = Literal["points", "relative"]

MIN_UNITS = 30
"""Units each side needs before a metric has an interval (for latency, units with at least one
latency), and an arm a verdict: below it the estimated variance is too rough for the interval to
be trusted."""
SRM_ALPHA = 0.01
"""The sample-ratio check's error budget: a correct split is ever flagged, over the experiment's
whole life and however often it is looked at, with probability at most this."""
SRM_CONCENTRATION = 300.0
"""The Dirichlet mixture's concentration k (prior Dirichlet(k x weights)): its shares spread
about ±2.9 points around a 50/50 split, the size of mismatch worth catching early (10 % of one
arm's units lost moves its share 2.6 points). Measured, 100 to 1,000 flag such a loss alike
(a median of ~4,000 units); 3,000 is slower, and a far larger mismatch is caught within a few
hundred units whatever k."""
SRM_MIN_EXPECTED = 5
"""The fewest units an arm must be expected to hold before the split is judged (the Bayes factor
could not reach 1/`SRM_ALPHA` before anyway; the text says so)."""
HUMAN_PREFERENCE = "human_preference"
"""The blind-review metric: per reviewed pair of an arm's answer and control's answer to the same
request, 1 when the reviewer preferred the arm's, 0 control's, 0.5 a tie (`decide`'s
`preferences`). Its arm value is the arm's preference share; control's is 0.5 by construction
(control against itself ties), so the lift is the share minus one half, in points, and its `n`
on both sides is the number of reviews."""
CHECK_PREFIX = "check:"
"""A check's pass rate is the metric `check:<name>`."""
EFFICIENCY_METRICS = ("cost_per_operation", "calls_per_operation", "latency_p50", "latency_p95")
"""The metrics on which being surely better ships an arm that is no worse on the primary one."""
_ALWAYS_TRACKED = ("cost_per_operation", "latency_p50")
_TAU_FLOOR = {"points": 0.01, "relative": 0.05}


@dataclass(frozen=True, slots=True)
class MetricInfo:
    """What one experiment metric measures and which way is better."""

    name: str
    """The metric's name in configuration (`primary_metric`, `guardrails`)."""
    kind: Kind
    """`proportion` (events over trials, per unit), `ratio` (a sum per operation) or `quantile`."""
    better: Better
    """Which direction of lift is good."""
    unit: str
    """The unit of the metric's value: `share`, `usd`, `calls` or `s`."""
    label: str
    """How decisions name it: `completion`, `cost/operation`..."""
    improved: str
    """The word for "surely better" on it: `completes more`, `cheaper`, `faster`..."""

    @property
    def scale(self) -> Scale:
        """The lift's scale: `points` for proportions, `relative` for the others."""
        return "points" if self.kind == "proportion" else "relative"


_FIXED = {
    m.name: m
    for m in (
        MetricInfo(
            "completion_rate", "proportion", "higher", "share", "completion", "completes more"
        ),
        MetricInfo("adoption_rate", "proportion", "higher", "share", "adoption", "adopted more"),
        MetricInfo(
            "correction_rate", "proportion", "lower", "share", "corrections", "corrected less"
        ),
        MetricInfo("error_rate", "proportion", "lower", "share", "errors", "fewer errors"),
        MetricInfo("cost_per_operation", "ratio", "lower", "usd", "cost/operation", "cheaper"),
        MetricInfo(
            "calls_per_operation", "ratio", "lower", "calls", "calls/operation", "fewer calls"
        ),
        MetricInfo("latency_p50", "quantile", "lower", "s", "latency p50", "faster"),
        MetricInfo("latency_p95", "quantile", "lower", "s", "latency p95", "faster at p95"),
        MetricInfo(
            "human_preference",
            "proportion",
            "higher",
            "share",
            "human preference",
            "preferred by reviewers",
        ),
    )
}


class _Metrics(Mapping[str, MetricInfo]):
    """The fixed metrics by name; `check:<name>` is looked up too (every check's pass rate),
    though iteration lists only the fixed ones."""

    def __getitem__(self, name: str) -> MetricInfo:
        if name in _FIXED:
            return _FIXED[name]
        if isinstance(name, str) and name.startswith(CHECK_PREFIX) and name[len(CHECK_PREFIX) :]:
            check = name[len(CHECK_PREFIX) :]
            return MetricInfo(
                name, "proportion", "higher", "share", f"check {check}", "passes more"
            )
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        try:
            self[name]  # type: ignore[index]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(_FIXED)

    def __len__(self) -> int:
        return len(_FIXED)


METRICS: Mapping[str, MetricInfo] = _Metrics()
"""Every metric an experiment can judge, by name; `"check:NAME" in METRICS` for any check."""


def metric_info(name: str) -> MetricInfo:
    """The metric called `name`; raises ValueError naming the known ones if there is none."""
    try:
        return METRICS[name]
    except KeyError:
        known = ", ".join([*_FIXED, f"{CHECK_PREFIX}<check name>"])
        raise ValueError(f"unknown experiment metric {name!r} (known: {known})") from None


@dataclass(frozen=True, slots=True)
class Unit:
    """One randomisation unit of one arm: an operation, or all of a user's operations."""

    arm: str
    """The arm it was assigned to."""
    operations: int
    """Operations in this unit (1 when the unit is the operation)."""
    requests: int
    """Client calls, retries and fallbacks included."""
    errors: int
    """Calls that ended in an error answer."""
    cost_usd: float
    """Summed cost of every call, judge calls included."""
    completed: int | None = None
    """Operations with `completed` true (None: no outcome known)."""
    outcomes: int = 0
    """Operations with a `completed` outcome posted."""
    adopted: int = 0
    """Operations with `adopted` true."""
    adopted_known: int = 0
    """Operations with an `adopted` outcome posted."""
    corrected: int = 0
    """Operations with `corrected` true."""
    corrected_known: int = 0
    """Operations with a `corrected` outcome posted."""
    latencies_s: tuple[float, ...] = ()
    """End-to-end latency of each operation, in seconds."""
    checks: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """Check name -> (passed, evaluated) over the unit's answers."""

    def __post_init__(self) -> None:
        # Plain comparisons first, the message built only on failure: experiments build units by
        # the thousand on every look, and this runs for each.
        counts = (self.operations, self.requests, self.errors, self.outcomes, self.adopted)
        if min(*counts, self.adopted_known, self.corrected, self.corrected_known) < 0:
            raise ValueError(f"unit of arm {self.arm!r}: counts must be >= 0")
        if not math.isfinite(self.cost_usd) or self.cost_usd < 0:
            raise ValueError(f"unit of arm {self.arm!r}: cost_usd must be finite and >= 0")
        completed = self.completed or 0
        if not (
            0 <= completed <= self.outcomes
            and 0 <= self.adopted <= self.adopted_known
            and 0 <= self.corrected <= self.corrected_known
            and 0 <= self.errors <= self.requests
            and (not self.checks or all(0 <= k <= n for k, n in self.checks.values()))
        ):
            self._refuse_pairs()
        if self.latencies_s and not all(0 <= v < math.inf for v in self.latencies_s):
            raise ValueError(f"unit of arm {self.arm!r}: latencies must be finite and >= 0")

    def _refuse_pairs(self) -> None:
        """Raise for the first (events, trials) pair out of order."""
        pairs = {
            "completed": (self.completed or 0, self.outcomes),
            "adopted": (self.adopted, self.adopted_known),
            "corrected": (self.corrected, self.corrected_known),
            "errors": (self.errors, self.requests),
            **{f"check {name}": counts for name, counts in self.checks.items()},
        }
        for what, (events, trials) in pairs.items():
            if not 0 <= events <= trials:
                raise ValueError(f"unit of arm {self.arm!r}: {what} {events} of {trials}")


class Verdict(StrEnum):
    """What the evidence says about one arm against control."""

    SHIP = "ship"
    WORSE = "worse"
    NO_DIFFERENCE = "no_difference"
    INCONCLUSIVE = "inconclusive"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class Lift:
    """One metric of one arm against control, with its always-valid interval."""

    metric: str
    scale: Scale
    """`points`: estimate, low and high are differences of shares (0.021 is +2.1 points);
    `relative`: relative changes (-0.41 is -41 %)."""
    better: Better
    control_value: float | None
    """Control's value of the metric (a share, USD or calls per operation, seconds); None when
    it has no data."""
    arm_value: float | None
    """The arm's value of the metric."""
    estimate: float | None
    """The lift; None when either side has no value."""
    low: float | None
    """The interval's lower end; None below `MIN_UNITS` units a side or without a spread."""
    high: float | None
    """The interval's upper end."""
    n_control: int
    """Control's units with data for this metric (operations for latency)."""
    n_arm: int
    """The arm's units with data for this metric."""
    alpha: float
    """The interval's level: it misses the true lift, ever, with probability at most alpha."""
    mde: float
    """The minimum detectable effect, on the lift's scale."""
    needs: int | None
    """More units in the arm (control growing in proportion, and each side reaching
    `MIN_UNITS`) until this interval excludes 0 or lies within ±mde, if the estimate holds (0:
    it already does); None when no spread can be estimated yet."""
    growth: float | None = None
    """The factor by which both sides must grow for that (1: they need not); None if unknown."""

    @property
    def known(self) -> bool:
        """Whether the lift has an interval."""
        return self.low is not None and self.high is not None

    @property
    def surely_better(self) -> bool:
        """The whole interval is on the good side of 0."""
        if self.low is None or self.high is None:
            return False
        return self.high < 0 if self.better == "lower" else self.low > 0

    def surely_worse(self, tolerance: float = 0.0) -> bool:
        """The whole interval is on the bad side of 0, beyond `tolerance` (>= 0)."""
        if self.low is None or self.high is None:
            return False
        return self.low > tolerance if self.better == "lower" else self.high < -tolerance

    def no_worse_than(self, tolerance: float) -> bool:
        """The interval's bad end is within `tolerance` of 0 (non-inferiority)."""
        if self.low is None or self.high is None:
            return False
        return self.high < tolerance if self.better == "lower" else self.low > -tolerance

    @property
    def within_mde(self) -> bool:
        """The whole interval lies inside ±mde: no difference that matters."""
        return (
            self.low is not None
            and self.high is not None
            and -self.mde < self.low
            and self.high < self.mde
        )


@dataclass(frozen=True, slots=True)
class Srm:
    """The sample-ratio-mismatch check of one experiment's assignment."""

    counts: Mapping[str, int]
    """Units per arm, as observed."""
    expected: Mapping[str, float]
    """Units per arm the weights call for, for the same total."""
    chi2: float | None
    """Pearson's statistic, for reading (how far the split is from the weights; the decision is
    the Bayes factor's); None when too few units to look."""
    df: int
    """Degrees of freedom: the arms with a weight, less one."""
    p_value: float | None
    """The anytime-valid p-value at this look, min(1, 1 / the Bayes factor): a correct split
    gives p <= alpha at some look, ever, with probability at most alpha. None when too few units
    to look."""
    alpha: float
    """The check's error budget (`SRM_ALPHA`)."""
    flagged: bool
    """True when p <= alpha (the Bayes factor reached 1/alpha): the split does not follow the
    weights."""
    text: str
    """The check in words."""
    log_e_value: float | None = None
    """The natural log of the Bayes factor (the e-value) against the weights; None when too few
    units to look."""


@dataclass(frozen=True, slots=True)
class ArmDecision:
    """The verdict on one arm against control."""

    arm: str
    verdict: Verdict
    lifts: tuple[Lift, ...]
    """The primary metric first, then the guardrails, then the other tracked metrics."""
    breached: tuple[str, ...]
    """Guardrails surely worse (which stop the arm)."""
    units: int
    """The arm's units."""
    operations: int
    """The arm's operations."""
    needs: int | None
    """More units per arm until a verdict, if the estimates hold (0 once there is one)."""
    eta_s: float | None
    """Seconds until then at the given rate; None without a rate or an estimate."""
    text: str
    """The decision in words."""

    @property
    def primary(self) -> Lift:
        """The primary metric's lift."""
        return self.lifts[0]

    def lift(self, metric: str) -> Lift | None:
        """The lift of `metric`, if tracked."""
        return next((x for x in self.lifts if x.metric == metric), None)


@dataclass(frozen=True, slots=True)
class ExperimentDecision:
    """The verdicts on every arm of one experiment at one look."""

    primary: str
    guardrails: tuple[str, ...]
    control: str
    control_units: int
    alpha: float
    """The experiment's error budget."""
    interval_alpha: float
    """Each interval's share of it (alpha / (metrics x arms compared))."""
    mde: float
    arms: tuple[ArmDecision, ...]
    srm: Srm | None
    """The assignment check, when `decide` was given the weights."""
    text: str
    """One line per arm (and one for a sample-ratio mismatch)."""

    def arm(self, name: str) -> ArmDecision:
        """The decision on arm `name`; KeyError if it is not compared."""
        for decision in self.arms:
            if decision.arm == name:
                return decision
        raise KeyError(name)


# -- estimation -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Side:
    """One arm's value of one metric, on the lift's additive scale."""

    value: float | None
    """The metric's value (natural scale)."""
    n: int
    centre: float | None = None
    """The value on the additive scale (the value, or its log)."""
    variance: float | None = None
    """Variance of `centre`; None when it cannot be estimated."""
    units: int | None = None
    """Units behind the value, when not `n` (latency: `n` counts operations)."""

    @property
    def independent(self) -> int:
        """The units the minimum is counted in."""
        return self.n if self.units is None else self.units


def _pairs(metric: str, units: Sequence[Unit]) -> list[tuple[float, float]]:
    """(numerator, denominator) of each unit with a denominator, for a proportion or ratio
    metric, in the units' order. One comprehension per metric: `decide` runs it for every
    metric, arm and look over every unit so far."""
    match metric:
        case "completion_rate":
            return [(u.completed or 0, u.outcomes) for u in units if u.outcomes > 0]
        case "adoption_rate":
            return [(u.adopted, u.adopted_known) for u in units if u.adopted_known > 0]
        case "correction_rate":
            return [(u.corrected, u.corrected_known) for u in units if u.corrected_known > 0]
        case "error_rate":
            return [(u.errors, u.requests) for u in units if u.requests > 0]
        case "cost_per_operation":
            return [(u.cost_usd, u.operations) for u in units if u.operations > 0]
        case "calls_per_operation":
            return [(u.requests, u.operations) for u in units if u.operations > 0]
    check = metric[len(CHECK_PREFIX) :]
    counted = (u.checks.get(check, (0, 0)) for u in units)
    return [(passed, evaluated) for passed, evaluated in counted if evaluated > 0]


def _ratio_side(info: MetricInfo, units: Sequence[Unit]) -> _Side:
    pairs = _pairs(info.name, units)
    m = len(pairs)
    if m == 0:
        return _Side(None, 0)
    tops, bottoms = zip(*pairs, strict=True)
    top, bottom = math.fsum(tops), math.fsum(bottoms)
    ratio = top / bottom
    if m < 2:
        return _Side(ratio, m)
    # Delta method: Var(Σx/Σy) ≈ Σ(x - R·y)² / (Σy)² · m/(m-1).
    spread = _spread(pairs, ratio, grouped=info.name != "cost_per_operation")
    variance = spread / (bottom * bottom) * m / (m - 1)
    if info.kind == "proportion":
        adjusted = (top + 1) / (bottom + 2)
        variance = max(variance, adjusted * (1 - adjusted) / (bottom + 2))
        return _Side(ratio, m, ratio, variance)
    if ratio <= 0:
        return _Side(ratio, m)  # nothing spent: no ratio
    return _Side(ratio, m, math.log(ratio), variance / (ratio * ratio))


def _spread(pairs: Sequence[tuple[float, float]], ratio: float, *, grouped: bool) -> float:
    """math.fsum of (x - ratio·y)² over `pairs`. With `grouped` (counts, which repeat: a rate's
    units are mostly (0, 1) and (1, 1)) each distinct pair's square is taken once and the sum
    made exactly (Fraction) and rounded once, which is what fsum returns: the correctly rounded
    exact sum, whatever the order."""
    if grouped:
        try:
            exact = sum(
                Fraction((x - ratio * y) ** 2) * count for (x, y), count in Counter(pairs).items()
            )
            return float(exact)
        except (OverflowError, ValueError):
            pass  # an infinite square: fsum says what it says about those
    return math.fsum([(x - ratio * y) ** 2 for x, y in pairs])


def _quantile_side(info: MetricInfo, latencies: _Latencies) -> _Side:
    """The side of latency p50 or p95 from the units' latencies (n counts operations, `units`
    the units holding them)."""
    ordered, groups = latencies
    q = 0.5 if info.name == "latency_p50" else 0.95
    estimate = unit_quantile(groups, q, ordered)
    if estimate is None:
        return _Side(None, 0)
    if estimate.log_se is None:
        return _Side(estimate.value, estimate.values, units=estimate.units)
    return _Side(
        estimate.value,
        estimate.values,
        math.log(estimate.value),
        estimate.log_se * estimate.log_se,
        estimate.units,
    )


_Latencies = tuple[list[float], list[tuple[float, ...]]]
"""Every latency of an arm sorted, and each unit's latencies (units without any left out)."""


def _latencies(units: Sequence[Unit]) -> Callable[[], _Latencies]:
    """The units' latencies, sorted and grouped on the first call and kept: latency p50 and p95
    of one arm share one sort per look."""

    def made() -> _Latencies:
        groups = [u.latencies_s for u in units if u.latencies_s]
        return sorted(v for g in groups for v in g), groups

    return functools.cache(made)


def _side(
    info: MetricInfo, units: Sequence[Unit], latencies: Callable[[], _Latencies] | None = None
) -> _Side:
    if info.kind == "quantile":
        return _quantile_side(info, (latencies or _latencies(units))())
    return _ratio_side(info, units)


def _preference_sides(preferences: Sequence[float]) -> tuple[_Side, _Side]:
    """(control, arm) sides of `human_preference` from the arm's review scores against control:
    the arm's mean score with its variance (the sample variance over n, floored at the
    Agresti-Caffo variance as rates are, so 30 of 30 still has a spread), control a fixed 0.5
    without variance (it is the comparison's midpoint, not an estimate)."""
    n = len(preferences)
    if n == 0:
        return _Side(None, 0), _Side(None, 0)
    share = math.fsum(preferences) / n
    control = _Side(0.5, n, 0.5, 0.0)
    if n < 2:
        return control, _Side(share, n)
    spread = math.fsum((p - share) ** 2 for p in preferences) / (n - 1)
    adjusted = (math.fsum(preferences) + 1) / (n + 2)
    variance = max(spread / n, adjusted * (1 - adjusted) / (n + 2))
    return control, _Side(share, n, share, variance)


def _check_preferences(preferences: Mapping[str, Sequence[float]]) -> None:
    for arm, scores in preferences.items():
        if any(p not in {0.0, 0.5, 1.0} for p in scores):
            raise ValueError(f"preferences of arm {arm!r} must each be 0, 0.5 or 1")


def _check_level(alpha: float, mde: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not 0.0 < mde < 1.0:
        raise ValueError(f"mde must be in (0, 1), got {mde}")


def lift(
    metric: str,
    control: Sequence[Unit],
    arm: Sequence[Unit],
    *,
    alpha: float = 0.05,
    mde: float,
) -> Lift:
    """The lift of `arm` over `control` on `metric`, with a two-sided always-valid interval at
    level `alpha` (it misses the true lift, at any look, with probability at most alpha) and
    mixing scale `mde` (in points for proportions, relative for the others: 0.03 is 3 points or
    3 %). Raises ValueError for an unknown metric, alpha outside (0, 1) or mde outside (0, 1),
    and for `human_preference`, which is lifted from reviews, not units (`decide`'s
    `preferences`)."""
    info = metric_info(metric)
    if info.name == HUMAN_PREFERENCE:
        raise ValueError("human_preference is lifted from reviews: pass decide's preferences")
    _check_level(alpha, mde)
    return _lift(info, _side(info, control), _side(info, arm), alpha, mde)


_MAX_LOG_LIFT = 709.0
"""The largest log-ratio bound `_to_scale` turns into a relative lift (e**709 is near the float's
limit). A bound past it, from a side with almost no information (latencies half zeros give a
log-p50 standard error near 4), is given at that size instead of overflowing: a lift of ~1e308,
past any threshold the decision compares it with, so no verdict changes."""


def _to_scale(info: MetricInfo, value: float) -> float:
    return value if info.scale == "points" else math.expm1(min(value, _MAX_LOG_LIFT))


def _lift(info: MetricInfo, c: _Side, a: _Side, alpha: float, mde: float) -> Lift:
    estimate: float | None = None
    if c.value is not None and a.value is not None:
        if info.scale == "points":
            estimate = a.value - c.value
        elif c.value > 0:
            estimate = a.value / c.value - 1.0

    def made(
        low: float | None, high: float | None, needs: int | None, growth: float | None = None
    ) -> Lift:
        # Built once, directly (dataclasses.replace costs a second construction per lift).
        return Lift(
            info.name, info.scale, info.better, c.value, a.value, estimate, low, high, c.n, a.n,
            alpha, mde, needs, growth,
        )  # fmt: skip

    short = max(0, MIN_UNITS - min(c.independent, a.independent))
    if c.centre is None or a.centre is None or c.variance is None or a.variance is None:
        return made(None, None, short if short else None)
    centre = a.centre - c.centre
    se = math.sqrt(c.variance + a.variance)
    tau = max(mde if info.scale == "points" else math.log1p(mde), _TAU_FLOOR[info.scale])
    low, high = bounds(centre, se, tau, alpha / 2)
    growth = _growth(info, centre, se, tau, alpha, mde, (low, high))
    grown_needs = None if growth is None else math.ceil(a.independent * (growth - 1.0))
    needs = max(short, grown_needs) if grown_needs is not None else None
    if short:
        return made(None, None, needs, growth)
    return made(_to_scale(info, low), _to_scale(info, high), needs, growth)


def _growth(
    info: MetricInfo,
    centre: float,
    se: float,
    tau: float,
    alpha: float,
    mde: float,
    now: tuple[float, float],
) -> float | None:
    """By how much both sides must grow (k times the units, of the same quality) for the
    interval to exclude 0 or lie within ±mde if the estimate holds; None if never. `now` is
    the interval at k = 1 (`bounds(centre, se, tau, alpha / 2)`, which the caller has)."""
    if info.scale == "points":
        floor, ceiling = -mde, mde
    else:
        floor, ceiling = math.log1p(-mde), math.log1p(mde)

    def settled(k: float) -> bool:
        low, high = bounds(centre, se / math.sqrt(k), tau, alpha / 2) if k != 1.0 else now
        return low > 0 or high < 0 or (floor < low and high < ceiling)

    if se == 0 or settled(1.0):
        return 1.0
    high = 2.0
    while not settled(high):
        high *= 2
        if high > 1e12:
            return None
    low = high / 2
    for _ in range(20):
        mid = (low + high) / 2
        if settled(mid):
            high = mid
        else:
            low = mid
    return high


# -- sample-ratio mismatch --------------------------------------------------------------------


def sample_ratio_mismatch(
    counts: Mapping[str, int],
    weights: Mapping[str, float],
    alpha: float = SRM_ALPHA,
    concentration: float = SRM_CONCENTRATION,
) -> Srm:
    """Whether the units per arm (`counts`) follow `weights` (any positive scale; arms missing
    from `counts` have 0 units), by the anytime-valid Dirichlet-multinomial test (see the module
    docstring): flagged when its Bayes factor reaches 1/`alpha`, so a correct split is ever
    flagged, at any number of looks, with probability at most alpha. Pass counts over a period
    the weights held throughout (`decide` merges a stopped arm into control, whose buckets
    serve its units). An arm with weight 0 that still receives units is flagged outright. Below
    `SRM_MIN_EXPECTED` expected units in an arm nothing is flagged yet. Raises ValueError for an
    arm counted but not weighted, negative counts or weights, all weights 0, alpha outside
    (0, 1), or a concentration that is not finite and > 0."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    unknown = sorted(set(counts) - set(weights))
    if unknown:
        raise ValueError(f"units counted for arms without a weight: {unknown}")
    if any(c < 0 for c in counts.values()):
        raise ValueError("counts must be >= 0")
    if any(not math.isfinite(w) or w < 0 for w in weights.values()):
        raise ValueError("weights must be finite and >= 0")
    if not math.isfinite(concentration) or concentration <= 0:
        raise ValueError(f"concentration must be finite and > 0, got {concentration}")
    weight_total = math.fsum(weights.values())
    if weight_total <= 0:
        raise ValueError("at least one weight must be > 0")
    observed = {arm: counts.get(arm, 0) for arm in weights}
    total = sum(observed.values())
    expected = {arm: total * w / weight_total for arm, w in weights.items()}
    live = [arm for arm, w in weights.items() if w > 0]
    df = len(live) - 1
    split = ", ".join(f"{arm} {observed[arm]:,}" for arm in weights)
    strays = [arm for arm, w in weights.items() if w == 0 and observed[arm] > 0]
    if strays:
        text = f"sample-ratio mismatch: units assigned to arms weighted 0 ({', '.join(strays)})"
        return Srm(observed, expected, math.inf, df, 0.0, alpha, True, text, math.inf)
    if df < 1 or min(expected[arm] for arm in live) < SRM_MIN_EXPECTED:
        text = f"assignment: too few units to check the split yet ({split})"
        return Srm(observed, expected, None, df, None, alpha, False, text)
    chi2 = math.fsum((observed[arm] - expected[arm]) ** 2 / expected[arm] for arm in live)
    shares = [weights[arm] / weight_total for arm in live]
    log_e = log_bayes_factor([observed[arm] for arm in live], shares, concentration)
    p_value = math.exp(-log_e) if log_e > 0 else 1.0
    flagged = log_e >= math.log(1 / alpha)
    said = ", ".join(
        f"{arm} {observed[arm] / total:.1%} (weight {weights[arm] / weight_total:.1%})"
        for arm in live
    )
    if flagged:
        text = (
            f"sample-ratio mismatch: {said}; evidence {_evidence(log_e)} against the weights, "
            f"p = {p_value:.2g} ≤ {alpha:g} — the assignment is broken, no lift can be trusted "
            "until it is explained"
        )
    else:
        text = f"assignment follows the weights: {said}; p = {p_value:.2g}"
    return Srm(observed, expected, chi2, df, p_value, alpha, flagged, text, log_e)


def _evidence(log_e: float) -> str:
    """A Bayes factor in words: "1,234:1", or "10^57:1" past a million."""
    if log_e < math.log(1e6):
        return f"{math.exp(log_e):,.0f}:1"
    return f"10^{log_e / math.log(10):.0f}:1"


# -- the decision -----------------------------------------------------------------------------


def tracked_metrics(primary: str, guardrails: Sequence[str]) -> tuple[str, ...]:
    """The metrics `decide` computes for each arm, in order: the primary one, the guardrails,
    then cost per operation and latency p50 if not already there."""
    ordered: list[str] = []
    for name in (primary, *guardrails, *_ALWAYS_TRACKED):
        if name not in ordered:
            ordered.append(name)
    return tuple(ordered)


def decide(
    primary: str,
    guardrails: Sequence[str],
    control: str,
    units: Mapping[str, Sequence[Unit]],
    *,
    mde: float,
    rate_per_s: float | None,
    alpha: float = 0.05,
    weights: Mapping[str, float] | None = None,
    unit_name: str = "operation",
    tolerances: Mapping[str, float] | None = None,
    preferences: Mapping[str, Sequence[float]] | None = None,
    stopped: Collection[str] = (),
) -> ExperimentDecision:
    """The verdict on every arm of `units` other than `control`, at this look.

    For each arm the tracked metrics (`tracked_metrics`) are lifted over control, every
    interval at level alpha / (metrics x arms compared), so together they hold at every look
    with probability 1 - alpha. Then, in order: a guardrail surely worse stops the arm
    (`stopped`); the primary metric surely better ships it (`ship`), and so does the primary
    surely no worse than `mde` with cost, calls or latency surely better; the primary surely
    worse is `worse`; its interval within ±`mde` is `no_difference`; anything else, and any arm
    or control with fewer than `MIN_UNITS` units, is `inconclusive`, with the units it needs
    if the estimates hold and, given `rate_per_s` (new units per second over the whole
    experiment), how long that takes. `mde` is in points for a proportion primary metric and
    relative for the others (0.03: 3 points, or 3 %). With `weights` the assignment is also
    checked (`sample_ratio_mismatch`), the units of the `stopped` arms counted with control's:
    a stopped arm's buckets go to control, so from the start to now the two together hold the
    stopped arm's weight and control's (the `weights` of a stopped arm being 0). `unit_name`
    is what the text counts (`operation`, `user`). A guardrail is breached when its interval
    lies wholly on the worse side of 0, or beyond its entry in `tolerances` (on its lift's
    scale: 0.01 is 1 point or 1 %; none by default: a guardrail promises no harm, and the
    shared budget keeps false stops rare).
    Raises ValueError for an unknown metric, a control without units, no other arm, alpha or
    mde outside (0, 1), a negative rate or tolerance, a tolerance for a metric that is not a
    guardrail, or units of an arm `weights` does not name.

    `human_preference` (as the primary metric or a guardrail) is lifted from `preferences`:
    arm → its blind-review scores against control (`HUMAN_PREFERENCE`; an arm missing has
    none), not from the units. Below `MIN_UNITS` reviews it has no interval, so it gives no
    verdict (the arm stays `inconclusive` when it is the primary metric) and never stops an
    arm; as the primary metric, what an inconclusive arm needs is counted in reviews. Raises
    ValueError for a score other than 0, 0.5 or 1."""
    for name in (primary, *guardrails):
        metric_info(name)
    _check_level(alpha, mde)
    if control not in units:
        raise ValueError(f"control arm {control!r} has no units")
    arms = [arm for arm in units if arm != control]
    if not arms:
        raise ValueError("an experiment needs an arm besides control")
    if rate_per_s is not None and (not math.isfinite(rate_per_s) or rate_per_s < 0):
        raise ValueError(f"rate_per_s must be finite and >= 0, got {rate_per_s}")
    tolerance = dict(tolerances or {})
    for name, value in tolerance.items():
        if name not in guardrails:
            raise ValueError(f"tolerance for {name!r}, which is not a guardrail")
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"tolerance of {name!r} must be finite and >= 0, got {value}")
    mismatch = None if weights is None else sample_ratio_mismatch(
        _assigned(units, control, stopped), weights
    )  # fmt: skip
    metrics = tracked_metrics(primary, guardrails)
    level = alpha / (len(metrics) * len(arms))
    total = sum(len(us) for us in units.values())
    infos = [metric_info(m) for m in metrics]
    reviewed = dict(preferences or {})
    _check_preferences(reviewed)
    control_latencies = _latencies(units[control])
    control_sides = [
        _Side(None, 0)
        if info.name == HUMAN_PREFERENCE
        else _side(info, units[control], control_latencies)
        for info in infos
    ]
    decisions = tuple(
        _decide_arm(
            arm, infos, control_sides, units[arm], units[control],
            {g: tolerance.get(g, 0.0) for g in guardrails}, level, mde, rate_per_s, total,
            unit_name, reviewed.get(arm, ()),
        )
        for arm in arms
    )  # fmt: skip
    lines = [d.text for d in decisions]
    if mismatch is not None and mismatch.flagged:
        lines.append(mismatch.text)
    return ExperimentDecision(
        primary, tuple(guardrails), control, len(units[control]), alpha, level, mde, decisions,
        mismatch, "\n".join(lines),
    )  # fmt: skip


def _assigned(
    units: Mapping[str, Sequence[Unit]], control: str, stopped: Collection[str]
) -> dict[str, int]:
    """Units per arm for the sample-ratio check, a stopped arm's counted with control's."""
    counts = {arm: len(us) for arm, us in units.items()}
    for arm in stopped:
        if arm != control and arm in counts:
            counts[control] = counts.get(control, 0) + counts.pop(arm)
    return counts


def _decide_arm(
    arm: str,
    infos: Sequence[MetricInfo],
    control_sides: Sequence[_Side],
    arm_units: Sequence[Unit],
    control_units: Sequence[Unit],
    guardrails: Mapping[str, float],
    level: float,
    mde: float,
    rate_per_s: float | None,
    total: int,
    unit_name: str,
    preferences: Sequence[float] = (),
) -> ArmDecision:
    arm_latencies = _latencies(arm_units)

    def lifted(info: MetricInfo, c: _Side) -> Lift:
        if info.name == HUMAN_PREFERENCE:
            return _lift(info, *_preference_sides(preferences), level, mde)
        return _lift(info, c, _side(info, arm_units, arm_latencies), level, mde)

    lifts = tuple(lifted(info, c) for info, c in zip(infos, control_sides, strict=True))
    primary = lifts[0]
    info = infos[0]
    n_arm, n_control = len(arm_units), len(control_units)
    operations = sum([u.operations for u in arm_units])
    enough = min(n_arm, n_control) >= MIN_UNITS
    breached = tuple(
        x.metric for x in lifts if x.metric in guardrails and x.surely_worse(guardrails[x.metric])
    )
    cheaper = [
        x
        for x in lifts[1:]
        if x.metric in EFFICIENCY_METRICS and x.metric != primary.metric and x.surely_better
    ]
    shown: list[Lift] = [primary]
    if not enough:
        verdict = Verdict.INCONCLUSIVE
    elif breached:
        verdict = Verdict.STOPPED
        shown = [x for x in lifts if x.metric in breached]
    elif primary.surely_better:
        verdict = Verdict.SHIP
    elif primary.no_worse_than(mde) and cheaper:
        verdict = Verdict.SHIP
        shown = [primary, *cheaper]
    elif primary.surely_worse():
        verdict = Verdict.WORSE
    elif primary.within_mde:
        verdict = Verdict.NO_DIFFERENCE
    else:
        verdict = Verdict.INCONCLUSIVE

    needs: int | None = 0
    eta: float | None = 0.0
    counted = n_arm
    if verdict is Verdict.INCONCLUSIVE:
        needs = max(
            primary.needs if primary.needs is not None else 0,
            MIN_UNITS - n_arm,
            MIN_UNITS - n_control,
        ) if (primary.needs is not None or not enough) else None  # fmt: skip
        eta = _eta(needs, primary.growth, n_arm, n_control, total, rate_per_s)
        if info.name == HUMAN_PREFERENCE:
            # Counted in reviews, which come at the reviewers' pace, not the traffic's.
            needs = primary.needs if primary.needs is not None else MIN_UNITS - primary.n_arm
            eta, unit_name, counted = None, "review", primary.n_arm
    text = _text(
        arm, verdict, info, shown, cheaper, mde, needs, eta, unit_name, counted, guardrails
    )
    return ArmDecision(arm, verdict, lifts, breached, n_arm, operations, needs, eta, text)


def _eta(
    needs: int | None,
    growth: float | None,
    n_arm: int,
    n_control: int,
    total: int,
    rate_per_s: float | None,
) -> float | None:
    """Seconds until both sides hold what they need, each growing at its observed share."""
    if needs is None or not rate_per_s or total == 0:
        return None
    if n_arm == 0 or n_control == 0:
        return None  # no share observed yet: no rate for that side
    control_wants = MIN_UNITS - n_control
    if growth is not None:
        control_wants = max(control_wants, math.ceil(n_control * (growth - 1.0)))
    waits = [
        needs / (rate_per_s * n_arm / total),
        max(0, control_wants) / (rate_per_s * n_control / total),
    ]
    return max(waits)


def _shown(x: Lift) -> str:
    label = METRICS[x.metric].label
    if x.estimate is None:
        return f"{label} unknown"
    number = words.points if x.scale == "points" else words.relative
    return f"{label} {number(x.estimate, x.low, x.high)}"


def _beyond(x: Lift, tolerance: float) -> str:
    if tolerance == 0:
        return ""
    if x.scale == "points":
        return f" (by more than {tolerance * 100:.1f} pts)"
    return f" (by more than {tolerance * 100:.0f} %)"


def _text(
    arm: str,
    verdict: Verdict,
    info: MetricInfo,
    shown: Sequence[Lift],
    cheaper: Sequence[Lift],
    mde: float,
    needs: int | None,
    eta: float | None,
    unit_name: str,
    n_arm: int,
    tolerances: Mapping[str, float],
) -> str:
    lifts = ", ".join(_shown(x) for x in shown)
    within = f"±{mde * 100:.1f} pts" if info.scale == "points" else f"±{mde * 100:.0f} %"
    match verdict:
        case Verdict.STOPPED:
            metric_names = " and ".join(
                METRICS[x.metric].label + _beyond(x, tolerances[x.metric]) for x in shown
            )
            return f"{arm}: {lifts}: guardrail breached, surely worse on {metric_names} — stop it"
        case Verdict.SHIP if cheaper:
            better = ", ".join(METRICS[x.metric].improved for x in cheaper)
            return f"{arm}: {lifts}: no worse on {info.label}, {better} — ship it"
        case Verdict.SHIP:
            return f"{arm}: {lifts}: better on {info.label} — ship it"
        case Verdict.WORSE:
            return f"{arm}: {lifts}: worse on {info.label} — keep control"
        case Verdict.NO_DIFFERENCE:
            return f"{arm}: {lifts}: no difference on {info.label} beyond {within}"
    plural = unit_name if unit_name.endswith("s") else f"{unit_name}s"
    if needs is None:
        more = f"needs more {plural} to estimate a spread"
    else:
        more = f"needs ≈{words.count(needs)} more {plural} per arm"
        more += f" (≈{words.duration(eta)} at the current rate)" if eta is not None else ""
    so_far = lifts if shown[0].estimate is not None else f"{n_arm} {plural} so far"
    return f"{arm}: {so_far}: not enough data: {more}"
