"""Corrections and ratings per arm, for `mirrorgate report`.

Feedback (`proxy.core.FeedbackRecord`) is joined to the answer it is about by request id, arm
and target, and counted against the answers each arm · target served in the window: its exchanges
that sent the client an HTTP status. Shadows and judge calls are left out — no user ever sees
their answers —
and so is feedback on answers outside the window, so that every correction counted is one of the
answers in the denominator. A correction is what `proxy.core.is_correction` says, as for the
judge and the metrics. On a route governed by a rule set the rows are split by rule version.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from datetime import datetime

from analyzers.summary import Rate, mean
from proxy.core import Arm, ExchangeRecord, FeedbackRecord, is_correction

from .model import FeedbackArmReport, FeedbackReport, arm_key

_SERVED_ARMS = (Arm.PRIMARY, Arm.CANARY, Arm.FALLBACK)
"""Arms whose answers reach users (shadows and judge calls never do)."""

_Group = tuple[str, str, str | None]
"""(arm, target, rule version)."""


def build_feedback(
    exchanges: Sequence[ExchangeRecord], feedback: Sequence[FeedbackRecord]
) -> FeedbackReport:
    """`exchanges`: the route's exchanges in the window; `feedback`: its feedback in the window."""
    served = [r for r in exchanges if r.arm in _SERVED_ARMS and r.http_status != 0]
    by_version = any(r.rule_version is not None for r in served)
    answers: dict[tuple[str, str, str], _Group] = {}
    counts: Counter[_Group] = Counter()
    first_seen: dict[str | None, datetime] = {}
    for record in served:
        version = record.rule_version if by_version else None
        group = (record.arm.value, record.target, version)
        answers[(record.request_id, record.arm.value, record.target)] = group
        counts[group] += 1
        if version not in first_seen or record.started_at < first_seen[version]:
            first_seen[version] = record.started_at

    corrected: Counter[_Group] = Counter()
    scores: dict[_Group, list[int]] = defaultdict(list)
    labels: dict[_Group, Counter[str]] = defaultdict(Counter)
    counted = 0
    for item in feedback:
        found = answers.get((item.request_id, item.arm.value, item.target))
        if found is None:
            continue
        counted += 1
        if is_correction(item):
            corrected[found] += 1
        elif item.kind == "score" and item.score is not None:
            scores[found].append(item.score)
        elif item.kind == "label" and item.label:
            labels[found][item.label] += 1

    def order(group: _Group) -> tuple[datetime, tuple[int, str, str]]:
        return first_seen[group[2]], arm_key(group[0], group[1])

    rows = tuple(
        FeedbackArmReport(
            arm=arm,
            target=target,
            rule_version=version,
            corrections=Rate.of(min(corrected[group], counts[group]), counts[group]),
            scores=tuple(scores[group]),
            mean_score=mean(scores[group]),
            labels=tuple(sorted(labels[group].items(), key=lambda item: (-item[1], item[0]))),
        )
        for group in sorted(counts, key=order)
        for arm, target, version in (group,)
    )
    return FeedbackReport(
        rows=rows, by_version=by_version, counted=counted, unmatched=len(feedback) - counted
    )
