"""The production model's guard (`routes.<name>.guard`): after a rule change opens a new epoch,
judge the model serving the route's primary arm on the new version, and alert — or switch the
route to a candidate that adapted — when it keeps the old rule (docs/rollouts.md, "The guard").

Each look at a guarded route (blocking reads on a worker thread; the decision is
`analyzers.rule_guard`, pure):

1. the rule's newest version and the one it replaced (`GuardStore.epochs`); nothing to do before
   the rule has changed, or while the route is served as arm `fallback` (switched away, or rolled
   back to its fallback: the primary is not serving, there is nothing to guard until `restore`);
2. evidence on the new version since it opened: the primary's answers (arm primary, the serving
   model) failing any check of the version; the same model's answers on the previous version; and
   the other models' answers on the new version pooled — shadows, the canary, and probes of other
   targets (`ProbeStore.tallies`: followed is compliant, stuck and other are not);
3. `guard_verdict`: regressed, clear or hold. On a regression one decision row is claimed per
   (route, rule, version) (`GuardStore.claim`, unique: a restarted gateway or another replica
   never alerts twice) and a `rule_regression` alert goes out, logged at WARNING;
4. with `on_rule_regression: switch` and other models' evidence, the candidate with the best
   measured adaptation (`choose_candidate`: probes followed on this rule plus passing shadow or
   canary answers on the new version, by the lower bound) takes the route: `RolloutManager.act`
   rolls it back to `fallback` naming that model, fenced by the revision the look was made on.
   When none qualifies yet, the alert says why and later looks of the same version try again
   (without alerting again); once switched, the row says so and the guard leaves the version.

A restored route is not switched again on the version already decided: the operator's restore
is the last word on that version; the next rule change is judged afresh.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from alerts.alert import Alert
from analyzers.rule_guard import (
    CandidateScore,
    GuardEvidence,
    GuardOutcome,
    GuardVerdict,
    choose_candidate,
    guard_verdict,
)
from analyzers.verdicts import Tally, Thresholds
from proxy.config import MirrorgateConfig, RouteSpec
from proxy.core import Action, Arm, IllegalTransition, RolloutState, serving
from proxy.gateway import OVERFLOW_VERSION
from proxy.store import AnswerTally, GuardDecision, GuardStore, ProbeStore, RuleEpochs

from .manager import RolloutManager, TransitionConflictError

log = logging.getLogger("mirrorgate.guard")

DEFAULT_INTERVAL_S = 5.0
"""How often a guarded route is looked at when neither `guard.interval_s` nor the route's
`canary.analysis.interval_s` says."""

_OTHER_ARMS = (Arm.SHADOW, Arm.CANARY)


@dataclass(frozen=True, slots=True)
class GuardLook:
    """One look at one guarded route."""

    route: str
    rule: str
    version: str
    primary: str
    """The model serving the primary arm when the look was made."""
    verdict: GuardVerdict
    action: str | None = None
    """`alerted` (this look raised the alert), `switched`, or None."""
    model: str | None = None
    """The model switched to."""
    why: str = ""
    """Why there was no switch, when a regression did not lead to one."""
    candidates: tuple[CandidateScore, ...] = ()


def interval_s(spec: RouteSpec) -> float:
    """Seconds between two looks at a guarded route."""
    if spec.guard is not None and spec.guard.interval_s is not None:
        return spec.guard.interval_s
    if spec.canary is not None:
        return spec.canary.analysis.interval_s
    return DEFAULT_INTERVAL_S


def _pooled(rows: list[AnswerTally]) -> Tally:
    return sum(r.failing for r in rows), sum(r.answers for r in rows)


class RuleGuard:
    """Guards the primary of every route with a `guard` (driven by `RolloutController.tick`, on
    the deciding replica only)."""

    def __init__(
        self,
        config: MirrorgateConfig,
        manager: RolloutManager,
        store: GuardStore,
        probes: ProbeStore,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.config = config
        self.manager = manager
        self.store = store
        self.probes = probes
        self.clock = clock
        self._decided: dict[str, GuardDecision] = {}
        """route → the decision on its newest version, once switched (nothing more to do)."""

    def routes(self) -> list[str]:
        """The guarded routes (a guard and a rule governing the route)."""
        return [
            name
            for name, spec in self.config.routes.items()
            if spec.guard is not None and self.config.rule_of(name) is not None
        ]

    def forget(self) -> None:
        """Drop what is cached (a new leader reads what the last one persisted)."""
        self._decided.clear()

    async def look(self, route: str) -> GuardLook | None:
        """Look at `route` once; None when there is nothing to judge (no rule change yet, the
        route served by a fallback, the version already switched on)."""
        spec = self.config.routes[route]
        rule = self.config.rule_of(route)
        if spec.guard is None or rule is None:
            return None
        state = self.manager.state(route)
        model, arm = serving(state, spec)
        if arm is not Arm.PRIMARY:
            return None
        epochs = await asyncio.to_thread(self.store.epochs, rule)
        if epochs is None or epochs.previous is None:
            return None
        version = epochs.newest.version
        if OVERFLOW_VERSION in (version, epochs.previous.version):
            return None
        cached = self._decided.get(route)
        if cached is not None and (cached.rule, cached.version) == (rule, version):
            log.debug("guard of %s on %s@%s: %s already", route, rule, version, cached.outcome)
            return None
        decision = await asyncio.to_thread(self.store.decision, route, rule, version)
        if decision is not None and (
            decision.outcome == "switched" or spec.guard.on_rule_regression == "alert"
        ):
            # Decided by this replica before a restart, or by another: never twice.
            log.debug("guard of %s on %s@%s: %s already", route, rule, version, decision.outcome)
            self._decided[route] = decision
            return None
        look = await asyncio.to_thread(self._judge, route, spec, rule, epochs, model, state)
        if look.verdict.outcome is not GuardOutcome.REGRESSED:
            return look
        return await self._act(look, spec, state, epochs, first=decision is None)

    # --- evidence ----------------------------------------------------------------------------

    def _others_expected(
        self, route: str, spec: RouteSpec, model: str, state: RolloutState
    ) -> bool:
        if any(s.model != model for s in spec.shadows):
            return True
        if state.active and state.candidate not in (None, model):
            return True
        rule = self.config.rule_of(route)
        probes = self.config.rules[rule].probes if rule is not None else None
        return probes is not None and any(t != model for t in probes.targets or ())

    def _thresholds(self, spec: RouteSpec) -> Thresholds:
        return spec.canary.analysis.thresholds if spec.canary is not None else Thresholds()

    def _judge(
        self,
        route: str,
        spec: RouteSpec,
        rule: str,
        epochs: RuleEpochs,
        model: str,
        state: RolloutState,
    ) -> GuardLook:
        guard = spec.guard
        assert guard is not None and epochs.previous is not None
        new, previous = epochs.newest, epochs.previous
        rows = self.store.answer_tallies(route, rule, new.version, new.started_at)
        before = self.store.answer_tallies(route, rule, previous.version, previous.started_at)

        def primary(of: list[AnswerTally]) -> Tally:
            return _pooled([r for r in of if r.arm is Arm.PRIMARY and r.target == model])

        others = [r for r in rows if r.arm in _OTHER_ARMS and r.target != model]
        probed = self.probes.tallies(rule, route=route, version=new.version)
        probe_bad = sum(t.stuck + t.other for n, t in probed.items() if n != model)
        probe_n = sum(t.probes for n, t in probed.items() if n != model)
        other_bad, other_n = _pooled(others)
        evidence = GuardEvidence(
            primary(rows),
            primary(before),
            (other_bad + probe_bad, other_n + probe_n),
            others_expected=self._others_expected(route, spec, model, state) or probe_n > 0,
        )
        verdict = guard_verdict(
            evidence, min_samples=guard.min_samples, thresholds=self._thresholds(spec)
        )
        log.debug("guard of %s on %s@%s: %s", route, rule, new.version, verdict.reason)
        return GuardLook(route, rule, new.version, model, verdict)

    def _candidates(self, look: GuardLook, spec: RouteSpec) -> dict[str, tuple[int, int]]:
        """candidate → (compliant, answers): probes on this rule and the candidate's shadow or
        canary answers on the new version (blocking)."""
        guard = spec.guard
        assert guard is not None
        names = [c for c in guard.candidates if c != look.primary]
        probed = self.probes.tallies(look.rule, route=look.route, targets=names)
        epochs = self.store.epochs(look.rule)
        rows = (
            self.store.answer_tallies(look.route, look.rule, look.version, epochs.newest.started_at)
            if epochs is not None
            else []
        )
        scored: dict[str, tuple[int, int]] = {}
        for name in names:
            tally = probed.get(name)
            compliant, answers = (tally.followed, tally.probes) if tally is not None else (0, 0)
            for r in rows:
                if r.target == name and r.arm in _OTHER_ARMS:
                    compliant += r.answers - r.failing
                    answers += r.answers
            scored[name] = (compliant, answers)
        return scored

    # --- acting ------------------------------------------------------------------------------

    async def _act(
        self,
        look: GuardLook,
        spec: RouteSpec,
        state: RolloutState,
        epochs: RuleEpochs,
        *,
        first: bool,
    ) -> GuardLook:
        guard = spec.guard
        assert guard is not None
        now = self.clock()
        v = look.verdict
        examples = await asyncio.to_thread(
            self.store.failing_requests,
            look.route,
            look.rule,
            look.version,
            arm=Arm.PRIMARY,
            target=look.primary,
            since=epochs.newest.started_at,
        )
        numbers = _numbers(v)
        record: dict[str, Any] = {
            "rule": look.rule,
            "version": look.version,
            "previous_version": epochs.previous.version if epochs.previous else None,
            "primary": look.primary,
            **numbers,
            "example_request_ids": examples,
            "reason": v.reason,
        }
        switching = guard.on_rule_regression == "switch" and v.switchable
        chosen: str | None = None
        why = ""
        scores: tuple[CandidateScore, ...] = ()
        if switching:
            candidates = await asyncio.to_thread(self._candidates, look, spec)
            chosen, listed, why = choose_candidate(
                v.against_previous.subject,
                candidates,
                min_samples=guard.min_samples,
                thresholds=self._thresholds(spec),
            )
            scores = tuple(listed)
            record["candidates"] = [
                {"name": s.name, "compliant": s.compliant, "answers": s.answers, "low": s.low}
                for s in listed
            ]
        elif guard.on_rule_regression == "switch":
            why = "no other model's evidence on the new version: the guard can only alert"
        summary = (
            f"primary {look.primary} of route {look.route} keeps the old rule {look.rule}: "
            f"{v.reason}"
        )
        if chosen is not None:
            summary += f"; switched to {why}"
        elif why:
            summary += f"; not switched: {why}"
        alert = Alert(
            kind="rule_regression",
            route=look.route,
            target=look.primary,
            severity="critical",
            summary=summary,
            starts_at=now,
            rule=look.rule,
            rule_version=look.version,
            evidence=numbers,
            example_request_ids=tuple(examples),
            generator_url=self.manager.alert_link("guard", look.route),
            rollout_id=state.rollout_id,
        )
        action: str | None = None
        if first:
            claimed = await asyncio.to_thread(
                self.store.claim,
                look.route,
                look.rule,
                look.version,
                outcome="alerted",
                reason=summary,
                evidence=record,
                now=now,
            )
            if not claimed:  # another replica (or this one before a restart) decided it
                return look
            log.warning("guard: %s", summary)
            if chosen is None and self.manager.alerts is not None:
                self.manager.alerts.notify(alert)
            action = "alerted"
        if chosen is None:
            return GuardLook(**_fields(look), action=action, why=why, candidates=scores)
        try:
            await self.manager.act(
                look.route,
                Action.ROLLBACK,
                to="fallback",
                model=chosen,
                actor="guard",
                reason=f"guard: {look.rule}@{look.version} regressed on {look.primary}; {why}",
                evidence=record,
                alert=alert,
                expect_revision=state.revision,
            )
        except (IllegalTransition, TransitionConflictError) as exc:
            log.info("guard's switch of %s not applied: %s", look.route, exc)
            return GuardLook(**_fields(look), action=action, why=str(exc), candidates=scores)
        await asyncio.to_thread(
            self.store.mark_switched, look.route, look.rule, look.version, chosen, now
        )
        self._decided[look.route] = GuardDecision(
            look.route, look.rule, look.version, "switched", chosen, summary, now
        )
        return GuardLook(**_fields(look), action="switched", model=chosen, candidates=scores)


def _fields(look: GuardLook) -> dict[str, Any]:
    return {
        "route": look.route,
        "rule": look.rule,
        "version": look.version,
        "primary": look.primary,
        "verdict": look.verdict,
    }


def _numbers(v: GuardVerdict) -> dict[str, float]:
    """The verdict's numbers, for the alert's evidence (numbers only)."""

    def rate(tally: Tally) -> float:
        return tally[0] / tally[1] if tally[1] else 0.0

    out: dict[str, float] = {
        "primary_failure_rate_new": rate(v.against_previous.subject),
        "primary_failure_rate_previous": rate(v.against_previous.baseline),
        "n_primary_new": v.against_previous.subject[1],
        "n_primary_previous": v.against_previous.baseline[1],
        "margin": v.against_previous.margin,
    }
    if v.against_previous.low is not None:
        out["low_against_previous"] = v.against_previous.low
    if v.against_others is not None:
        out["others_failure_rate_new"] = rate(v.against_others.baseline)
        out["n_others_new"] = v.against_others.baseline[1]
        if v.against_others.low is not None:
            out["low_against_others"] = v.against_others.low
    return out
