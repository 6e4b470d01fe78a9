"""The rollout state machine (pure) and sticky canary routing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import yaml

from proxy.config import GuardSpec, MirrorgateConfig, RollbackTarget, RouteSpec, parse_config
from proxy.core.records import Arm
from proxy.core.rollout_state import (
    Action,
    IllegalTransition,
    Phase,
    RolloutState,
    initial_state,
    transition,
)
from proxy.core.sampling import sampled
from proxy.gateway.routing import RouteTable

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def config(sticky: str = "header:x-user-id", fallback: str | None = "safe") -> MirrorgateConfig:
    model = {"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
    route: dict[str, object] = {
        "primary": "prod",
        "canary": {"model": "cand", "steps": [10, 50, 100], "sticky": sticky},
    }
    if fallback:
        route["fallback"] = fallback
    doc = {
        "models": {"prod": model, "cand": model, "safe": model},
        "routes": {"bot": route, "plain": {"primary": "prod"}},
    }
    return parse_config(yaml.safe_dump(doc), env={})


SPEC = config().routes["bot"]


def act(
    state: RolloutState, action: Action, minutes: int = 0, to: RollbackTarget | None = None
) -> RolloutState:
    change = transition(
        state,
        action,
        SPEC,
        now=T0 + timedelta(minutes=minutes),
        reason=action.value,
        actor="t",
        target=to,
    )
    return change.after


def with_canary(spec: RouteSpec, **changes: object) -> RouteSpec:
    """`spec` with its canary's settings changed."""
    assert spec.canary is not None
    return spec.model_copy(update={"canary": spec.canary.model_copy(update=changes)})


def test_a_route_with_a_canary_starts_pending_and_one_without_is_idle() -> None:
    assert initial_state("bot", SPEC).phase is Phase.PENDING
    assert initial_state("plain", config().routes["plain"]).phase is None


def test_start_sends_the_first_step_to_the_candidate_with_a_fresh_salt() -> None:
    state = act(initial_state("bot", SPEC), Action.START)
    assert (state.phase, state.step, state.weight) == (Phase.PROGRESSING, 0, 10.0)
    assert (state.candidate, state.baseline, state.revision) == ("cand", "prod", 1)
    assert state.salt and state.started_at == T0 == state.step_started_at
    again = act(act(state, Action.ROLLBACK), Action.START, minutes=5)
    assert again.salt != state.salt  # the next rollout draws its own users
    assert again.override is None  # a new start ends the rollback's safe mode


def test_advance_climbs_every_step_and_a_100_percent_step_is_promotion() -> None:
    state = act(initial_state("bot", SPEC), Action.START)
    state = act(state, Action.ADVANCE, 1)
    assert (state.step, state.weight, state.step_started_at) == (1, 50.0, T0 + timedelta(1 / 1440))
    state = act(state, Action.ADVANCE, 2)  # into the 100 % step: that is promotion
    assert state.phase is Phase.PROMOTED
    assert (state.override, state.override_arm, state.weight) == ("cand", Arm.PRIMARY, 0.0)


def test_pause_and_resume_keep_the_step_and_restart_its_clock() -> None:
    state = act(act(initial_state("bot", SPEC), Action.START), Action.ADVANCE, 1)
    paused = act(state, Action.PAUSE, 2)
    assert (paused.phase, paused.step, paused.weight) == (Phase.PAUSED, 1, 50.0)
    resumed = act(paused, Action.RESUME, 7)
    assert resumed.phase is Phase.PROGRESSING
    assert resumed.step_started_at == T0 + timedelta(minutes=7)


@pytest.mark.parametrize(
    ("setup", "action"),
    [
        ([Action.START], Action.START),
        ([Action.START, Action.PAUSE], Action.PAUSE),
        ([Action.START], Action.RESUME),
        ([Action.START, Action.PROMOTE], Action.PROMOTE),
        ([Action.ABORT], Action.ABORT),
        ([Action.ROLLBACK], Action.ROLLBACK),
    ],
)
def test_asking_for_the_current_phase_changes_nothing(setup: list[Action], action: Action) -> None:
    state = initial_state("bot", SPEC)
    for step in setup:
        state = act(state, step)
    change = transition(state, action, SPEC, now=T0, reason="again", actor="t")
    assert change.changed is False and change.after is state


