"""The rollout state machine of one route (pure: a state and an action in, the next state out).

Phases (docs/rollouts.md), per route::

    pending ──start──► progressing(step k) ──advance──► … ──advance (last step)──► promoted
                          │        ▲
                        pause    resume
                          ▼        │
                          paused ──┘
    progressing | paused ──promote──► promoted        (the candidate becomes the route's primary)
    pending | progressing | paused ──abort──► aborted (canary withdrawn; the primary is unchanged)
    any phase ──rollback──► rolled_back               (to `primary` or to `fallback`, below)
    promoted | rolled_back | aborted ──restore──► pending (or idle)   (the config's primary again)

A rollback has a target (`RollbackTarget`): the action's own, else the route's
`canary.rollback_to` (default `primary`; `primary` for a route without a canary).

- `primary`: the canary's weight goes to 0 and its traffic returns to the baseline, the primary
  the rollout started from (after a promotion: the model that served before it). The route's
  `fallback` stays what it was, the retry target when the primary fails before any byte.
- `fallback`: the primary itself is left: every request goes to the route's `fallback` (served
  as arm `fallback`). A route without a fallback refuses it (`IllegalTransition`).

A route rolled back to `primary` can still be rolled back to `fallback` (the primary must be left
too); the way back from `fallback` is `restore`. A rollback to `fallback` may name another model
to serve as the fallback arm (`model`: the guard's switch to one of `guard.candidates`).
`RolloutState.rolled_back_to` says which kind of rollback the route is in; it is derived from
the persisted phase and override arm.

`aborted` and `restore` extend the contract's lists: an operator withdrawing a canary is not a
rollback, and after a rollback someone must be able to give the route back to its configured
primary. A route with a canary in its config and no rollout yet is `pending`; one without is
`None` (idle) until it is rolled back.

A step of 100 % is promotion: the judge cannot compare a canary that has all the traffic with a
primary that has none, so advancing into it promotes.

Every action is idempotent: asking for the phase the route is already in changes nothing
(`Transition.changed` is False). An action that makes no sense in the current phase raises
`IllegalTransition`, which names the phase (the admin API answers 409).

Promotion and a rollback to `fallback` *override* the config's primary in the live route table
(a rollback to `primary` keeps or restores the baseline's override). A promotion's override stays
until `rollback` or `restore`; a rollback's until `start` or `restore`. Overrides
are persisted: they survive restarts and config edits (status shows them next to the config's
primary).
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, replace
from datetime import datetime

from proxy.config import RollbackTarget, RouteSpec

from .records import Arm


class Phase(enum.StrEnum):
    PENDING = "pending"
    PROGRESSING = "progressing"
    PAUSED = "paused"
    PROMOTED = "promoted"
    ROLLED_BACK = "rolled_back"
    ABORTED = "aborted"


ACTIVE = frozenset({Phase.PROGRESSING, Phase.PAUSED})
"""Phases in which the canary takes traffic and the judge looks at it."""


class Action(enum.StrEnum):
    START = "start"
    PAUSE = "pause"
    RESUME = "resume"
    PROMOTE = "promote"
    ABORT = "abort"
    ROLLBACK = "rollback"
    RESTORE = "restore"
    """Back to the config's primary after a promotion, rollback or abort (clears overrides)."""
    ADVANCE = "advance"
    """The judge's: the next step, or promotion after the last one (not on the admin API)."""


OPERATOR_ACTIONS = frozenset(a for a in Action if a is not Action.ADVANCE)


class IllegalTransition(Exception):
    """The action is not possible in the route's current phase."""

    def __init__(self, route: str, action: Action, phase: Phase | None, why: str) -> None:
        super().__init__(f"cannot {action.value} route '{route}' while {phase or 'idle'}: {why}")
        self.route = route
        self.action = action
        self.phase = phase


