"""The rollout controller: every `analysis.interval_s`, judge each canary against its primary and
advance, hold or roll back — on exactly one replica at a time.

Leadership (`proxy.store.Leadership`): with PostgreSQL, the replica holding a session-level
advisory lock decides, and another replica takes it at its next tick (`TICK_S`) when the holder
dies or is cut off from the database. With SQLite (one process) the gateway always decides.
Decisions are also fenced by the route's revision (`RolloutManager.act`), so even two deciders
could never apply one decision twice.

Each look at a route (docs/rollouts.md, "The judge"):

1. traffic metrics (error rate, latency and TTFT p50/p95, cost per request, corrections) on the
   last `analysis.window_s` of both arms, never before the rollout started; and, when the
   candidate is also shadowed, its disagreement with the primary above the route's noise floor;
2. each rule check on the current rule epoch (the current version, since its first request or the
   rollout's start), with its own look count, so a rule change is judged on fresh evidence;
3. every verdict stored and counted; a `fail` in `failure_limit` consecutive looks rolls the canary
   back (to the route's `canary.rollback_to`), with an alert naming the metric (and rule,
   version, check, example requests); when every verdict passes and the step has lasted
   `step_interval_s`, the canary advances (promoted after the last step). Anything
   inconclusive holds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from alerts.alert import Alert
from analyzers.judge_stats import judge
from analyzers.verdicts import ArmWindow, MetricVerdict, Outcome, Tally
from proxy.config import MirrorgateConfig, RouteSpec
from proxy.core import (
    ACTIVE,
    Action,
    IllegalTransition,
    Phase,
    RolloutState,
    Transition,
    rollback_target,
)
from proxy.observability import GatewayMetrics
from proxy.store import Arms, Epoch, JudgeWindows, Leadership, StoreUnavailableError

from .evidence import (
    active_epochs,
    agreement_tallies,
    check_windows,
    failing_examples,
    traffic_windows,
)
from .manager import RolloutManager, TransitionConflictError

log = logging.getLogger("mirrorgate.controller")

TICK_S = 0.5
"""How often the controller wakes: to take over leadership, and to see which route is due."""


@dataclass(slots=True)
class _Memory:
    """What the decider remembers about one rollout between looks (lost on takeover: the next
    decider starts counting again, which only makes it more careful)."""

    rollout_id: str
    looks: int = 0
    epoch_looks: dict[tuple[str, str], int] = field(default_factory=dict)
    failures: int = 0
    last_look: float = float("-inf")


@dataclass(frozen=True, slots=True)
class EpochLook:
    """One rule version's check tallies in this look (primary, candidate) and failing examples."""

    epoch: Epoch
    checks: tuple[dict[str, Tally], dict[str, Tally]]
    examples: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Look:
    """One look at one route: the verdicts (scope, verdict) and what follows from them."""

    route: str
    revision: int
    verdicts: tuple[tuple[str, MetricVerdict], ...]
    epochs: Mapping[str, EpochLook]
    """scope (`rule:<rule>@<version>`) → that epoch's tallies."""


