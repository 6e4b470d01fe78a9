"""What `mirrorgate report` knows about a window, before it becomes text.

`proxy.report.command.build_report` fills these frozen records from the store's records;
`proxy.report.markdown` and `proxy.report.html` only read them. A route's report has five parts:
its arms (latency, errors, cost), its candidates' agreement with the primary (and the LLM judge's
scores, when a judge is configured), its rule checks by rule version, the context awareness of
each model its rule-flip probes reached, and the corrections and ratings users gave to the
answers it served.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from analyzers.adaptation import AdaptationScore
from analyzers.summary import (
    AgreementSummary,
    ArmSummary,
    CheckSummary,
    Difference,
    Rate,
)
from proxy.core import Arm
from proxy.store import EvalRun

from .experiments import ExperimentReport
from .rollouts import RolloutReport

REPLAY_ARM = "replay"
"""The arm the report names a `mirrorgate replay` answer by (stored as a shadow tagged `replay`)."""
EVAL_ARM = "eval"
"""The arm of an evaluation-set answer (stored as a shadow tagged `eval`)."""

ARM_ORDER = {
    Arm.PRIMARY.value: 0, Arm.CANARY.value: 1, Arm.FALLBACK.value: 2, Arm.SHADOW.value: 3,
    Arm.JUDGE.value: 4, REPLAY_ARM: 5, EVAL_ARM: 6,
}  # fmt: skip
"""Arms are listed in this order, then by target name; anything else (a pair kind) comes last."""


def report_arm(arm: Arm, tags: tuple[str, ...]) -> str:
    """The arm a record is reported in: its own, except that offline answers (`replay` and
    `eval` runs store them as shadows with that tag) are named for the run that made them, so
    they are never mistaken for live shadow traffic."""
    if arm is Arm.SHADOW:
        for offline in (REPLAY_ARM, EVAL_ARM):
            if offline in tags:
                return offline
    return arm.value


EVAL_ROUTE_PREFIX = "eval:"
"""Evaluation sets are recorded under the pseudo-route `eval:<set>`."""


def route_key(route: str) -> tuple[bool, str]:
    """Sort key of a route: live routes first, then the evaluation pseudo-routes, each by name."""
    return route.startswith(EVAL_ROUTE_PREFIX), route


def arm_key(arm: str, target: str) -> tuple[int, str, str]:
    """Sort key of an arm · target: the order of `ARM_ORDER`, then by name."""
    return ARM_ORDER.get(arm, len(ARM_ORDER)), arm, target


def arm_label(arm: str, target: str) -> str:
    return f"{arm} · {target}"


@dataclass(frozen=True, slots=True)
class ArmReport:
    """One arm · target of one route: its summary and the raw samples the charts draw."""

    arm: str
    target: str
    summary: ArmSummary
    durations_s: tuple[float, ...]
    """Every exchange's duration, sorted."""
    ttfts_s: tuple[float, ...]
    """Streamed exchanges' times to first token, sorted."""
    failures: tuple[tuple[str, int], ...]
    """(status, count) of the exchanges that did not end `ok`, most frequent first."""

    @property
    def label(self) -> str:
        return arm_label(self.arm, self.target)


@dataclass(frozen=True, slots=True)
class CandidateReport:
    """One candidate arm compared with the primary, for one kind of pair (shadow, canary, replay,
    eval)."""

    kind: str
    candidate: str
    pairs: int
    """Every pair of this kind and candidate in the window."""
    agreement: AgreementSummary
    """Over the pairs where both answers ended `ok` (a failed answer is counted in the arm's
    error rate, not as a disagreement)."""
    latency_delta_p50_s: float | None
    """Median of candidate minus primary duration, over the same pairs."""
    ttft_delta_p50_s: float | None
    cost_delta_p50_usd: float | None
    length_ratio_p50: float | None
    beyond_noise: Difference | None
    """Disagreement minus the route's noise-floor disagreement; None without noise pairs."""

    @property
    def label(self) -> str:
        """`shadow · cand-a`: the pair kind names the arm the candidate answered in."""
        return arm_label(self.kind, self.candidate)


@dataclass(frozen=True, slots=True)
class JudgeScoreReport:
    """The LLM judge's scores of one candidate's shadow pairs, each averaged over both answer
    orders (1-10)."""

    candidate: str
    pairs: int
    """Pairs the judge scored in the window."""
    candidate_score: float | None
    """Mean score of the candidate's answers."""
    primary_score: float | None
    """Mean score of the primary's answers to the same requests."""
    delta: float | None
    """Mean of candidate minus primary score: below 0, the judge prefers the primary."""
    delta_low: float | None
    """Lower bound of the 95% interval of `delta` (normal approximation); None under 2 pairs."""
    delta_high: float | None
    position_bias: float | None
    """Mean preference of the judge for the answer shown first (cancelled by the averaging)."""

    @property
    def label(self) -> str:
        """`shadow · cand-a`: the judge scores shadow pairs."""
        return arm_label(Arm.SHADOW.value, self.candidate)

    @property
    def worse(self) -> bool:
        """The interval of `delta` is below 0: the judge prefers the primary's answers."""
        return self.delta_high is not None and self.delta_high < 0


@dataclass(frozen=True, slots=True)
class RuleChange:
    """A rule-change event (`rule_events`): the first exchange that carried a rule version."""

    rule: str
    version: str
    previous_version: str | None
    """The rule's version before this one; None for the first version the gateway saw."""
    first_seen_at: datetime
    route: str
    """The route of that first exchange (one rule set can govern several routes)."""


