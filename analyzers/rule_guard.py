"""The production model's guard after a rule change (pure: tallies in, a verdict out; no clock,
no I/O), so it can be simulated look after look on synthetic streams.

Every tally is `(failing, answers)`: answers judged on one rule version, and those failing any
check of that version (for probes: answers that did not follow the flipped value). The guard
asks two questions of the primary's failure rate on the new version, each as the canary judge
asks its rate metrics and fails them (`analyzers.judge_stats`: differences tested at the null
boundary, anytime-valid bounds of `analyzers.sequential` or, on few events, the exact guard; the
false-switch budget `alpha` split over both questions, a margin that is absolute or, if larger,
a share of the baseline's rate, at most half the distance to 1):

1. is it worse than the **others'** pooled failure rate on the same version (shadows, the canary,
   probes: other models answering the same new-version requests) beyond the margin?
2. is it worse than **its own** failure rate on the previous version beyond the margin?

The primary **regresses** only when both questions fail as the judge fails a rate: a new rule that
every model finds harder raises the others' rate as much as the primary's (question 1 stays
within the margin), and a primary that was already as bad before (question 2) did not regress
on this rule. Fewer than `min_samples` answers on either side of a question hold (too little
data never decides). When the route has no other model's evidence at all (`others_expected`
False: no shadow, canary or probe answers it), question 1 cannot be asked: the verdict rests on
question 2, and it may alert but never switch (`switchable` False).

Where to switch to (`choose_candidate`): each candidate's compliance (answers that pass, probes
that follow) with its anytime-valid lower bound; one with fewer than `min_samples` answers, or
not clearly better than the primary (its failure rate below the primary's beyond the margin,
by the same bound), is never chosen; of the others, the highest lower bound wins.

**Why an A/A run never switches.** Suppose every other model is the primary under another name.
Then the others' failure rate and the primary's are draws of one rate, and question 1's lower
bound lies beyond a margin >= 0 at any look with probability at most alpha/2 over the whole run,
however often the guard looks (the bound is a confidence sequence). A switch further needs a
candidate clearly better than the primary by the same kind of bound, another event of
probability at most alpha/2 for the same model. So an A/A run alerts at most alpha/2 of the time
and switches less often still; config checks refuse a candidate named like the primary, and
`bench/guard_simulation.py` measures the rate.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass

from analyzers.judge_stats import _TAU_FLOOR, _agresti_caffo, _Evidence, _rate, _verdict
from analyzers.sequential import bounds
from analyzers.verdicts import Outcome, Tally, Thresholds


class GuardOutcome(enum.StrEnum):
    HOLD = "hold"
    """Too little evidence, or a bound not yet beyond the margin: look again."""
    CLEAR = "clear"
    """Not (yet) shown worse than the others and than itself before beyond the margin: the
    guard keeps looking while the version is the newest."""
    REGRESSED = "regressed"


@dataclass(frozen=True, slots=True)
class GuardEvidence:
    """What one look at one route knows about one rule version (each a `(failing, answers)`)."""

    primary_new: Tally
    """The model serving the primary arm, on the new version since it opened."""
    primary_previous: Tally
    """The same model on the previous version (over that version's epoch)."""
    others_new: Tally
    """Every other model's answers on the new version, pooled: shadows, the canary, probes."""
    others_expected: bool = True
    """Whether the route has sources of other models' evidence at all (shadows, a canary,
    probes of other targets); False: judged against the previous version alone, alert-only."""


@dataclass(frozen=True, slots=True)
class Comparison:
    """One question: `subject`'s failure rate against `baseline`'s, bounded."""

    subject: Tally
    baseline: Tally
    estimate: float | None
    """Subject's failure rate minus the baseline's; None with too little evidence."""
    low: float | None
    """The anytime-valid lower bound of `estimate` at the question's alpha."""
    margin: float
    beyond: bool
    """The lower bound is beyond the margin: the subject is worse."""


@dataclass(frozen=True, slots=True)
class GuardVerdict:
    outcome: GuardOutcome
    against_others: Comparison | None
    """None when no other model's evidence can come (`others_expected` False)."""
    against_previous: Comparison
    switchable: bool
    """A regression the guard may act on by switching (other models' evidence shows it)."""
    reason: str


@dataclass(frozen=True, slots=True)
class CandidateScore:
    """One candidate's measured compliance with the rule."""

    name: str
    compliant: int
    answers: int
    low: float | None
    """Lower bound of its compliance rate (None: fewer than `min_samples` answers)."""
    better: bool
    """Clearly better than the primary on the new version."""


def _compare(subject: Tally, baseline: Tally, th: Thresholds, alpha: float) -> Comparison:
    evidence = _rate("rule_guard", baseline, subject, th.check_pass_rate_drop, th)
    if not isinstance(evidence, _Evidence):
        return Comparison(subject, baseline, None, None, evidence.threshold, False)
    tau = max(evidence.margin, _TAU_FLOOR["rate"])
    low, _ = bounds(evidence.estimate, evidence.se, tau, alpha)
    # Beyond the margin as the rollout judge fails a rate: its normal test where the counts
    # allow one, else its exact guard (a primary failing every answer on few of them).
    failed = _verdict(evidence, th, alpha, with_needs=False).outcome is Outcome.FAIL
    return Comparison(subject, baseline, evidence.shown, low, evidence.margin, failed)


def _rate_text(tally: Tally) -> str:
    failing, answers = tally
    return f"{failing}/{answers} failing" + (f" ({failing / answers:.0%})" if answers else "")


def guard_verdict(
    evidence: GuardEvidence, *, min_samples: int, thresholds: Thresholds | None = None
) -> GuardVerdict:
    """Judge the primary on one new rule version (see the module's docstring). `thresholds`
    gives the margin (`check_pass_rate_drop`, `rate_margin_relative`) and the budget
    (`false_rollback_rate`); `min_samples` replaces its `min_samples_rate`."""
    th = (thresholds or Thresholds()).model_copy(update={"min_samples_rate": min_samples})
    questions = 2 if evidence.others_expected else 1
    alpha = th.false_rollback_rate / questions
    previous = _compare(evidence.primary_new, evidence.primary_previous, th, alpha)
    others = None
    if evidence.others_expected:
        others = _compare(evidence.primary_new, evidence.others_new, th, alpha)
    asked = [c for c in (others, previous) if c is not None]
    text = f"primary {_rate_text(evidence.primary_new)} on the new version"
    if others is not None:
        text += f", others {_rate_text(evidence.others_new)}"
    text += f", primary on the previous version {_rate_text(evidence.primary_previous)}"
    if any(c.estimate is None for c in asked):
        return GuardVerdict(
            GuardOutcome.HOLD,
            others,
            previous,
            False,
            f"too little evidence (need {min_samples} answers on each side): {text}",
        )
    if all(c.beyond for c in asked):
        return GuardVerdict(
            GuardOutcome.REGRESSED, others, previous, others is not None, f"regressed: {text}"
        )
    return GuardVerdict(GuardOutcome.CLEAR, others, previous, False, f"not regressed: {text}")


def compliance_low(compliant: int, answers: int, alpha: float, tau: float = 0.05) -> float:
    """Anytime-valid lower bound of a compliance rate (Agresti-Caffo adjusted)."""
    p, var = _agresti_caffo(compliant, answers)
    low, _ = bounds(p, math.sqrt(var), tau, alpha)
    return max(0.0, low)


def choose_candidate(
    primary_new: Tally,
    candidates: Mapping[str, tuple[int, int]],
    *,
    min_samples: int,
    thresholds: Thresholds | None = None,
) -> tuple[str | None, list[CandidateScore], str]:
    """The candidate to switch to: (name or None, every candidate's score, why).

    `candidates`: name → (compliant, answers) on this rule (probes followed, and shadow/canary
    answers passing the new version's checks). `primary_new`: the primary's `(failing,
    answers)` on the new version."""
    th = (thresholds or Thresholds()).model_copy(update={"min_samples_rate": min_samples})
    alpha = th.false_rollback_rate / max(1, len(candidates))
    scores: list[CandidateScore] = []
    for name in sorted(candidates):
        compliant, answers = candidates[name]
        if answers < min_samples:
            scores.append(CandidateScore(name, compliant, answers, None, False))
            continue
        better = _compare(primary_new, (answers - compliant, answers), th, alpha).beyond
        low = compliance_low(compliant, answers, alpha, max(th.check_pass_rate_drop, 0.01))
        scores.append(CandidateScore(name, compliant, answers, low, better))
    eligible = [s for s in scores if s.low is not None and s.better]
    if not eligible:
        parts = []
        for s in scores:
            if s.low is None:
                parts.append(f"{s.name} has {s.answers} answers (needs {min_samples})")
            else:
                parts.append(
                    f"{s.name} is not clearly better than the primary "
                    f"({s.compliant}/{s.answers} compliant)"
                )
        why = "; ".join(parts) if parts else "the guard has no candidates"
        return None, scores, f"no candidate qualifies: {why}"
    best = max(eligible, key=lambda s: (s.low or 0.0, s.name))
    return (
        best.name,
        scores,
        f"{best.name}: {best.compliant}/{best.answers} compliant "
        f"(lower bound {best.low or 0.0:.0%})",
    )