class RolloutController:
    """Runs the judge for every route with an active canary (on the deciding replica only)."""

    def __init__(
        self,
        config: MirrorgateConfig,
        manager: RolloutManager,
        windows: JudgeWindows,
        leadership: Leadership,
        metrics: GatewayMetrics,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.manager = manager
        self.windows = windows
        self.metrics = metrics
        self.clock = clock
        self.monotonic = monotonic
        self.leadership = leadership
        self.leading = False
        self._memory: dict[str, _Memory] = {}

    async def run(self) -> None:
        """Decide forever (a background task). While the store is unavailable a round is
        skipped; any other failure is a bug: logged with its traceback, counted in
        `mirrorgate_internal_errors_total{component="decider"}`, and the next round runs."""
        try:
            while True:
                await asyncio.sleep(TICK_S)
                try:
                    await self.tick()
                except StoreUnavailableError as exc:
                    log.warning("rollout decisions wait for the store: %s", exc)
                except Exception:  # a bug in one round must not end all judging
                    self._internal_error("rollout controller round failed")
        finally:
            await asyncio.to_thread(self.leadership.release)

    async def tick(self, *, force: bool = False) -> list[Transition]:
        """One round: judge every route that is due (all of them with `force`)."""
        leading = await asyncio.to_thread(self.leadership.hold)
        if leading != self.leading:
            self.leading = leading
            self._memory.clear()
        if not leading:
            return []
        done: list[Transition] = []
        for route, spec in self.config.routes.items():
            if spec.canary is None:
                continue
            state = self.manager.state(route)
            if state.phase not in ACTIVE or state.rollout_id is None:
                self._memory.pop(route, None)
                continue
            memory = self._memory.get(route)
            if memory is None or memory.rollout_id != state.rollout_id:
                memory = self._memory[route] = _Memory(state.rollout_id)
            now_mono = self.monotonic()
            if not force and now_mono - memory.last_look < spec.canary.analysis.interval_s:
                continue
            memory.last_look = now_mono
            try:
                change = await self._look(state, spec, memory)
            except StoreUnavailableError:
                raise
            except Exception:  # one route's bad look must not stop the others being judged
                self._internal_error(f"judging route {route} failed")
                continue
            if change is not None:
                done.append(change)
        return done

    def _internal_error(self, what: str) -> None:
        """Log the exception being handled with its traceback, and count it."""
        log.exception("%s", what)
        self.metrics.internal_errors.labels("decider").inc()

    async def _look(
        self, state: RolloutState, spec: RouteSpec, memory: _Memory
    ) -> Transition | None:
        canary = spec.canary
        assert canary is not None
        now = self.clock()
        memory.looks += 1
        look = await asyncio.to_thread(self._judge, state, spec, memory, now)
        for _scope, verdict in look.verdicts:
            self.metrics.verdicts.labels(
                state.route, state.candidate or "", verdict.metric, verdict.outcome.value
            ).inc()
        failed = [(s, v) for s, v in look.verdicts if v.outcome is Outcome.FAIL]
        action: Action | None = None
        reason = ""
        alert = None
        if failed:
            memory.failures += 1
            reason, alert = self._rollback_reason(state, spec, look, failed, now)
            left = canary.analysis.failure_limit - memory.failures
            if left <= 0:
                action = Action.ROLLBACK
            elif self.manager.alerts is not None:
                # Warn at once; the rollback follows if the next look(s) fail too.
                self.manager.alerts.notify(
                    replace(
                        alert,
                        kind="verdict_fail",
                        severity="warning",
                        summary=(
                            f"canary {state.candidate} of route {state.route} is failing: "
                            f"{reason}; rolled back after {left} more failing look(s)"
                        ),
                    )
                )
        else:
            memory.failures = 0
            started = state.step_started_at or now
            step_done = now - started >= timedelta(seconds=canary.step_interval_s)
            all_pass = bool(look.verdicts) and all(
                v.outcome is Outcome.PASS for _, v in look.verdicts
            )
            if state.phase is Phase.PROGRESSING and step_done and all_pass:
                action = Action.ADVANCE
                last = state.step + 1 >= len(canary.steps)
                reason = (
                    "every metric passed on the last step: promoted"
                    if last
                    else f"every metric passed for {canary.step_interval_s:g}s at {state.weight:g}%"
                )
        if action is None:
            return None
        evidence = {
            "look": memory.looks,
            "verdicts": [
                {
                    "scope": scope,
                    "metric": v.metric,
                    "verdict": v.outcome.value,
                    "estimate": v.estimate,
                    "low": v.low,
                    "high": v.high,
                    "threshold": v.threshold,
                    "n_primary": v.n_primary,
                    "n_candidate": v.n_candidate,
                    "reason": v.reason,
                }
                for scope, v in look.verdicts
            ],
            "example_request_ids": sorted({i for e in look.epochs.values() for i in e.examples}),
        }
        try:
            return await self.manager.act(
                state.route,
                action,
                reason=reason,
                actor="judge",
                evidence=evidence,
                alert=alert,
                expect_revision=state.revision,
            )
        except (IllegalTransition, TransitionConflictError) as exc:
            log.info("judge's %s on %s not applied: %s", action.value, state.route, exc)
            return None

    def _judge(self, state: RolloutState, spec: RouteSpec, memory: _Memory, now: datetime) -> Look:
        """Read both arms' windows and judge them (blocking)."""
        canary = spec.canary
        assert canary is not None and state.baseline and state.candidate and state.started_at
        analysis = canary.analysis
        thresholds = analysis.thresholds
        if "min_samples_rate" not in thresholds.model_fields_set:
            thresholds = thresholds.model_copy(update={"min_samples_rate": analysis.min_samples})
        wanted = set(analysis.metrics)
        arms = Arms(state.route, state.baseline, state.candidate)
        since = max(state.started_at, now - timedelta(seconds=analysis.window_s))
        primary, candidate = traffic_windows(self.windows, arms, since)
        if "disagreement" in wanted:
            agreement, noise = agreement_tallies(self.windows, arms, spec.agreement.mode, since)
            primary = replace(primary, noise=noise)
            candidate = replace(candidate, agreement=agreement)
        scoped: list[tuple[str, MetricVerdict]] = [
            ("traffic", v)
            for v in judge(primary, candidate, thresholds, memory.looks)
            if v.metric in wanted
        ]
        epochs: dict[str, EpochLook] = {}
        rule = next((n for n, r in self.config.rules.items() if state.route in r.routes), None)
        if rule is not None and "check_pass_rate" in wanted:
            recent = now - timedelta(seconds=analysis.window_s)
            for epoch in active_epochs(self.windows, arms, rule, recent):
                epoch_since = max(epoch.started_at, state.started_at)
                checks = check_windows(self.windows, arms, epoch, epoch_since)
                if not (checks[0] or checks[1]):
                    continue
                key = (epoch.rule, epoch.version)
                memory.epoch_looks[key] = memory.epoch_looks.get(key, 0) + 1
                scope = f"rule:{epoch.rule}@{epoch.version}"
                verdicts = judge(
                    ArmWindow(0, 0, checks=checks[0]),
                    ArmWindow(0, 0, checks=checks[1]),
                    thresholds,
                    memory.epoch_looks[key],
                )
                scoped.extend((scope, v) for v in verdicts)
                failing = [
                    v.metric.partition(":")[2] for v in verdicts if v.outcome is Outcome.FAIL
                ]
                examples: tuple[str, ...] = ()
                if failing:
                    examples = tuple(
                        failing_examples(self.windows, arms, epoch, failing[0], epoch_since)
                    )
                epochs[scope] = EpochLook(epoch, checks, examples)
        self.manager.store.add_verdicts(state, memory.looks, scoped, now)
        return Look(state.route, state.revision, tuple(scoped), epochs)

    def _rollback_reason(
        self,
        state: RolloutState,
        spec: RouteSpec,
        look: Look,
        failed: list[tuple[str, MetricVerdict]],
        now: datetime,
    ) -> tuple[str, Alert]:
        # A failing rule check explains a rollback best: name it first.
        failed.sort(key=lambda sv: not sv[1].metric.startswith("check_pass_rate"))
        scope, worst = failed[0]
        goes_to = (
            f"its fallback {spec.fallback}"
            if rollback_target(spec) == "fallback"
            else f"its primary {state.baseline or spec.primary}"
        )
        evidence: dict[str, float] = {
            "n_primary": worst.n_primary,
            "n_candidate": worst.n_candidate,
            "threshold": worst.threshold,
            "alpha": worst.alpha,
        }
        if worst.estimate is not None:
            evidence["estimate"] = worst.estimate
        rule = version = check = None
        examples: tuple[str, ...] = ()
        epoch_look = look.epochs.get(scope)
        if worst.metric.startswith("check_pass_rate:") and epoch_look is not None:
            check = worst.metric.partition(":")[2]
            rule, version = epoch_look.epoch.rule, epoch_look.epoch.version
            examples = epoch_look.examples
            primary_tally = epoch_look.checks[0].get(check, (0, 0))
            candidate_tally = epoch_look.checks[1].get(check, (0, 0))
            evidence["primary_pass_rate"] = _share(primary_tally)
            evidence["candidate_pass_rate"] = _share(candidate_tally)
            reason = (
                f"{worst.metric} failed on rule {rule} version {version}: candidate passes "
                f"{evidence['candidate_pass_rate']:.0%} ({candidate_tally[0]}/{candidate_tally[1]})"
                f", primary {evidence['primary_pass_rate']:.0%} "
                f"({primary_tally[0]}/{primary_tally[1]})"
            )
        else:
            check = worst.metric
            reason = f"{worst.metric} failed: {worst.reason}"
        others = [v.metric for _, v in failed[1:]]
        if others:
            reason += f" (also failing: {', '.join(others)})"
        alert = Alert(
            kind="rule_regression" if rule is not None else "rollback",
            route=state.route,
            target=state.candidate or "",
            severity="critical",
            summary=(
                f"canary {state.candidate} of route {state.route} rolled back to {goes_to}: "
                f"{reason}"
            ),
            starts_at=now,
            rule=rule,
            rule_version=version,
            check=check,
            evidence=evidence,
            example_request_ids=examples,
            generator_url=f"{self.manager.external_url}/admin/rollouts/{state.route}",
            rollout_id=state.rollout_id,
        )
        return reason, alert


def _share(tally: Tally) -> float:
    return tally[0] / tally[1] if tally[1] else 0.0