@dataclass(frozen=True, slots=True)
class CheckArmReport:
    """One rule check on one arm · target's answers, for one rule version."""

    check: str
    arm: str
    target: str
    summary: CheckSummary
    vs_primary: Difference | None
    """This arm's pass rate minus the primary's for the same check and version, with Newcombe's
    95% interval; None for the primary itself, or when the primary has no verdicts."""

    @property
    def label(self) -> str:
        return arm_label(self.arm, self.target)

    @property
    def below_primary(self) -> bool:
        """The pass rate is below the primary's and the interval of the difference excludes 0."""
        return (
            self.vs_primary is not None
            and self.vs_primary.significant
            and (self.vs_primary.value or 0.0) < 0
        )


@dataclass(frozen=True, slots=True)
class RuleVersionReport:
    """The rule checks of one version of one rule set, on one route."""

    rule: str
    version: str
    change: RuleChange | None
    """The event that opened this version, when the store has it."""
    first_seen_at: datetime | None
    """The earlier of the event and the first verdict in the window: versions are in this order."""
    rows: tuple[CheckArmReport, ...]
    """By check name, then arm · target in `ARM_ORDER`; empty when no check ran on the version in
    the window."""

    @property
    def checks(self) -> tuple[str, ...]:
        """The check names, in table order."""
        return tuple(dict.fromkeys(row.check for row in self.rows))


@dataclass(frozen=True, slots=True)
class TargetAdaptation:
    """One model's rule-flip probes of one rule on one route: counts, rates and intervals."""

    target: str
    score: AdaptationScore


@dataclass(frozen=True, slots=True)
class ContextAwarenessReport:
    """The rule-flip probes of one rule on one route, per target model by name."""

    rule: str
    targets: tuple[TargetAdaptation, ...]


@dataclass(frozen=True, slots=True)
class FeedbackArmReport:
    """Corrections and ratings of the answers one arm · target served (for one rule version)."""

    arm: str
    target: str
    rule_version: str | None
    """None when the route has no rule versions (or for answers served without one)."""
    corrections: Rate
    """Answers the user corrected / answers served, with its Wilson interval."""
    scores: tuple[int, ...]
    """The 1-5 ratings the answers got."""
    mean_score: float | None
    labels: tuple[tuple[str, int], ...]
    """(label, count), most frequent first."""

    @property
    def label(self) -> str:
        return arm_label(self.arm, self.target)

    @property
    def served(self) -> int:
        """Answers served: this arm's exchanges that sent the client an HTTP status."""
        return self.corrections.n


@dataclass(frozen=True, slots=True)
class FeedbackReport:
    """One route's corrections and ratings."""

    rows: tuple[FeedbackArmReport, ...]
    """Every arm · target (and rule version) that served answers, with or without feedback."""
    by_version: bool
    """The route's answers carry rule versions, so the rows are split by version."""
    counted: int
    """Feedback records on answers served in the window."""
    unmatched: int
    """Feedback records in the window on answers that are not (older ones, or never delivered)."""


@dataclass(frozen=True, slots=True)
class RouteReport:
    route: str
    arms: tuple[ArmReport, ...]
    candidates: tuple[CandidateReport, ...]
    noise: AgreementSummary | None
    """The primary compared with itself (`noise` pairs, both ok); None when there are none."""
    noise_pairs: int
    unpaired: tuple[str, ...] = ()
    """Labels of the candidate arms (canary, shadow) that have exchanges but no pairs."""
    rule_versions: tuple[RuleVersionReport, ...] = ()
    """In order of first appearance."""
    feedback: FeedbackReport | None = None
    judge_scores: tuple[JudgeScoreReport, ...] = ()
    """Per candidate the LLM judge scored, by name; empty without a judge."""
    context_awareness: tuple[ContextAwarenessReport, ...] = ()
    """Per probed rule of the route (by name), its targets' adaptation; empty without probes."""
    agreement_mode: str = "normalized"
    """The route's agreement mode (its fields and tolerance were applied when pairs were
    recorded)."""
    rollout: RolloutReport | None = None
    """The route's rollout transitions and verdicts in the window; None when it had none."""
    experiment: ExperimentReport | None = None
    """The route's latest A/B experiment in the window and its decision; None: none ran."""

    @property
    def agreement_note(self) -> str:
        """What the route's agreement compares beyond its mode (empty for text modes)."""
        fielded = self.agreement_mode in ("json_fields", "numeric")
        return " (with its fields and tolerance)" if fielded else ""

    @property
    def offline(self) -> bool:
        """An evaluation set's pseudo-route (`eval:<set>`), not live traffic."""
        return self.route.startswith(EVAL_ROUTE_PREFIX)

    @property
    def has_streams(self) -> bool:
        return any(arm.ttfts_s for arm in self.arms)

    @property
    def has_checks(self) -> bool:
        return any(version.rows for version in self.rule_versions)

    @property
    def newest_checked_version(self) -> RuleVersionReport | None:
        """The most recent rule version that has verdicts (what the checks chart draws)."""
        return next((v for v in reversed(self.rule_versions) if v.rows), None)


@dataclass(frozen=True, slots=True)
class Report:
    generated_at: datetime
    since: datetime | None
    route_filter: str | None
    store: str
    """The store URL, password hidden."""
    routes: tuple[RouteReport, ...]
    exchanges: int
    pairs: int
    first_at: datetime | None
    last_at: datetime | None
    truncated_from: int | None = None
    """The window's real number of exchanges when more than MAX_ROWS were there (and cut)."""
    checks: int = 0
    """Rule check verdicts in the window."""
    feedback: int = 0
    """Feedback records in the window."""
    evaluations: tuple[EvalRun, ...] = ()
    """Stored offline evaluation runs (of the route, when one is chosen), oldest first."""