@pytest.mark.parametrize(
    ("setup", "action", "phase"),
    [
        ([], Action.PAUSE, Phase.PENDING),
        ([], Action.RESUME, Phase.PENDING),
        ([], Action.PROMOTE, Phase.PENDING),
        ([Action.START, Action.PAUSE], Action.START, Phase.PAUSED),
        ([Action.START, Action.PROMOTE], Action.ABORT, Phase.PROMOTED),
        ([Action.ROLLBACK], Action.PAUSE, Phase.ROLLED_BACK),
        ([Action.START, Action.PAUSE], Action.ADVANCE, Phase.PAUSED),
    ],
)
def test_illegal_transitions_name_the_current_phase(
    setup: list[Action], action: Action, phase: Phase
) -> None:
    state = initial_state("bot", SPEC)
    for step in setup:
        state = act(state, step)
    with pytest.raises(IllegalTransition) as caught:
        transition(state, action, SPEC, now=T0, reason="", actor="t")
    assert caught.value.phase is phase
    assert phase.value in str(caught.value)


@pytest.mark.parametrize("setup", [[Action.START], [Action.START, Action.PAUSE]])
def test_a_rollback_keeps_the_primary_and_sets_the_canary_to_zero(setup: list[Action]) -> None:
    state = initial_state("bot", SPEC)
    for step in setup:
        state = act(state, step)
    rolled = act(state, Action.ROLLBACK)
    assert (rolled.phase, rolled.rolled_back_to) == (Phase.ROLLED_BACK, "primary")
    assert (rolled.weight, rolled.step, rolled.override, rolled.override_arm) == (
        0.0,
        -1,
        None,
        Arm.PRIMARY,
    )
    live = _table_with(rolled, config()).get("bot")
    assert live is not None and live.canary is None
    assert (live.primary, live.primary_arm, live.fallback) == ("prod", Arm.PRIMARY, "safe")


def test_a_rollback_after_a_promotion_gives_the_route_back_to_its_baseline() -> None:
    promoted = act(act(initial_state("bot", SPEC), Action.START), Action.PROMOTE)
    rolled = act(promoted, Action.ROLLBACK)
    assert (rolled.rolled_back_to, rolled.override, rolled.override_arm) == (
        "primary",
        None,
        Arm.PRIMARY,
    )
    # A baseline that was itself a promoted candidate stays the route's primary.
    earlier = RolloutState("bot", revision=3, phase=Phase.PROMOTED, override="v1", baseline="v1")
    second = act(act(earlier, Action.START), Action.PROMOTE)
    assert act(second, Action.ROLLBACK).override == "v1"


@pytest.mark.parametrize("setup", [[Action.START], [Action.START, Action.PROMOTE], []])
def test_a_rollback_to_fallback_sends_the_whole_route_there(setup: list[Action]) -> None:
    state = initial_state("bot", SPEC)
    for step in setup:
        state = act(state, step)
    rolled = act(state, Action.ROLLBACK, to="fallback")
    assert (rolled.phase, rolled.rolled_back_to, rolled.weight) == (
        Phase.ROLLED_BACK,
        "fallback",
        0.0,
    )
    assert (rolled.override, rolled.override_arm) == ("safe", Arm.FALLBACK)
    plan = _table_with(rolled, config()).plan("bot", [(b"x-user-id", b"anyone")], {}, "r")
    assert plan is not None and (plan.target, plan.arm) == ("safe", Arm.FALLBACK)


