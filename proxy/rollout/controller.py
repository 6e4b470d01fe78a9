"""The rollout controller: every `analysis.interval_s`, judge each canary against its primary and
advance, hold or roll back — on exactly one replica at a time.

Leadership (`proxy.store.Leadership`): with PostgreSQL, the replica holding a session-level
advisory lock decides, and another replica takes it at its next tick (`TICK_S`) when the holder
dies or is cut off from the database. With SQLite (one process) the gateway always decides.
Decisions are also fenced by the route's revision (`RolloutManager.act`), so even two deciders
could never apply one decision twice.

Each look at a route (docs/rollouts.md, "The judge"):

1. traffic metrics (error rate, latency and TTFT p50/p95, cost per request, corrections, severe
   findings, the LLM judge's scores) on all of both arms' evidence since the current step began;
   and, when the candidate is also shadowed and the route has a noise floor, its disagreement
   with the primary above that floor;
2. each rule check on its rule epoch (the version, since its first request or the rollout's
   start), so a rule change is judged on fresh evidence; and, when the route's rule has probes,
   `rule_adaptation`: the share of each model's rule-flip probes that followed the flipped value,
   since the rollout started (and against `probes.min_adaptation`); and, when listed,
   `human_preference`: blind reviews of the canary's shadow answers against the primary's, since
   the rollout started;
3. the bounds are anytime-valid (`analyzers.sequential`): one false-rollback budget per rollout
   is split over traffic (per step), the rule epochs, the probes and the reviews
   (`proxy.rollout.budget`), and within each call over its metrics; it is never spent per look,
   so looking every interval is free. A step's evidence is kept across a pause and resume (the
   resume continues the step's sequence), and a gating metric without evidence holds the step
   with an inconclusive verdict saying why (`rule_adaptation` with no probe yet, or a spent
   probe budget: until when), it never vanishes from the judgement;
4. every verdict stored and counted, with `needs` (more canary answers to pass) and `eta_s`; a
   `fail` in `failure_limit` consecutive looks rolls the canary back (to the route's
   `canary.rollback_to`), with an alert naming the metric (and rule, version, check, example
   requests); when every verdict passes and the step has lasted `step_interval_s`, the canary
   advances (promoted after the last step). Anything inconclusive holds; a step held past
   `canary.max_hold_s` raises one warning alert per step naming what holds it and what it needs.

What the decider remembers between looks (the look count, consecutive failures, the warnings, the
step already warned about) is persisted with the verdicts, so a restart or a takeover resumes the
same decision.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from alerts.alert import Alert, AlertKind
from analyzers.judge_stats import judge
from analyzers.verdicts import ArmWindow, MetricVerdict, Outcome, Tally, Thresholds
from proxy.config import MirrorgateConfig, ProbesSpec, RouteSpec, unavailable_evidence
from proxy.core import (
    ACTIVE,
    Action,
    DeciderMemory,
    IllegalTransition,
    Phase,
    ProbeRecord,
    RolloutState,
    Transition,
    rollback_target,
)
from proxy.observability import GatewayMetrics
from proxy.store import (
    Arms,
    Epoch,
    JudgeWindows,
    Leadership,
    ProbeStore,
    ProbeTally,
    ReviewStore,
    StoreUnavailableError,
)

from .budget import RolloutBudget, epoch_order, rollout_budget
from .eta import step_since
from .evidence import (
    active_epochs,
    adaptation_windows,
    current_epoch,
    epoch_windows,
    failing_examples,
    preference_window,
    probe_tallies,
    stuck_examples,
    traffic_windows,
    with_agreement,
    with_findings,
    with_judge_deltas,
)
from .experiment_decider import ExperimentDecider
from .guard import GuardLook, RuleGuard, interval_s
from .manager import RolloutManager, TransitionConflictError
from .probe_budget import clock_text, probe_budget_until

log = logging.getLogger("mirrorgate.controller")

TICK_S = 0.5
"""How often the controller wakes: to take over leadership, and to see which route is due."""


def _libc_malloc_trim() -> Callable[[], object]:
    """glibc's `malloc_trim(0)`: hand the pages of freed heap memory back to the system, in every
    arena and not only at the top of the heap. A no-op where the C library has none (musl,
    macOS)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own C library
    except (OSError, AttributeError):
        return lambda: None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


