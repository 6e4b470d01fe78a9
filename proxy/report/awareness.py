"""Context awareness by rule, for `mirrorgate report`: what the rule-flip probes of each rule
found per target model on one route — how often it followed the flipped value (adaptation) and
how often it kept the original one (stuck), each with its 95% Wilson interval
(`analyzers.adaptation`)."""

from __future__ import annotations

from collections.abc import Mapping

from analyzers.adaptation import adaptation_score

from .model import ContextAwarenessReport, TargetAdaptation

ProbeCounts = tuple[int, int, int]
"""(followed, stuck, other) probes of one target."""


def build_context_awareness(
    tallies: Mapping[str, Mapping[str, ProbeCounts]],
) -> tuple[ContextAwarenessReport, ...]:
    """rule → target → counts, in the window, as the report's records: rules and targets by
    name, rules without a scored probe left out."""
    reports = []
    for rule in sorted(tallies):
        targets = tuple(
            TargetAdaptation(target, adaptation_score(*counts))
            for target, counts in sorted(tallies[rule].items())
            if sum(counts)
        )
        if targets:
            reports.append(ContextAwarenessReport(rule, targets))
    return tuple(reports)
