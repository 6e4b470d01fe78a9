"""Agreement with the primary, per candidate arm, for `mirrorgate report`.

Pairs (`proxy.core.PairRecord`) are grouped by kind and candidate target — `shadow · cand-a`,
`replay · cand-c` — and each group is summarised over the pairs where both answers ended `ok`.
`noise` pairs (the primary asked twice) are the route's noise floor; each candidate's disagreement
is compared with it. Agreement and disagreement are the route's verdicts
(`proxy.core.pair_agreed`: made when the pair was recorded, under the route's agreement mode,
fields and tolerance — what the judge and `mirrorgate_agreement_total` read); exact, normalised
and JSON equality are shown beside them. The LLM judge's findings on shadow pairs
(`analyzer="judge"`) are summarised per candidate: mean scores of both answers and the mean
difference with its 95% interval.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from analyzers.summary import Z95, AgreementSummary, attributable_disagreement, mean, median
from proxy.core import (
    JUDGE_ANALYZER,
    JUDGE_SCORE_DELTA,
    Arm,
    FindingRecord,
    PairRecord,
    Status,
    pair_agreed,
)

from .model import ArmReport, CandidateReport, JudgeScoreReport, arm_key

CANDIDATE_ARMS = (Arm.CANARY.value, Arm.SHADOW.value)
"""Arms whose answers can be compared with the primary's; one without pairs is named as such."""


@dataclass(frozen=True, slots=True)
class AgreementReport:
    """A route's candidates, its noise floor, and the candidate arms that have no pairs."""

    candidates: tuple[CandidateReport, ...]
    noise: AgreementSummary | None
    noise_pairs: int
    unpaired: tuple[str, ...]


def build_agreement(
    arms: Sequence[ArmReport], pairs: Sequence[PairRecord], mode: str = "normalized"
) -> AgreementReport:
    """A route's agreement; `mode` is its agreement mode (read for pairs stored without a
    verdict)."""
    noise_pairs = [p for p in pairs if p.kind == "noise"]
    noise_ok = [p for p in noise_pairs if _both_ok(p)]
    noise = _agreement(noise_ok, mode) if noise_ok else None
    grouped: dict[tuple[str, str], list[PairRecord]] = defaultdict(list)
    for pair in pairs:
        if pair.kind != "noise":
            grouped[(pair.kind, pair.candidate_target)].append(pair)
    candidates = []
    for (kind, candidate), group in sorted(grouped.items(), key=lambda item: arm_key(*item[0])):
        ok = [p for p in group if _both_ok(p)]
        agreement = _agreement(ok, mode)
        candidates.append(
            CandidateReport(
                kind=kind,
                candidate=candidate,
                pairs=len(group),
                agreement=agreement,
                latency_delta_p50_s=_median_of([p.latency_delta_s for p in ok]),
                ttft_delta_p50_s=_median_of([p.ttft_delta_s for p in ok]),
                cost_delta_p50_usd=_median_of([p.cost_delta_usd for p in ok]),
                length_ratio_p50=_median_of([p.length_ratio for p in ok]),
                beyond_noise=(
                    attributable_disagreement(agreement, noise)
                    if noise is not None and agreement.n
                    else None
                ),
            )
        )
    unpaired = tuple(
        arm.label
        for arm in arms
        if arm.arm in CANDIDATE_ARMS and (arm.arm, arm.target) not in grouped
    )
    return AgreementReport(tuple(candidates), noise, len(noise_pairs), unpaired)


def _both_ok(pair: PairRecord) -> bool:
    return pair.primary_status == Status.OK.value and pair.candidate_status == Status.OK.value


def _agreement(pairs: Sequence[PairRecord], mode: str) -> AgreementSummary:
    return AgreementSummary.from_pairs(
        [p.exact_equal for p in pairs],
        [p.normalized_equal for p in pairs],
        [p.json_equal for p in pairs],
        [pair_agreed(p.agreement, mode, p.exact_equal, p.normalized_equal) for p in pairs],
    )


def _median_of(values: Sequence[float | None]) -> float | None:
    return median([v for v in values if v is not None])


def build_judge_scores(findings: Sequence[FindingRecord]) -> tuple[JudgeScoreReport, ...]:
    """Per candidate (by name) the LLM judge's scores among `findings` (one route's); other
    analyzers' findings are ignored."""
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for f in findings:
        if f.analyzer == JUDGE_ANALYZER and f.value is not None:
            values[f.target][f.name].append(f.value)
    reports = []
    for candidate in sorted(values):
        scores = values[candidate]
        deltas = scores[JUDGE_SCORE_DELTA]
        low = high = None
        if len(deltas) >= 2:
            centre = statistics.fmean(deltas)
            half = Z95 * statistics.stdev(deltas) / math.sqrt(len(deltas))
            low, high = centre - half, centre + half
        reports.append(
            JudgeScoreReport(
                candidate=candidate,
                pairs=len(deltas),
                candidate_score=mean(scores["candidate_score"]),
                primary_score=mean(scores["primary_score"]),
                delta=mean(deltas),
                delta_low=low,
                delta_high=high,
                position_bias=mean(scores["position_bias"]),
            )
        )
    return tuple(reports)