release_freed_memory = _libc_malloc_trim()
"""Called on the worker thread after every look (see `RolloutController._judged`)."""


@dataclass(frozen=True, slots=True)
class EpochLook:
    """One rule version's check tallies in this look (primary, candidate) and failing examples."""

    epoch: Epoch
    checks: tuple[dict[str, Tally], dict[str, Tally]]
    examples: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ProbeLook:
    """The route's rule's rule-flip probes in this look (primary, candidate) and, when
    `rule_adaptation` fails, the candidate's example probes that did not follow."""

    rule: str
    tallies: tuple[ProbeTally, ProbeTally]
    examples: tuple[ProbeRecord, ...] = ()


PROBE_SCOPE = "probes:"
"""Scope prefix of the `rule_adaptation` verdicts (`probes:<rule>`)."""
REVIEW_SCOPE = "reviews"
"""Scope of the `human_preference` verdict."""
BUDGET_HELD = "held: probe budget spent until "
"""How a `rule_adaptation` verdict held by a spent probe budget begins (the moment follows)."""


@dataclass(frozen=True, slots=True)
class Look:
    """One look at one route: the verdicts (scope, verdict) and what follows from them."""

    route: str
    revision: int
    verdicts: tuple[tuple[str, MetricVerdict], ...]
    epochs: Mapping[str, EpochLook]
    """scope (`rule:<rule>@<version>`) → that epoch's tallies."""
    etas: tuple[float | None, ...] = ()
    """Per verdict: seconds until it has what it `needs` at the rate its evidence came in."""
    warnings: tuple[str, ...] = ()
    """Metrics left out because this configuration cannot evaluate them."""
    probes: ProbeLook | None = None
    """The rule-flip probes judged in this look, if any."""


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
        probes: ProbeStore | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
        release_memory: Callable[[], object] = release_freed_memory,
        guard: RuleGuard | None = None,
        experiments: ExperimentDecider | None = None,
        reviews: ReviewStore | None = None,
    ) -> None:
        self.config = config
        self.experiments = experiments
        """The A/B experiments' decider, run by the same leader (None: none is run)."""
        self.reviews = reviews
        """Where `human_preference` reads blind reviews (None: the metric is left out, warned)."""
        self.release_memory = release_memory
        self.guard = guard
        """The production model's guard, looked after by the same leader (None: no route has
        one)."""
        self.guard_looks: list[GuardLook] = []
        """The guard's looks of the last tick (for callers that drive it, and tests)."""
        self._last_guard_look: dict[str, float] = {}
        self.manager = manager
        self.windows = windows
        self.probes = probes
        """Where `rule_adaptation` reads the probes (None: the metric is left out, warned)."""
        self.metrics = metrics
        self.clock = clock
        self.monotonic = monotonic
        self.leadership = leadership
        self.leading = False
        self._memory: dict[str, DeciderMemory] = {}
        self._last_look: dict[str, float] = {}
        self._step_starts: dict[str, tuple[str, int, datetime]] = {}
        """route → (rollout id, step, when that step began), read from the transitions."""
        self._budget_held: dict[str, datetime | None] = {}
        """route → until when its last look found the probe budget spent (logged on change)."""

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
            self._memory.clear()  # a new leader reads what the last one persisted
            if self.guard is not None:
                self.guard.forget()
            if self.experiments is not None:
                self.experiments.forget()
        if not leading:
            return []
        done: list[Transition] = []
        await self._guard_tick(force)
        await self._experiments_tick(force)
        for route, spec in self.config.routes.items():
            if spec.canary is None:
                continue
            state = self.manager.state(route)
            if state.phase not in ACTIVE or state.rollout_id is None:
                self._memory.pop(route, None)
                continue
            now_mono = self.monotonic()
            last = self._last_look.get(route, float("-inf"))
            if not force and now_mono - last < spec.canary.analysis.interval_s:
                continue
            self._last_look[route] = now_mono
            try:
                memory = await self._remembered(state)
                change = await self._look(state, spec, memory)
            except StoreUnavailableError:
                raise
            except Exception:  # one route's bad look must not stop the others being judged
                self._internal_error(f"judging route {route} failed")
                continue
            if change is not None:
                done.append(change)
        return done

    async def _guard_tick(self, force: bool) -> None:
        """Look at every guarded route that is due (canary or not). The guard shares this loop
        and its leadership: one replica decides both, and a switch and a canary decision on one
        route are fenced by the same revision."""
        self.guard_looks = []
        if self.guard is None:
            return
        for route in self.guard.routes():
            now_mono = self.monotonic()
            last = self._last_guard_look.get(route, float("-inf"))
            if not force and now_mono - last < interval_s(self.config.routes[route]):
                continue
            self._last_guard_look[route] = now_mono
            try:
                look = await self.guard.look(route)
            except StoreUnavailableError:
                raise
            except Exception:  # one route's bad look must not stop the others being guarded
                self._internal_error(f"guarding route {route} failed")
                continue
            if look is not None:
                self.guard_looks.append(look)

    async def _experiments_tick(self, force: bool) -> None:
        """Look at every running experiment that is due (the same leader decides rollouts and
        experiments: one replica at a time)."""
        if self.experiments is None:
            return
        try:
            await self.experiments.tick(force=force)
        except StoreUnavailableError:
            raise
        except Exception:  # a bad look at an experiment must not stop the rollouts' judging
            self._internal_error("deciding experiments failed")

    async def _remembered(self, state: RolloutState) -> DeciderMemory:
        """This rollout's decision state: in memory, else as the last decider persisted it."""
        assert state.rollout_id is not None
        memory = self._memory.get(state.route)
        if memory is None or memory.rollout_id != state.rollout_id:
            memory = await asyncio.to_thread(self.manager.store.load_memory, state.route)
            if memory is None or memory.rollout_id != state.rollout_id:
                memory = DeciderMemory(state.rollout_id)
        return memory

    def _internal_error(self, what: str) -> None:
        """Log the exception being handled with its traceback, and count it."""
        log.exception("%s", what)
        self.metrics.internal_errors.labels("decider").inc()

    async def _look(
        self, state: RolloutState, spec: RouteSpec, memory: DeciderMemory
    ) -> Transition | None:
        canary = spec.canary
        assert canary is not None
        now = self.clock()
        memory = replace(memory, looks=memory.looks + 1)
        look = await asyncio.to_thread(self._judged, state, spec, memory.looks, now)
        memory = replace(memory, warnings=look.warnings)
        for _scope, verdict in look.verdicts:
            self.metrics.verdicts.labels(
                state.route, state.candidate or "", verdict.metric, verdict.outcome.value
            ).inc()
        failed = [(s, v) for s, v in look.verdicts if v.outcome is Outcome.FAIL]
        action: Action | None = None
        reason = ""
        alert = None
        started = state.step_started_at or now
        if failed:
            memory = replace(memory, failures=memory.failures + 1)
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
            memory = replace(memory, failures=0)
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
        held = canary.max_hold_s is not None and (
            now - started >= timedelta(seconds=canary.max_hold_s)
        )
        if (
            action is None
            and held
            and state.phase is Phase.PROGRESSING
            and memory.held_step != state.step
        ):
            self._warn_held(state, canary.max_hold_s or 0.0, look, now)
            memory = replace(memory, held_step=state.step)
        self._memory[state.route] = memory
        await asyncio.to_thread(self.manager.store.save_memory, state.route, memory)
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
                    "needs": v.needs,
                    "reason": v.reason,
                }
                for scope, v in look.verdicts
            ],
            "example_request_ids": sorted(
                {i for e in look.epochs.values() for i in e.examples}
                | {p.request_id for p in (look.probes.examples if look.probes else ())}
            ),
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

    def _warn_held(self, state: RolloutState, max_hold_s: float, look: Look, now: datetime) -> None:
        """One warning alert for a step held past `max_hold_s`: which metrics hold it, and what
        each needs."""
        holding = [
            (scope, v, eta)
            for (scope, v), eta in zip(look.verdicts, look.etas, strict=True)
            if v.outcome is not Outcome.PASS
        ]
        parts = [
            f"{v.metric} ({v.reason.partition(';')[0]})"
            if v.reason.startswith(BUDGET_HELD)
            else f"{v.metric} ({_needs_text(v.needs, eta)})"
            for _, v, eta in holding
        ]
        if not look.verdicts:
            parts = ["no evidence at all: no canary traffic recorded in this step"]
        parts.extend(look.warnings)
        summary = (
            f"canary {state.candidate} of route {state.route} has held at {state.weight:g}% for "
            f"more than {max_hold_s:g}s: held by {'; '.join(parts)}"
        )
        log.warning("%s", summary)
        if self.manager.alerts is None:
            return
        self.manager.alerts.notify(
            Alert(
                kind="step_held",
                route=state.route,
                target=state.candidate or "",
                severity="warning",
                summary=summary,
                starts_at=now,
                check=holding[0][1].metric if holding else None,
                evidence={"step": state.step, "weight": state.weight},
                generator_url=self.manager.alert_link("step_held", state.route),
                rollout_id=state.rollout_id,
            )
        )

    def _judged(self, state: RolloutState, spec: RouteSpec, looks: int, now: datetime) -> Look:
        """`_judge`, then the freed memory handed back (blocking).

        A look reads and drops thousands of rows on a worker thread; glibc keeps the freed chunks
        in its arenas, returning only what sits at the top of a heap, so under traffic the holes
        they leave piled up: a 50 requests/s soak with a canary held grew about 2 MiB a minute
        while the live heap stayed flat (`malloc_stats`: about 50 MB in use while the arenas' size
        grew 62 -> 72 MB in 4 minutes; SQLite's own memory stayed under 2 MB), and one
        `malloc_trim(0)` took the gateway from 158 to 140 MiB. Trimming after each look (every
        `analysis.interval_s`; well under a millisecond idle) passed the 600 s soak and, side by
        side, about halved the growth (bench/README.md, the soak)."""
        try:
            return self._judge(state, spec, looks, now)
        finally:
            self.release_memory()

    def _judge(self, state: RolloutState, spec: RouteSpec, looks: int, now: datetime) -> Look:
        """Read both arms' evidence and judge it (blocking)."""
        canary = spec.canary
        assert canary is not None and state.baseline and state.candidate and state.started_at
        analysis = canary.analysis
        thresholds = analysis.thresholds
        if "min_samples_rate" not in thresholds.model_fields_set:
            thresholds = thresholds.model_copy(update={"min_samples_rate": analysis.min_samples})
        wanted = set(analysis.metrics)
        sequences = len(canary.steps)
        arms = Arms(state.route, state.baseline, state.candidate)
        since = self._step_since(state)
        warnings: list[str] = []
        rule = self.config.rule_of(state.route)
        unavailable = unavailable_evidence(self.config, state.route)
        judges_probes = rule is not None and "rule_adaptation" in wanted
        judges_probes = judges_probes and "rule_adaptation" not in unavailable
        judges_reviews = "human_preference" in wanted and "human_preference" not in unavailable
        budget = rollout_budget(
            checks=rule is not None and "check_pass_rate" in wanted,
            probes=judges_probes and self.probes is not None,
            reviews=judges_reviews and self.reviews is not None,
        )
        primary, candidate = traffic_windows(
            self.windows, arms, since, corrections_per_caller=analysis.max_corrections_per_caller
        )
        if "disagreement" in wanted:
            primary, candidate = with_agreement(
                self.windows, arms, spec.agreement.mode, since, primary, candidate
            )
            if candidate.agreement[1] and not primary.noise[1]:
                warnings.append(
                    "disagreement left out: the canary's shadow pairs have no noise floor to "
                    "be judged against (set the route's noise_sample above 0)"
                )
        if "judge_score" in wanted:
            candidate = with_judge_deltas(self.windows, arms, since, candidate)
        if "findings" in wanted:
            primary, candidate = with_findings(
                self.windows, arms, analysis.findings_severity, since, primary, candidate
            )
        traffic = judge(primary, candidate, thresholds, sequences=sequences, budget=budget.traffic)
        scoped: list[tuple[str, MetricVerdict]] = [
            ("traffic", v) for v in traffic if _family(v.metric) in wanted
        ]
        spans: list[float] = [(now - since).total_seconds()] * len(scoped)
        epochs: dict[str, EpochLook] = {}
        if rule is not None and "check_pass_rate" in wanted:
            newest = current_epoch(self.windows, rule)
            order = epoch_order(dict(self.windows.checked_versions(arms, rule, state.started_at)))
            for epoch in active_epochs(self.windows, arms, rule, state.started_at):
                epoch_since = max(epoch.started_at, state.started_at)
                checked = epoch_windows(self.windows, arms, epoch, epoch_since)
                checks = (dict(checked[0].checks), dict(checked[1].checks))
                if not (checks[0] or checks[1]):
                    continue
                scope = f"rule:{epoch.rule}@{epoch.version}"
                # An epoch runs across steps, from its first answer: one sequence, with its
                # place in the series of the rollout's epochs.
                verdicts = judge(
                    *checked,
                    thresholds,
                    budget=budget.epoch(order.get(epoch.version, len(order) + 1)),
                )
                if newest is not None and epoch.version != newest.version:
                    # Clients are leaving an older version: it may still fail the candidate,
                    # but waiting for more of its evidence would hold the rollout forever.
                    verdicts = [v for v in verdicts if v.outcome is not Outcome.INCONCLUSIVE]
                scoped.extend((scope, v) for v in verdicts)
                spans.extend([(now - epoch_since).total_seconds()] * len(verdicts))
                failing = [
                    v.metric.partition(":")[2] for v in verdicts if v.outcome is Outcome.FAIL
                ]
                examples: tuple[str, ...] = ()
                if failing:
                    examples = tuple(
                        failing_examples(self.windows, arms, epoch, failing[0], epoch_since)
                    )
                epochs[scope] = EpochLook(epoch, checks, examples)
            if not epochs and (primary.requests or candidate.requests):
                warnings.append(
                    f"check_pass_rate left out: no answer of this rollout was checked against "
                    f"rule {rule} (do requests carry its version — a system prompt, or its header?)"
                )
        probe_look = None
        if judges_probes and rule is not None:
            if self.probes is None:
                warnings.append("rule_adaptation left out: this gateway reads no probe results")
            else:
                probe_look, verdicts = self._judge_probes(
                    rule, arms, state.started_at, thresholds, budget, now
                )
                if not verdicts:  # only when probes.targets leave a model out
                    warnings.append(
                        f"rule_adaptation left out: probes.targets of rule {rule} do not "
                        f"include both {arms.baseline} and {arms.candidate}"
                    )
                scoped.extend((f"{PROBE_SCOPE}{rule}", v) for v in verdicts)
                spans.extend([(now - state.started_at).total_seconds()] * len(verdicts))
        if judges_reviews:
            if self.reviews is None:
                warnings.append("human_preference left out: this gateway reads no reviews")
            else:
                reviewed = preference_window(self.reviews, self.windows, arms, state.started_at)
                verdicts = judge(ArmWindow(0, 0), reviewed, thresholds, budget=budget.reviews)
                scoped.extend((REVIEW_SCOPE, v) for v in verdicts)
                spans.extend([(now - state.started_at).total_seconds()] * len(verdicts))
        etas = [_eta(v, span) for (_, v), span in zip(scoped, spans, strict=True)]
        self.manager.store.add_verdicts(state, looks, scoped, now, etas)
        return Look(
            state.route,
            state.revision,
            tuple(scoped),
            epochs,
            tuple(etas),
            tuple(warnings),
            probes=probe_look,
        )

    def _judge_probes(
        self,
        rule: str,
        arms: Arms,
        since: datetime,
        thresholds: Thresholds,
        budget: RolloutBudget,
        now: datetime,
    ) -> tuple[ProbeLook | None, list[MetricVerdict]]:
        """`rule_adaptation` of both arms' models on `rule` since the rollout started (blocking).
        It gates the step even before its evidence exists: with no probe of either model yet,
        or too few, the verdict is inconclusive and says why — a spent probe budget with the
        moment it frees (`held: probe budget spent until 12:40Z`), else that none came yet.
        Only a rule whose `probes.targets` leave out either model is not judged (a warning:
        this configuration can never measure it)."""
        assert self.probes is not None
        spec = self.config.rules[rule].probes
        assert spec is not None  # unavailable_evidence said the rule has probes
        if spec.targets is not None and not {arms.baseline, arms.candidate} <= set(spec.targets):
            return None, []
        tallies = probe_tallies(self.probes, rule, arms, since)
        verdicts = judge(
            *adaptation_windows(self.windows, rule, arms, since, tallies),
            thresholds,
            min_adaptation=spec.min_adaptation,
            budget=budget.probes,
        )
        if not verdicts or any(v.outcome is Outcome.INCONCLUSIVE for v in verdicts):
            verdicts = self._probe_holds(
                rule, arms, spec, thresholds, budget, tallies, verdicts, now
            )
        examples: tuple[ProbeRecord, ...] = ()
        if any(v.outcome is Outcome.FAIL for v in verdicts):
            examples = tuple(stuck_examples(self.probes, rule, arms.candidate, since))
        return ProbeLook(rule, tallies, examples), verdicts

    def _probe_holds(
        self,
        rule: str,
        arms: Arms,
        spec: ProbesSpec,
        thresholds: Thresholds,
        budget: RolloutBudget,
        tallies: tuple[ProbeTally, ProbeTally],
        verdicts: list[MetricVerdict],
        now: datetime,
    ) -> list[MetricVerdict]:
        """The inconclusive `rule_adaptation` verdicts with what holds them: a spent probe
        budget (logged when it starts or its moment moves), or, with no verdict at all, one
        saying that no probe came yet."""
        assert self.probes is not None
        until = probe_budget_until(self.probes, rule, spec, (arms.baseline, arms.candidate), now)
        route = arms.route
        if until != self._budget_held.get(route) and until is not None:
            log.warning(
                "rollout %s: rule_adaptation held: probe budget spent until %s "
                "(probes.max_per_hour %d, max_usd_per_hour %s per target, across the fleet)",
                route,
                clock_text(until),
                spec.max_per_hour,
                spec.max_usd_per_hour,
            )
        self._budget_held[route] = until
        held = f"{BUDGET_HELD}{clock_text(until)}" if until else None
        if not verdicts:
            reason = held or (
                f"no scored rule-flip probe of {arms.baseline} or {arms.candidate} since the "
                f"rollout started: need {thresholds.min_samples_probes} each"
            )
            return [
                MetricVerdict(
                    "rule_adaptation",
                    Outcome.INCONCLUSIVE,
                    None,
                    None,
                    None,
                    thresholds.rule_adaptation_drop,
                    tallies[0].probes,
                    tallies[1].probes,
                    thresholds.false_rollback_rate * budget.probes,
                    reason,
                    needs=thresholds.min_samples_probes,
                )
            ]
        if held is None:
            return verdicts
        return [
            replace(v, reason=f"{held}; {v.reason}") if v.outcome is Outcome.INCONCLUSIVE else v
            for v in verdicts
        ]

    def _step_since(self, state: RolloutState) -> datetime:
        """When the current step began (blocking): its `start` or `advance` transition, so that
        a pause and resume keep the step's evidence (and its one sequence of the budget). When
        that transition is no longer among the latest 50 (an absurd number of pauses), the
        rollout's start: more evidence than the step's, which the anytime-valid bound allows."""
        assert state.started_at is not None and state.rollout_id is not None
        known = self._step_starts.get(state.route)
        if known is not None and known[:2] == (state.rollout_id, state.step):
            return known[2]
        since = step_since(state, self.manager.store.events(state.route, 50)) or state.started_at
        self._step_starts[state.route] = (state.rollout_id, state.step, since)
        return since

    def _rollback_reason(
        self,
        state: RolloutState,
        spec: RouteSpec,
        look: Look,
        failed: list[tuple[str, MetricVerdict]],
        now: datetime,
    ) -> tuple[str, Alert]:
        # A failing rule check explains a rollback best: name it first, then rule-flip probes.
        failed.sort(
            key=lambda sv: (
                not sv[1].metric.startswith("check_pass_rate"),
                not sv[1].metric.startswith("rule_adaptation"),
            )
        )
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
        elif _family(worst.metric) == "rule_adaptation" and look.probes is not None:
            check = worst.metric
            rule = look.probes.rule
            examples = tuple(p.request_id for p in look.probes.examples)
            reason = _adaptation_reason(worst, look.probes, evidence)
        else:
            check = worst.metric
            reason = f"{worst.metric} failed: {worst.reason}"
        others = [v.metric for _, v in failed[1:]]
        if others:
            reason += f" (also failing: {', '.join(others)})"
        alert_kind: AlertKind = "rule_regression" if rule is not None else "rollback"
        alert = Alert(
            kind=alert_kind,
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
            generator_url=self.manager.alert_link(alert_kind, state.route),
            rollout_id=state.rollout_id,
        )
        return reason, alert


