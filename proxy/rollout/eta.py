"""A running rollout's forecast (pure): when does this step pass, when is the candidate promoted,
and what holds the step — `eta` of `GET /admin/rollouts/{route}`, the line "this step passes in
~N min, promotion in ~M min" of `rollout status` and the console.

The current step's time is the longest of its gating metrics' (every verdict of the newest look
that does not pass): the more answers the metric needs at the rate they came in over the step
(`eta_s`). A metric still below its minimum sample needs the minimum *and* what it will need
beyond it — the plan's noise-free need at this step's share, less the answers it has — so the
ETA does not jump up once the minimum is reached. `rule_adaptation` held by a spent probe budget
waits at least until the budget frees. The step lasts at least `step_interval_s`.

Promotion adds the plan's median of every later step; its p90 scales the current step by the
plan's p90 ÷ median of this step and adds the later steps' p90s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from proxy.config import CanarySpec
from proxy.core import Phase, RolloutState

from .plan import RolloutPlan, StepPlan


@dataclass(frozen=True, slots=True)
class HeldBy:
    """What holds the step longest."""

    name: str
    """A metric (`error_rate`, `check_pass_rate:<check>`, …), `paused` (only `resume` moves
    the step on), `probe_budget` (a spent probe
    budget holds `rule_adaptation`), `step_interval` (every metric passes; the step is younger
    than `step_interval_s`) or `max_hold` (a metric whose estimate is beyond its margin: more of
    the same cannot pass it, so the step holds until the `step_held` alert at `max_hold_s`)."""
    until: datetime | None = None
    """When it frees: the probe budget, the step interval, or the `step_held` alert."""
    metric: str | None = None
    """With `probe_budget` and `max_hold`: the metric it holds."""


@dataclass(frozen=True, slots=True)
class RolloutEta:
    step_s: float | None
    """Seconds until the current step passes; None when it cannot tell (see `held_by`)."""
    promotion_s: float | None
    """Seconds until promotion, median; None when unknown."""
    promotion_p90_s: float | None
    """Seconds until promotion, 90th percentile; None when unknown."""
    held_by: HeldBy | None
    """What holds the step longest; None when nothing does (it advances at the next look)."""

    def summary(self) -> str:
        """`this step passes in ~27 min, promotion in ~35 min (p90 52 min); held by error_rate`."""
        if self.held_by is not None and self.held_by.name == "paused":
            return "paused: the step moves on only after a resume"
        step = "this step cannot pass as it stands" if self.step_s is None else (
            f"this step passes in ~{duration_text(self.step_s)}"
        )  # fmt: skip
        if self.promotion_s is not None:
            step += f", promotion in ~{duration_text(self.promotion_s)}"
            if self.promotion_p90_s is not None:
                step += f" (p90 {duration_text(self.promotion_p90_s)})"
        held = self.held_by
        if held is not None:
            what = held.name
            if held.name == "probe_budget":
                what = f"probe budget spent until {held.until:%H:%MZ}" if held.until else what
            elif held.name == "max_hold" and held.metric:
                what = f"{held.metric}, beyond its margin"
            step += f"; held by {what}"
        return step


def step_since(state: RolloutState, events: Sequence[Mapping[str, Any]]) -> datetime | None:
    """When the current step's evidence began: its `start` or `advance` transition among
    `events` (newest first), so that a pause and resume keep the step's evidence; the rollout's
    start when that transition is not among them."""
    for event in events:
        if event.get("rollout_id") == state.rollout_id and event.get("action") in (
            "start",
            "advance",
        ):
            moment = datetime.fromisoformat(str(event["at"]))
            return max(moment, state.started_at) if state.started_at else moment
    return state.started_at


def duration_text(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _few(row: Mapping[str, Any]) -> bool:
    return str(row.get("reason", "")).startswith(("too few samples", "no scored rule-flip probe"))


def rollout_eta(
    state: RolloutState,
    canary: CanarySpec,
    verdicts: Sequence[Mapping[str, Any]],
    plan: RolloutPlan | None,
    step_since: datetime,
    now: datetime,
    *,
    probe_until: datetime | None = None,
) -> RolloutEta | None:
    """The forecast of `state`'s rollout (see the module's docstring); None when it is not
    progressing or paused. `verdicts`: the route's recent verdicts (newest first), `plan`: the
    plan at the route's recent traffic, `step_since`: when the step's evidence began,
    `probe_until`: when a spent probe budget frees, if it is spent."""
    if state.rollout_id is None or state.step < 0 or state.step_started_at is None:
        return None
    if state.phase is Phase.PAUSED:
        return RolloutEta(None, None, None, HeldBy("paused"))
    mine = [v for v in verdicts if v.get("rollout_id") == state.rollout_id]
    newest = max((int(v["look"]) for v in mine), default=None)
    look = [v for v in mine if v["look"] == newest]
    planned = _planned_step(plan, state.weight)
    elapsed = max((now - step_since).total_seconds(), 1e-9)
    waits: list[tuple[float | None, HeldBy]] = []
    for row in look:
        if row["verdict"] == "pass":
            continue
        metric = str(row["metric"])
        if row["verdict"] == "fail" or row.get("needs") is None:
            hold = state.step_started_at + timedelta(seconds=canary.max_hold_s or 0)
            waits.append((None, HeldBy("max_hold", hold if canary.max_hold_s else None, metric)))
            continue
        needs = int(row["needs"])
        n = int(row.get("n_candidate") or 0)
        probes = metric.startswith("rule_adaptation")
        # Answers (or probes) per second: as they came in, else as planned.
        rate = n / elapsed if n else _planned_rate(planned, plan, probes)
        if _few(row) and planned is not None:
            beyond = planned.needs.get(metric)
            if beyond is not None:
                needs = max(needs, beyond - n)
        wait = None if not rate else needs / rate
        held = HeldBy(metric)
        if probes and probe_until is not None:
            wait = max(wait or 0.0, (probe_until - now).total_seconds())
            held = HeldBy("probe_budget", probe_until, metric)
        waits.append((wait, held))
    interval_end = state.step_started_at + timedelta(seconds=canary.step_interval_s)
    left = max(0.0, (interval_end - now).total_seconds())
    waits.append((left, HeldBy("step_interval", interval_end)))
    step_s: float | None
    held_by: HeldBy | None
    if any(w is None for w, _ in waits):
        step_s, held_by = None, next(h for w, h in waits if w is None)
    else:
        step_s, held_by = max(waits, key=lambda wh: wh[0] or 0.0)
        if not step_s:
            held_by = None
    promotion_s = promotion_p90 = None
    if step_s is not None and plan is not None:
        later = _later_steps(plan, state.weight)
        if later is not None and all(s.duration_s is not None for s in later):
            spread = (
                planned.duration_p90_s / planned.duration_s
                if planned is not None and planned.duration_s and planned.duration_p90_s
                else 1.0
            )
            promotion_s = step_s + sum(s.duration_s or 0.0 for s in later)
            promotion_p90 = step_s * spread + sum(s.duration_p90_s or 0.0 for s in later)
    return RolloutEta(step_s, promotion_s, promotion_p90, held_by)


def _planned_step(plan: RolloutPlan | None, weight: float) -> StepPlan | None:
    if plan is None:
        return None
    return next((s for s in plan.steps if s.weight == weight), None)


def _later_steps(plan: RolloutPlan, weight: float) -> list[StepPlan] | None:
    index = next((i for i, s in enumerate(plan.steps) if s.weight == weight), None)
    return None if index is None else list(plan.steps[index + 1 :])


def _planned_rate(planned: StepPlan | None, plan: RolloutPlan | None, probes: bool) -> float:
    if planned is None or plan is None:
        return 0.0
    if probes:
        return plan.probe_per_s
    return planned.canary_per_s


def eta_json(eta: RolloutEta | None) -> dict[str, Any] | None:
    """`eta` of `GET /admin/rollouts/{route}`."""
    if eta is None:
        return None
    held = eta.held_by
    return {
        "step_s": None if eta.step_s is None else round(eta.step_s),
        "promotion_s": None if eta.promotion_s is None else round(eta.promotion_s),
        "promotion_p90_s": None if eta.promotion_p90_s is None else round(eta.promotion_p90_s),
        "held_by": None
        if held is None
        else {
            "name": held.name,
            "until": held.until.isoformat() if held.until else None,
            "metric": held.metric,
        },
        "summary": eta.summary(),
    }
