"""The experiments' decider: every `experiment.interval_s`, on the replica that holds the
rollout controller's leadership, read each running experiment's units from the store, decide
(`analyzers.experiments.decide`), and act on the decision.

Each look at a running experiment:

1. `ExperimentStore.units`: its exchanges, summed per unit with their operations' outcomes,
   costs (judge calls included) and checks, turned into `analyzers.experiments.Unit`s;
2. `decide` on the primary metric and the guardrails against control, with the assignment's
   anytime-valid sample-ratio check against the weights serving now, a stopped arm's units
   counted with control's (its buckets went to control; `human_preference`
   from the blind reviews of pairs of an arm with control exchanged since the start,
   `proxy.rollout.evidence.experiment_preferences`);
3. the decision is persisted on the experiment's row (what `status` and the report show);
4. a sample-ratio mismatch sets `mirrorgate_experiment_srm`, and its first look flagged writes
   an `srm_flagged` event and sends an `experiment_srm` alert (`srm_cleared` when it clears);
5. an arm whose verdict is `stopped` (a guardrail surely worse than control) with at least
   `min_units` units on both sides is stopped through `ExperimentManager.stop_arm`: persisted,
   its units served by control from then on, counted, alerted — as a rollback is.

The decider never ships an arm by itself: `ship` is advice for a person (stop the experiment and
change the route), stated in the status.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from alerts.alert import Alert
from analyzers.experiments import (
    HUMAN_PREFERENCE,
    ExperimentDecision,
    Unit,
    Verdict,
    decide,
    tracked_metrics,
)
from proxy.config import ExperimentSpec
from proxy.core import ExperimentState, experiment_fingerprint
from proxy.store import ReviewStore, UnitTally

from .evidence import experiment_preferences
from .experiments import ExperimentManager

log = logging.getLogger("mirrorgate.experiments")


def as_units(tallies: Sequence[UnitTally]) -> dict[str, list[Unit]]:
    """The store's per-unit sums as the statistics' units, by arm."""
    by_arm: dict[str, list[Unit]] = {}
    for t in tallies:
        by_arm.setdefault(t.arm, []).append(
            Unit(
                arm=t.arm,
                operations=t.operations,
                requests=t.requests,
                errors=t.errors,
                cost_usd=t.cost_usd,
                completed=t.completed,
                outcomes=t.outcomes,
                adopted=t.adopted,
                adopted_known=t.adopted_known,
                corrected=t.corrected,
                corrected_known=t.corrected_known,
                latencies_s=t.latencies_s,
                checks=dict(t.checks),
            )
        )
    return by_arm


def decision_json(
    decision: ExperimentDecision, state: ExperimentState, spec: ExperimentSpec, at: datetime
) -> dict[str, Any]:
    """The decision as persisted and answered (`GET /admin/experiments/{route}`, the report)."""
    return {
        "at": at.isoformat(),
        "text": decision.text,
        "primary_metric": decision.primary,
        "guardrails": list(decision.guardrails),
        "control": decision.control,
        "control_units": decision.control_units,
        "alpha": decision.alpha,
        "interval_alpha": decision.interval_alpha,
        "minimum_detectable_effect": decision.mde,
        "config_changed": experiment_fingerprint(spec) != state.fingerprint,
        "arms": [
            {
                "arm": d.arm,
                "model": state.models.get(d.arm),
                "verdict": d.verdict.value,
                "text": d.text,
                "units": d.units,
                "operations": d.operations,
                "needs": d.needs,
                "eta_s": d.eta_s,
                "breached": list(d.breached),
                "stopped": d.arm in state.stopped_arms,
                "lifts": [_plain(dataclasses.asdict(x)) for x in d.lifts],
            }
            for d in decision.arms
        ],
        "srm": _plain(dataclasses.asdict(decision.srm)) if decision.srm is not None else None,
    }


def _plain(value: Any) -> Any:
    """`value` with mappings as dicts and tuples as lists (JSON as the store keeps it)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class ExperimentDecider:
    """Looks at every running experiment that is due (called from the controller's tick while
    this replica leads)."""

    def __init__(
        self,
        manager: ExperimentManager,
        *,
        reviews: ReviewStore | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.manager = manager
        self.reviews = reviews
        """Where `human_preference` reads blind reviews (None: it has none, so no verdict)."""
        self.clock = clock
        self.monotonic = monotonic
        self._last: dict[str, float] = {}
        self._srm: dict[str, bool] = {}
        """experiment id → whether its SRM flag was announced (from the persisted decision on a
        new leader)."""
        self.decisions: dict[str, ExperimentDecision] = {}
        """route → the decision of its last look (for callers that drive the decider, tests)."""

    def forget(self) -> None:
        """Leadership changed hands: read what the last leader persisted."""
        self._srm.clear()
        self._last.clear()

    async def tick(self, *, force: bool = False) -> list[ExperimentDecision]:
        done: list[ExperimentDecision] = []
        for route, spec in self.manager.config.routes.items():
            experiment = spec.experiment
            state = self.manager.running(route)
            if experiment is None or state is None:
                continue
            now_mono = self.monotonic()
            if not force and now_mono - self._last.get(route, float("-inf")) < (
                experiment.interval_s
            ):
                continue
            self._last[route] = now_mono
            decision = await self.look(state, experiment)
            if decision is not None:
                done.append(decision)
        return done

    async def look(self, state: ExperimentState, spec: ExperimentSpec) -> ExperimentDecision | None:
        """One look at one running experiment (None: no unit of control yet)."""
        store = self.manager.store
        now = self.clock()
        tallies = await asyncio.to_thread(store.units, state, now)
        units = as_units(tallies)
        arms = [arm for arm in state.weights if arm != state.control]
        for arm in [state.control, *arms]:
            units.setdefault(arm, [])
        if not units[state.control]:
            return None
        started = state.started_at or now
        span = (now - started).total_seconds()
        rate = sum(len(us) for us in units.values()) / span if span > 0 else None
        preferences: dict[str, tuple[float, ...]] = {}
        reviews = self.reviews
        if reviews is not None and HUMAN_PREFERENCE in tracked_metrics(
            spec.primary_metric, spec.guardrails
        ):
            preferences = await asyncio.to_thread(
                experiment_preferences, reviews, state.route, state.control, started
            )
        decision = decide(
            spec.primary_metric,
            spec.guardrails,
            state.control,
            units,
            mde=spec.minimum_detectable_effect,
            rate_per_s=rate,
            alpha=spec.alpha,
            weights=state.live_weights(),
            unit_name="operation" if spec.unit == "operation" else "user",
            preferences=preferences,
            stopped=state.stopped_arms,
        )
        self.decisions[state.route] = decision
        await asyncio.to_thread(
            store.save_decision, state.experiment_id, decision_json(decision, state, spec, now), now
        )
        await self._srm_look(state, decision, now)
        for verdict in decision.arms:
            if (
                verdict.verdict is Verdict.STOPPED
                and verdict.breached
                and verdict.arm not in state.stopped_arms
                and verdict.arm != state.control
                and len(units[verdict.arm]) >= spec.min_units
                and len(units[state.control]) >= spec.min_units
            ):
                metric = verdict.breached[0]
                summary = (
                    f"experiment on route {state.route}: arm {verdict.arm} stopped by guardrail "
                    f"{metric} ({verdict.text}); its units are served by {state.control}"
                )
                after = await self.manager.stop_arm(
                    state, verdict.arm, metric=metric, summary=summary
                )
                if after is not None:
                    state = after
        return decision

    async def _srm_look(
        self, state: ExperimentState, decision: ExperimentDecision, now: datetime
    ) -> None:
        srm = decision.srm
        flagged = bool(srm is not None and srm.flagged)
        self.manager.metrics.experiment_srm.labels(state.route).set(1 if flagged else 0)
        known = self._srm.get(state.experiment_id)
        if known is None:
            events = await asyncio.to_thread(self.manager.store.events, state.experiment_id, 200)
            last = next((e for e in events if e["kind"] in ("srm_flagged", "srm_cleared")), None)
            known = last is not None and last["kind"] == "srm_flagged"
        self._srm[state.experiment_id] = flagged
        if flagged == known or srm is None:
            return
        kind = "srm_flagged" if flagged else "srm_cleared"
        await asyncio.to_thread(lambda: self.manager.store.add_event(state, kind, srm.text, at=now))
        if not flagged:
            log.info("experiment on %s: sample ratio back in line (%s)", state.route, srm.text)
            return
        summary = f"experiment on route {state.route}: sample-ratio mismatch: {srm.text}"
        log.warning("%s", summary)
        self.manager.notify(
            Alert(
                kind="experiment_srm",
                route=state.route,
                target=state.control,
                severity="warning",
                summary=summary,
                starts_at=now,
                evidence={"p_value": srm.p_value} if srm.p_value is not None else {},
                generator_url=self.manager.alert_link("experiment_srm", state.route),
                rollout_id=state.experiment_id,
            )
        )