def test_rollback_to_follows_the_config_and_an_explicit_target_wins() -> None:
    to_fallback = with_canary(SPEC, rollback_to="fallback")
    started = transition(
        initial_state("bot", to_fallback), Action.START, to_fallback, now=T0, reason="", actor="t"
    ).after
    by_config = transition(started, Action.ROLLBACK, to_fallback, now=T0, reason="", actor="t")
    assert by_config.after.rolled_back_to == "fallback"
    explicit = transition(
        started, Action.ROLLBACK, to_fallback, now=T0, reason="", actor="t", target="primary"
    )
    assert explicit.after.rolled_back_to == "primary"


def test_a_rollback_to_a_missing_fallback_is_refused_not_sent_to_the_primary() -> None:
    plain = config(fallback=None).routes["bot"]
    started = transition(
        initial_state("bot", plain), Action.START, plain, now=T0, reason="", actor="t"
    ).after
    with pytest.raises(IllegalTransition, match="no fallback") as caught:
        transition(started, Action.ROLLBACK, plain, now=T0, reason="", actor="t", target="fallback")
    assert caught.value.phase is Phase.PROGRESSING
    primary = transition(started, Action.ROLLBACK, plain, now=T0, reason="", actor="t")
    assert (primary.after.rolled_back_to, primary.after.override) == ("primary", None)


def test_a_rollback_to_primary_can_escalate_to_fallback_and_back_is_a_restore() -> None:
    rolled = act(act(initial_state("bot", SPEC), Action.START), Action.ROLLBACK)
    again = transition(
        rolled, Action.ROLLBACK, SPEC, now=T0, reason="", actor="t", target="primary"
    )
    assert again.changed is False
    left = act(rolled, Action.ROLLBACK, to="fallback")
    assert (left.rolled_back_to, left.override) == ("fallback", "safe")
    assert (
        transition(
            left, Action.ROLLBACK, SPEC, now=T0, reason="", actor="t", target="fallback"
        ).changed
        is False
    )
    with pytest.raises(IllegalTransition, match="restore"):
        transition(left, Action.ROLLBACK, SPEC, now=T0, reason="", actor="t", target="primary")
    restored = act(left, Action.RESTORE)
    assert (restored.phase, restored.override, restored.rolled_back_to) == (
        Phase.PENDING,
        None,
        None,
    )


def test_only_a_rollback_takes_a_target() -> None:
    with pytest.raises(IllegalTransition, match="only a rollback"):
        transition(
            initial_state("bot", SPEC),
            Action.START,
            SPEC,
            now=T0,
            reason="",
            actor="t",
            target="primary",
        )


def test_a_new_rollout_after_a_rollback_starts_from_the_baseline() -> None:
    targets: tuple[RollbackTarget, ...] = ("primary", "fallback")
    for to in targets:
        rolled = act(act(initial_state("bot", SPEC), Action.START), Action.ROLLBACK, to=to)
        again = act(rolled, Action.START, minutes=5)
        assert (again.phase, again.baseline, again.override, again.rolled_back_to) == (
            Phase.PROGRESSING,
            "prod",
            None,
            None,
        )
        assert again.rollout_id != rolled.rollout_id


def test_a_route_without_canary_cannot_start_but_can_be_rolled_back() -> None:
    spec = config().routes["plain"]
    with pytest.raises(IllegalTransition, match="no canary"):
        transition(initial_state("plain", spec), Action.START, spec, now=T0, reason="", actor="t")
    change = transition(
        initial_state("plain", spec), Action.ROLLBACK, spec, now=T0, reason="", actor="t"
    )
    assert change.after.phase is Phase.ROLLED_BACK


def _table_with(state: RolloutState, cfg: MirrorgateConfig) -> RouteTable:
    table = RouteTable(cfg)
    table.apply(state)
    return table