@dataclass(frozen=True, slots=True)
class RolloutState:
    """One route's rollout and live-table override, as persisted (one row per route)."""

    route: str
    revision: int = 0
    """Bumped by every transition; 0 = never persisted. Writers compare-and-swap on it."""
    phase: Phase | None = None
    rollout_id: str | None = None
    candidate: str | None = None
    baseline: str | None = None
    """The model serving the primary arm when the rollout started (what the canary is judged
    against)."""
    step: int = -1
    """Index into the canary's steps; -1 outside progressing/paused."""
    weight: float = 0.0
    """Percent of live traffic the canary gets now."""
    salt: str = ""
    """Sticky assignment salt, new per rollout, so each rollout draws its own users."""
    override: str | None = None
    """Model serving the route instead of the config's primary (after a promotion or rollback)."""
    override_arm: Arm = Arm.PRIMARY
    """The arm the override serves as: primary (promoted candidate, baseline) or fallback (after a
    rollback to the fallback)."""
    reason: str = ""
    actor: str = ""
    """Who made the last transition: `operator`, `judge`, `alertmanager`."""
    changed_at: datetime | None = None
    started_at: datetime | None = None
    """When the rollout entered progressing (its analysis window starts here)."""
    step_started_at: datetime | None = None
    """When the current step began (or the rollout resumed): steps advance from here."""

    @property
    def active(self) -> bool:
        return self.phase in ACTIVE and self.weight > 0 and self.candidate is not None

    @property
    def rolled_back_to(self) -> RollbackTarget | None:
        """Where a rolled-back route's traffic went: `primary` (the baseline serves, canary at
        0 %) or `fallback` (the route's fallback serves everything); None unless rolled back."""
        if self.phase is not Phase.ROLLED_BACK:
            return None
        return "fallback" if self.override_arm is Arm.FALLBACK else "primary"


@dataclass(frozen=True, slots=True)
class DeciderMemory:
    """What the rollout decider carries from one look at a rollout to the next, persisted with the
    verdicts so that a restart or another replica's takeover resumes the same decision."""

    rollout_id: str
    looks: int = 0
    """Looks taken at this rollout (every replica's)."""
    failures: int = 0
    """Consecutive looks with a failing metric (`failure_limit` of them roll back)."""
    held_step: int | None = None
    """The step already warned about for holding past `max_hold_s` (one warning per step)."""
    warnings: tuple[str, ...] = ()
    """Metrics of the last look left out because this configuration cannot evaluate them."""


@dataclass(frozen=True, slots=True)
class Transition:
    before: RolloutState
    after: RolloutState
    action: Action
    changed: bool


def initial_state(route: str, spec: RouteSpec) -> RolloutState:
    """A route never persisted: pending if it has a canary configured, else idle."""
    if spec.canary is None:
        return RolloutState(route)
    return RolloutState(route, phase=Phase.PENDING, candidate=spec.canary.model)


def rollback_target(spec: RouteSpec, to: RollbackTarget | None = None) -> RollbackTarget:
    """Where a rollback of a route with `spec` goes: `to` if given, else the canary's
    `rollback_to`, else `primary`."""
    if to is not None:
        return to
    return spec.canary.rollback_to if spec.canary is not None else "primary"


def serving(state: RolloutState, spec: RouteSpec) -> tuple[str, Arm]:
    """The model and arm that serve the route's non-canary traffic."""
    if state.override is not None:
        return state.override, state.override_arm
    return spec.primary, Arm.PRIMARY


