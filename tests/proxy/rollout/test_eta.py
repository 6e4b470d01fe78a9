"""A running rollout's forecast: the step's time from what its metrics need, one that does not
jump up once a minimum sample is reached, and what holds the step named."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from proxy.config import CanarySpec
from proxy.core.rollout_state import Phase, RolloutState
from proxy.rollout.eta import rollout_eta, step_since
from proxy.rollout.plan import RolloutPlan, StepPlan

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CANARY = CanarySpec(model="cand", steps=[10, 50], step_interval_s=60, max_hold_s=3600)
PLAN = RolloutPlan(
    "bot",
    2.0,
    (
        StepPlan(10, 0.2, {"error_rate": 320}, 2000.0, "error_rate", 3000.0, 1600.0),
        StepPlan(50, 1.0, {"error_rate": 400}, 500.0, "error_rate", 700.0, 400.0),
    ),
    2500.0,
    (),
    total_p90_s=3700.0,
)


def state(phase: Phase = Phase.PROGRESSING) -> RolloutState:
    return RolloutState(
        "bot", 1, phase, "r1", "cand", "prod", 0, 10.0, started_at=START, step_started_at=START
    )


def verdict(**fields: Any) -> dict[str, Any]:
    return {"rollout_id": "r1", "look": 3, "metric": "error_rate", "verdict": "inconclusive",
            "reason": "", "needs": 0, "n_candidate": 0, "eta_s": None} | fields  # fmt: skip


def test_below_the_minimum_the_eta_already_counts_what_is_needed_beyond_it() -> None:
    # 10 answers in 50 s (0.2/s): the minimum wants 40 more, the plan 310 more.
    early = rollout_eta(
        state(), CANARY,
        [verdict(reason="too few samples: 90 primary, 10 candidate, need 50 each", needs=40,
                 n_candidate=10)],
        PLAN, START, START + timedelta(seconds=50),
    )  # fmt: skip
    assert early is not None and early.step_s == 310 / 0.2
    # Past the minimum the judge's own needs take over: 60 answers in 300 s, 260 more.
    later = rollout_eta(
        state(), CANARY, [verdict(needs=260, n_candidate=60, eta_s=1300.0)], PLAN, START,
        START + timedelta(seconds=300),
    )  # fmt: skip
    assert later is not None and later.step_s is not None
    assert later.step_s <= early.step_s - 250  # it went down by about the time that passed
    assert later.held_by is not None and later.held_by.name == "error_rate"
    # Promotion: the rest of this step, then the plan's later step (median; p90 scaled).
    assert later.promotion_s == later.step_s + 500.0
    assert later.promotion_p90_s == later.step_s * 1.5 + 700.0
    assert later.summary().startswith("this step passes in ~22 min, promotion in ~30 min")


def test_a_spent_probe_budget_holds_the_step_until_it_frees() -> None:
    until = START + timedelta(minutes=40)
    eta = rollout_eta(
        state(), CANARY,
        [verdict(metric="rule_adaptation", reason="held: probe budget spent until 12:40Z",
                 needs=30)],
        PLAN, START, START + timedelta(minutes=10), probe_until=until,
    )  # fmt: skip
    assert eta is not None and eta.held_by is not None
    assert (eta.held_by.name, eta.held_by.until) == ("probe_budget", until)
    assert eta.step_s is not None and eta.step_s >= 30 * 60
    assert "held by probe budget spent until 12:40Z" in eta.summary()


def test_a_metric_beyond_its_margin_holds_until_max_hold_and_a_pause_until_resumed() -> None:
    stuck = rollout_eta(
        state(), CANARY, [verdict(needs=None, n_candidate=400)], PLAN, START,
        START + timedelta(minutes=5),
    )  # fmt: skip
    assert stuck is not None and stuck.step_s is None and stuck.promotion_s is None
    assert stuck.held_by is not None and stuck.held_by.name == "max_hold"
    assert stuck.held_by.until == START + timedelta(hours=1)
    paused = rollout_eta(state(Phase.PAUSED), CANARY, [], PLAN, START, START)
    assert paused is not None and paused.held_by is not None and paused.held_by.name == "paused"


def test_every_metric_passing_waits_only_for_the_step_interval() -> None:
    eta = rollout_eta(
        state(), CANARY, [verdict(verdict="pass")], PLAN, START, START + timedelta(seconds=20)
    )
    assert eta is not None and eta.step_s == 40.0
    assert eta.held_by is not None and eta.held_by.name == "step_interval"


def test_a_steps_evidence_begins_at_its_start_or_advance_not_at_a_resume() -> None:
    events = [
        {"rollout_id": "r1", "action": "resume", "at": (START + timedelta(minutes=9)).isoformat()},
        {"rollout_id": "r1", "action": "pause", "at": (START + timedelta(minutes=8)).isoformat()},
        {"rollout_id": "r1", "action": "advance", "at": (START + timedelta(minutes=5)).isoformat()},
        {"rollout_id": "r1", "action": "start", "at": START.isoformat()},
    ]
    assert step_since(state(), events) == START + timedelta(minutes=5)
    assert step_since(state(), []) == START