def test_canary_assignment_is_the_salted_hash_of_the_sticky_header() -> None:
    cfg = config()
    state = act(act(initial_state("bot", SPEC), Action.START), Action.ADVANCE)  # 50 %
    table = _table_with(state, cfg)
    users = [f"user-{i}" for i in range(2000)]
    arms = {
        u: table.plan("bot", [(b"x-user-id", u.encode())], {}, request_id=f"r-{u}").arm
        for u in users
    }
    expected = {u for u in users if sampled(u, state.salt, 0.5)}
    assert {u for u, arm in arms.items() if arm is Arm.CANARY} == expected
    assert 900 < len(expected) < 1100
    # Sticky: the same user gets the same arm on every request (and on every replica: no state).
    other_replica = _table_with(state, cfg)
    for u in users[:200]:
        for n in range(3):
            plan = other_replica.plan("bot", [(b"x-user-id", u.encode())], {}, request_id=f"{n}")
            assert plan.arm is arms[u]
    canary_plan = table.plan("bot", [(b"x-user-id", next(iter(expected)).encode())], {}, "r")
    assert canary_plan is not None and canary_plan.target == "cand"


def test_body_sticky_key_and_requests_without_one() -> None:
    cfg = config(sticky="body:metadata.user")
    state = act(initial_state("bot", cfg.routes["bot"]), Action.START)  # 10 %
    table = _table_with(state, cfg)
    chosen = [
        table.plan("bot", [], {"metadata": {"user": f"u{i}"}}, request_id="same").arm
        for i in range(3000)
    ]
    expected = sum(sampled(f"u{i}", state.salt, 0.1) for i in range(3000))
    assert chosen.count(Arm.CANARY) == expected
    # No key in the request: each request is drawn on its own (by its request id).
    keyless = [table.plan("bot", [], {}, request_id=f"req-{i}").arm for i in range(3000)]
    assert keyless.count(Arm.CANARY) == sum(
        sampled(f"req-{i}", state.salt, 0.1) for i in range(3000)
    )


def test_route_table_follows_rollback_and_promotion() -> None:
    cfg = config()
    started = act(initial_state("bot", SPEC), Action.START)
    table = _table_with(act(started, Action.ROLLBACK), cfg)
    plan = table.plan("bot", [(b"x-user-id", b"anyone")], {}, "r")
    assert plan is not None and (plan.target, plan.arm) == ("prod", Arm.PRIMARY)
    table.apply(act(started, Action.ROLLBACK, to="fallback"))
    plan = table.plan("bot", [(b"x-user-id", b"anyone")], {}, "r")
    assert plan is not None and (plan.target, plan.arm) == ("safe", Arm.FALLBACK)
    table.apply(act(started, Action.PROMOTE))
    plan = table.plan("bot", [], {}, "r")
    assert plan is not None and (plan.target, plan.arm) == ("cand", Arm.PRIMARY)
    state = table.get("bot")
    assert state is not None and state.fallback == "safe"


def test_advance_past_the_last_step_promotes() -> None:
    spec = (
        config()
        .routes["bot"]
        .model_copy(
            update={"canary": config().routes["bot"].canary.model_copy(update={"steps": [20, 60]})}  # type: ignore[union-attr]
        )
    )
    state = transition(initial_state("bot", spec), Action.START, spec, now=T0, reason="", actor="t")
    state = transition(state.after, Action.ADVANCE, spec, now=T0, reason="", actor="t")
    assert (state.after.phase, state.after.weight) == (Phase.PROGRESSING, 60.0)
    state = transition(state.after, Action.ADVANCE, spec, now=T0, reason="", actor="t")
    assert state.after.phase is Phase.PROMOTED


@pytest.mark.parametrize(
    "setup",
    [
        [Action.ROLLBACK],
        [Action.START, Action.ROLLBACK],
        [Action.START, Action.PROMOTE],
        [Action.ABORT],
    ],
)
def test_restore_gives_the_route_back_to_its_config_primary(setup: list[Action]) -> None:
    state = initial_state("bot", SPEC)
    for step in setup:
        state = act(state, step)
    restored = act(state, Action.RESTORE)
    assert (restored.phase, restored.override, restored.weight) == (Phase.PENDING, None, 0.0)
    table = _table_with(restored, config())
    plan = table.plan("bot", [], {}, "r")
    assert plan is not None and (plan.target, plan.arm) == ("prod", Arm.PRIMARY)
    again = transition(restored, Action.RESTORE, SPEC, now=T0, reason="", actor="t")
    assert again.changed is False