def transition(
    state: RolloutState,
    action: Action,
    spec: RouteSpec,
    *,
    now: datetime,
    reason: str,
    actor: str,
    target: RollbackTarget | None = None,
    model: str | None = None,
) -> Transition:
    """The state after `action`. Raises `IllegalTransition` when the phase does not allow it.

    `target` is a rollback's (`rollback_target` fills it in from the config when None); other
    actions refuse one.

    `model`: a rollback to `fallback` may name the model that serves the route instead of its
    `fallback` (the guard's switch): it must be one the route's config names for that, its
    `fallback` or one of its `guard.candidates`. Served as arm `fallback`, undone by `restore`
    like any rollback to the fallback. Other actions and targets refuse one."""
    phase = state.phase

    def illegal(why: str) -> IllegalTransition:
        return IllegalTransition(state.route, action, phase, why)

    def same() -> Transition:
        return Transition(state, state, action, changed=False)

    def to(**changes: object) -> Transition:
        after = replace(
            state,
            revision=state.revision + 1,
            reason=reason,
            actor=actor,
            changed_at=now,
            **changes,  # type: ignore[arg-type]
        )
        return Transition(state, after, action, changed=True)

    stopped = {"step": -1, "weight": 0.0, "step_started_at": None}
    if target is not None and action is not Action.ROLLBACK:
        raise illegal("only a rollback has a target")
    if model is not None:
        if action is not Action.ROLLBACK or rollback_target(spec, target) != "fallback":
            raise illegal("only a rollback to the fallback names the model that serves")
        allowed = {spec.fallback, *(spec.guard.candidates if spec.guard is not None else ())}
        if model not in allowed:
            raise illegal(f"'{model}' is neither the route's fallback nor a guard candidate")
    if action is Action.START:
        canary = spec.canary
        if canary is None:
            raise illegal("the route has no canary in its config")
        if phase in ACTIVE:
            if phase is Phase.PAUSED:
                raise illegal("the rollout is paused: resume it")
            return same()
        override = state.override if state.override_arm is Arm.PRIMARY else None
        baseline = override or spec.primary
        if canary.model == baseline:
            raise illegal(f"'{canary.model}' already serves the route as its primary")
        rollout_id = hashlib.blake2b(
            f"{state.route}\x00{state.revision}\x00{now.isoformat()}".encode(), digest_size=8
        ).hexdigest()
        return to(
            phase=Phase.PROGRESSING,
            rollout_id=rollout_id,
            candidate=canary.model,
            baseline=baseline,
            step=0,
            weight=float(canary.steps[0]),
            salt=rollout_id,
            override=override,
            override_arm=Arm.PRIMARY,
            started_at=now,
            step_started_at=now,
        )
    if action is Action.PAUSE:
        if phase is Phase.PAUSED:
            return same()
        if phase is not Phase.PROGRESSING:
            raise illegal("only a progressing rollout can pause")
        return to(phase=Phase.PAUSED)
    if action is Action.RESUME:
        if phase is Phase.PROGRESSING:
            return same()
        if phase is not Phase.PAUSED:
            raise illegal("only a paused rollout can resume")
        return to(phase=Phase.PROGRESSING, step_started_at=now)
    if action is Action.PROMOTE:
        if phase is Phase.PROMOTED:
            return same()
        if phase not in ACTIVE:
            raise illegal("only a progressing or paused rollout can be promoted")
        return to(
            phase=Phase.PROMOTED, override=state.candidate, override_arm=Arm.PRIMARY, **stopped
        )
    if action is Action.ABORT:
        if phase is Phase.ABORTED:
            return same()
        if phase not in (*ACTIVE, Phase.PENDING):
            raise illegal("only a pending, progressing or paused rollout can be aborted")
        return to(phase=Phase.ABORTED, **stopped)
    if action is Action.ROLLBACK:
        target = rollback_target(spec, target)
        serves = model or spec.fallback
        if state.rolled_back_to == target and (model is None or state.override == model):
            return same()
        if target == "fallback":
            if serves is None:
                raise illegal("the route has no fallback to roll back to")
            return to(
                phase=Phase.ROLLED_BACK,
                override=serves,
                override_arm=Arm.FALLBACK,
                **stopped,
            )
        if phase is Phase.ROLLED_BACK:
            raise illegal("the route is rolled back to its fallback: restore it to its primary")
        override = state.override
        if phase is Phase.PROMOTED:  # the candidate serves: give the route back to the baseline
            override = state.baseline if state.baseline != spec.primary else None
        return to(phase=Phase.ROLLED_BACK, override=override, override_arm=Arm.PRIMARY, **stopped)
    if action is Action.ADVANCE:
        if phase is not Phase.PROGRESSING or spec.canary is None:
            raise illegal("only a progressing rollout advances")
        steps = spec.canary.steps
        if state.step + 1 >= len(steps) or steps[state.step + 1] >= 100:
            return to(
                phase=Phase.PROMOTED, override=state.candidate, override_arm=Arm.PRIMARY, **stopped
            )
        return to(step=state.step + 1, weight=float(steps[state.step + 1]), step_started_at=now)
    if action is Action.RESTORE:
        if phase in (None, Phase.PENDING) and state.override is None:
            return same()
        if phase in ACTIVE:
            raise illegal("a rollout is running: abort, promote or roll it back first")
        return to(
            phase=Phase.PENDING if spec.canary is not None else None,
            candidate=spec.canary.model if spec.canary is not None else None,
            override=None,
            override_arm=Arm.PRIMARY,
            **stopped,
        )
    raise illegal("unknown action")  # pragma: no cover - Action is a closed enum