def _adaptation_reason(
    verdict: MetricVerdict, probes: ProbeLook, evidence: dict[str, float]
) -> str:
    """`rule_adaptation failed on rule shipping: candidate follows a flipped rule 3% (2/60),
    primary 98% (59/60); e.g. request r-1 asked 150, answered 100`, with the rates added to
    `evidence`."""
    primary, candidate = probes.tallies
    evidence["primary_adaptation"] = primary.followed / primary.probes if primary.probes else 0.0
    evidence["candidate_adaptation"] = (
        candidate.followed / candidate.probes if candidate.probes else 0.0
    )
    reason = (
        f"{verdict.metric} failed on rule {probes.rule}: candidate follows a flipped rule "
        f"{evidence['candidate_adaptation']:.0%} ({candidate.followed}/{candidate.probes}), "
        f"primary {evidence['primary_adaptation']:.0%} ({primary.followed}/{primary.probes})"
    )
    if verdict.metric != "rule_adaptation":
        reason += f", below its floor ({verdict.reason})"
    if probes.examples:
        shown = "; ".join(
            f"request {p.request_id} asked {p.asked_value}, answered "
            f"{p.answered_value if p.answered_value is not None else '(not stored)'}"
            for p in probes.examples[:3]
        )
        reason += f"; e.g. {shown}"
    return reason


def _share(tally: Tally) -> float:
    return tally[0] / tally[1] if tally[1] else 0.0


def _family(metric: str) -> str:
    """The configurable metric a verdict belongs to (`check_pass_rate:x` → `check_pass_rate`)."""
    return metric.partition(":")[0]


def _eta(verdict: MetricVerdict, span_s: float) -> float | None:
    """Seconds until `verdict` has the candidate answers it needs, at the rate they came in over
    the `span_s` its evidence covers; 0 when it needs none, None when unknown or never."""
    if verdict.needs is None:
        return None
    if verdict.needs == 0:
        return 0.0
    if verdict.n_candidate == 0 or span_s <= 0:
        return None
    return round(verdict.needs * span_s / verdict.n_candidate, 1)


def _needs_text(needs: int | None, eta: float | None) -> str:
    if needs is None:
        return "its estimate is beyond the margin"
    if eta is None:
        return f"needs {needs} more canary answers; none came in yet"
    return f"needs {needs} more canary answers, about {eta:.0f}s at the current rate"