def test_restore_refuses_a_running_rollout_and_idles_a_plain_route() -> None:
    running = act(initial_state("bot", SPEC), Action.START)
    with pytest.raises(IllegalTransition, match="running"):
        transition(running, Action.RESTORE, SPEC, now=T0, reason="", actor="t")
    plain = config().routes["plain"]
    rolled = transition(
        initial_state("plain", plain), Action.ROLLBACK, plain, now=T0, reason="", actor="t"
    )
    back = transition(rolled.after, Action.RESTORE, plain, now=T0, reason="", actor="t").after
    assert (back.phase, back.override) == (None, None)


def test_a_canary_removed_from_the_config_stops_taking_traffic() -> None:
    state = act(initial_state("bot", SPEC), Action.START)
    cfg = config()
    without = cfg.model_copy(
        update={
            "routes": {**cfg.routes, "bot": cfg.routes["bot"].model_copy(update={"canary": None})}
        }
    )
    table = RouteTable(without)
    table.apply(state)
    arms = {table.plan("bot", [], {}, f"r{i}").arm for i in range(200)}  # type: ignore[union-attr]
    assert arms == {Arm.PRIMARY}


GUARDED = SPEC.model_copy(
    update={"guard": GuardSpec(on_rule_regression="switch", candidates=["cand", "other"])}
)


def guard_switch(state: RolloutState, model: str, spec: RouteSpec = GUARDED) -> RolloutState:
    return transition(
        state, Action.ROLLBACK, spec, now=T0, reason="guard", actor="guard",
        target="fallback", model=model,
    ).after  # fmt: skip


@pytest.mark.parametrize("setup", [[], [Action.START], [Action.START, Action.PAUSE]])
def test_a_rollback_to_fallback_may_name_a_guard_candidate_that_serves(
    setup: list[Action],
) -> None:
    state = initial_state("bot", GUARDED)
    for action in setup:
        state = act(state, action)
    after = guard_switch(state, "cand")
    assert (after.phase, after.override, after.override_arm) == (
        Phase.ROLLED_BACK, "cand", Arm.FALLBACK,
    )  # fmt: skip
    assert after.rolled_back_to == "fallback" and after.weight == 0.0 and not after.active
    # The same switch again changes nothing; another candidate is a new transition.
    again = transition(
        after, Action.ROLLBACK, GUARDED, now=T0, reason="r", actor="guard",
        target="fallback", model="cand",
    )  # fmt: skip
    assert not again.changed
    assert guard_switch(after, "other").override == "other"
    restored = act(after, Action.RESTORE)
    assert (restored.phase, restored.override, restored.override_arm) == (
        Phase.PENDING, None, Arm.PRIMARY,
    )  # fmt: skip


def test_a_named_model_must_be_configured_for_the_route_and_only_with_fallback() -> None:
    state = initial_state("bot", GUARDED)
    with pytest.raises(IllegalTransition, match="neither the route's fallback nor a guard"):
        guard_switch(state, "prod")
    with pytest.raises(IllegalTransition, match="only a rollback to the fallback"):
        transition(
            state, Action.ROLLBACK, GUARDED, now=T0, reason="r", actor="guard",
            target="primary", model="cand",
        )  # fmt: skip
    with pytest.raises(IllegalTransition, match="only a rollback to the fallback"):
        transition(state, Action.START, GUARDED, now=T0, reason="r", actor="t", model="cand")
    # The route's own fallback may be named (it is what a plain rollback to fallback serves).
    assert guard_switch(state, "safe", SPEC).override == "safe"


def test_the_route_table_serves_the_named_model_as_fallback() -> None:
    cfg = config()
    table = RouteTable(cfg)
    table.apply(guard_switch(initial_state("bot", GUARDED), "cand"))
    plan = table.plan("bot")
    assert plan is not None and (plan.target, plan.arm) == ("cand", Arm.FALLBACK)
