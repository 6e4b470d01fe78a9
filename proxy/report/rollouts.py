"""The rollout section of `mirrorgate report`: a route's canary rollouts on a time axis.

`build_rollouts` turns the store's rollout history (`proxy.store.RolloutStore.history`: the
`rollout_events` and `verdicts` tables) into one `RolloutReport` per route: every transition
(time, from → to phase, action, actor, reason), every verdict the judge gave (time, look, metric,
outcome, estimate and interval against the threshold), and, for each rollback, the evidence the
judge persisted with it (the verdicts that failed and the example request ids). The Markdown
report lists them as one table in time order; the HTML report draws them on a timeline
(`proxy.report.charts.rollout_svg`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

ROLLBACK_PHASE = "rolled_back"
FAILED = "fail"
MAX_EXAMPLES = 5
"""At most this many example request ids are shown per rollback."""


@dataclass(frozen=True, slots=True)
class TransitionReport:
    """One persisted change of a route's rollout (`rollout_events`)."""

    at: datetime
    action: str
    from_phase: str | None
    """None for the route's first transition."""
    to_phase: str | None
    step: int | None
    weight: float | None
    """Percent of live traffic the canary gets after the transition."""
    actor: str
    """`judge`, an operator's name, or `alertmanager`."""
    reason: str

    @property
    def rollback(self) -> bool:
        return self.to_phase == ROLLBACK_PHASE


@dataclass(frozen=True, slots=True)
class VerdictReport:
    """One metric's verdict at one look of the judge (`verdicts`)."""

    at: datetime
    look: int
    scope: str
    metric: str
    outcome: str
    """`pass`, `fail` or `inconclusive`."""
    estimate: float | None
    low: float | None
    high: float | None
    threshold: float | None
    reason: str


@dataclass(frozen=True, slots=True)
class RollbackEvidence:
    """What the judge saw when it rolled a canary back: the event's persisted evidence."""

    at: datetime
    reason: str
    failed: tuple[VerdictReport, ...]
    """The verdicts of that look that failed."""
    examples: tuple[str, ...]
    """Request ids of failing examples, at most MAX_EXAMPLES."""


@dataclass(frozen=True, slots=True)
class RolloutReport:
    """One route's rollout history in the window."""

    route: str
    transitions: tuple[TransitionReport, ...]
    """Oldest first."""
    verdicts: tuple[VerdictReport, ...]
    """Oldest first."""
    rollbacks: tuple[RollbackEvidence, ...]

    @property
    def first_at(self) -> datetime:
        return min(item.at for item in self.timeline())

    @property
    def last_at(self) -> datetime:
        return max(item.at for item in self.timeline())

    def timeline(self) -> list[TransitionReport | VerdictReport]:
        """Transitions and verdicts in time order; at one moment the verdicts come first (the
        judge's look, then the transition it led to)."""
        items: list[TransitionReport | VerdictReport] = [*self.transitions, *self.verdicts]
        return sorted(items, key=lambda item: (item.at, isinstance(item, TransitionReport)))


def _verdict(row: Mapping[str, Any]) -> VerdictReport:
    return VerdictReport(
        at=row["at"],
        look=int(row.get("look") or 0),
        scope=str(row.get("scope") or ""),
        metric=str(row.get("metric") or ""),
        outcome=str(row.get("verdict") or ""),
        estimate=_number(row.get("estimate")),
        low=_number(row.get("low")),
        high=_number(row.get("high")),
        threshold=_number(row.get("threshold")),
        reason=str(row.get("reason") or ""),
    )


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _evidence(event: Mapping[str, Any]) -> RollbackEvidence:
    evidence = event.get("evidence")
    evidence = evidence if isinstance(evidence, dict) else {}
    listed = evidence.get("verdicts")
    failed = tuple(
        _verdict({"at": event["at"], "look": evidence.get("look"), **item})
        for item in (listed if isinstance(listed, list) else ())
        if isinstance(item, dict) and item.get("verdict") == FAILED
    )
    examples = evidence.get("example_request_ids")
    ids = tuple(str(i) for i in (examples if isinstance(examples, list) else ()))
    return RollbackEvidence(event["at"], str(event.get("reason") or ""), failed, ids[:MAX_EXAMPLES])


def build_rollouts(
    events: Sequence[Mapping[str, Any]], verdicts: Sequence[Mapping[str, Any]]
) -> dict[str, RolloutReport]:
    """Route → its rollout history, from `RolloutStore.history`'s rows (each oldest first)."""
    events_by_route: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for event in events:
        events_by_route[str(event["route"])].append(event)
    verdicts_by_route: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in verdicts:
        verdicts_by_route[str(row["route"])].append(row)
    reports = {}
    for route in sorted(set(events_by_route) | set(verdicts_by_route)):
        transitions = tuple(
            TransitionReport(
                at=event["at"],
                action=str(event.get("action") or ""),
                from_phase=event.get("from_phase"),
                to_phase=event.get("to_phase"),
                step=event.get("step"),
                weight=_number(event.get("weight")),
                actor=str(event.get("actor") or ""),
                reason=str(event.get("reason") or ""),
            )
            for event in events_by_route.get(route, [])
        )
        rollbacks = tuple(
            _evidence(event)
            for event in events_by_route.get(route, [])
            if event.get("to_phase") == ROLLBACK_PHASE
        )
        found = tuple(_verdict(row) for row in verdicts_by_route.get(route, []))
        reports[route] = RolloutReport(route, transitions, found, rollbacks)
    return reports


# ---- words, shared by the Markdown and HTML renderings ----


def _value(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def describe_transition(item: TransitionReport) -> str:
    """`pending → progressing (start, step 0, canary 10%)`; `progressing → rolled_back
    (rollback)`."""
    start = item.from_phase or "(none)"
    details = [item.action]
    if item.step is not None and item.step >= 0:  # -1: no step (the canary takes no traffic)
        details.append(f"step {item.step}")
        if item.weight is not None:
            details.append(f"canary {item.weight:g}%")
    return f"{start} → {item.to_phase or '(none)'} ({', '.join(details)})"


def describe_verdict(item: VerdictReport) -> str:
    """`latency_p95 [candidate]: fail, 1.4 (1.2 to 1.6) against 1.25`."""
    scope = f" [{item.scope}]" if item.scope else ""
    text = f"{item.metric}{scope}: {item.outcome}"
    if item.estimate is not None:
        text += f", {_value(item.estimate)}"
        if item.low is not None or item.high is not None:
            text += f" ({_value(item.low)} to {_value(item.high)})"
    if item.threshold is not None:
        text += f" against {_value(item.threshold)}"
    return text
