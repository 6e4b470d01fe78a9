"""The experiments' decider: a broken split is flagged (gauge, event, alert, once), the decision
is persisted in words and numbers, and only the leading replica decides."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from proxy.console.review_queue import ExperimentPairs
from proxy.core import Arm, OutcomeRecord
from proxy.store import ANY_VERSION, OutcomeStore, ReviewStore
from tests.conftest import wait_until
from tests.proxy.api.test_experiments import AUTH, ENV, experiment_extra, post
from tests.proxy.store.test_exchanges import make_record
from tests.proxy.store.test_reviews import queued, review, shadow_pair
from tests.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.usefixtures("quick_rollout_ticks")


def seed(gw: Any, counts: dict[str, int], completion: dict[str, float]) -> None:
    """Write `counts[arm]` one-call operations per arm, since the experiment started, and a
    `completed` outcome for each (true for the first share `completion[arm]` of them)."""
    state = gw.gateway.experiments.running("bot")
    at = state.started_at + timedelta(milliseconds=1)
    records, outcomes = [], OutcomeStore(gw.gateway.store)
    for arm, count in counts.items():
        for n in range(count):
            operation = f"{arm}-{n}"
            records.append(
                make_record(
                    route="bot",
                    arm=Arm.EXPERIMENT,
                    experiment_arm=arm,
                    experiment_unit=f"unit-{operation}",
                    operation_id=operation,
                    started_at=at,
                    cost_usd=0.01,
                )
            )
            outcomes.add(
                OutcomeRecord(
                    operation_id=operation,
                    kind="completed",
                    caller="app:1",
                    created_at=datetime.now(UTC),
                    flag=n < completion[arm] * count,
                )
            )
    gw.gateway.store.write_batch(records)


def test_a_broken_split_is_flagged_once_with_its_alert(start_gateway: Any) -> None:
    receiver = WebhookReceiver()
    try:
        extra = experiment_extra(
            arms={"control": {"model": "echo"}, "b": {"model": "echo"}},
            weights={"control": 50, "b": 50},
            sinks=[{"type": "webhook", "url": receiver.url}],
        )
        gw = start_gateway(extra=extra, env=ENV)
        assert post(gw, "/admin/experiments/bot/start").status_code == 200
        seed(gw, {"control": 300, "b": 200}, {"control": 0.5, "b": 0.5})
        decider = gw.gateway.controller.experiments
        for _ in range(2):
            asyncio.run_coroutine_threadsafe(decider.tick(force=True), gw.loop).result(30)
        decision = decider.decisions["bot"]
        assert decision.srm is not None and decision.srm.flagged
        assert 'mirrorgate_experiment_srm{route="bot"} 1.0' in gw.http.get("/metrics").text
        status = gw.http.get("/admin/experiments/bot", headers=AUTH).json()
        assert [e["kind"] for e in status["events"]].count("srm_flagged") == 1
        assert status["decision"]["srm"]["flagged"] is True
        wait_until(
            lambda: [a for a in receiver.bodies if a.get("kind") == "experiment_srm"],
            what="the SRM alert",
        )
    finally:
        receiver.close()


def test_the_decision_names_the_better_arm_in_words(start_gateway: Any) -> None:
    extra = experiment_extra(
        arms={"control": {"model": "echo"}, "better": {"model": "echo"}},
        weights={"control": 50, "better": 50},
    )
    gw = start_gateway(extra=extra, env=ENV)
    assert post(gw, "/admin/experiments/bot/start").status_code == 200
    seed(gw, {"control": 400, "better": 400}, {"control": 0.5, "better": 0.8})
    decider = gw.gateway.controller.experiments
    asyncio.run_coroutine_threadsafe(decider.tick(force=True), gw.loop).result(30)
    status = gw.http.get("/admin/experiments/bot", headers=AUTH).json()
    (arm,) = status["decision"]["arms"]
    assert arm["arm"] == "better" and arm["verdict"] == "ship"
    assert "better" in status["decision"]["text"] and "completion" in status["decision"]["text"]
    primary = arm["lifts"][0]
    assert primary["metric"] == "completion_rate" and primary["low"] > 0


def test_only_the_leader_decides(start_gateway: Any) -> None:
    gw = start_gateway(extra=experiment_extra(), env=ENV)
    assert post(gw, "/admin/experiments/bot/start").status_code == 200
    controller = gw.gateway.controller
    looked: list[bool] = []

    async def not_leading() -> list[Any]:
        hold = controller.leadership.hold
        controller.leadership.hold = lambda: False  # type: ignore[method-assign]
        try:
            controller.experiments.decisions.clear()
            await controller.tick(force=True)
            looked.append(bool(controller.experiments.decisions))
        finally:
            controller.leadership.hold = hold  # type: ignore[method-assign]
        return []

    asyncio.run_coroutine_threadsafe(not_leading(), gw.loop).result(30)
    assert looked == [False]


def seed_reviews(gw: Any, arm: str, preferred: int, ties: int, lost: int) -> None:
    """Pairs of control's live answer and arm `arm`'s model as a shadow, since the experiment
    started, queued by the review queue's experiment source and reviewed blind: `preferred`
    for the arm's answer, `ties`, `lost` for control's."""
    state = gw.gateway.experiments.running("bot")
    start = state.started_at + timedelta(milliseconds=1)
    reviews = ReviewStore(gw.gateway.store)
    count = preferred + ties + lost
    records: list[Any] = []
    for n in range(count):
        live, shadow, pair = shadow_pair(
            n, route="bot", primary="echo", candidate="rule-follower", live_arm=Arm.EXPERIMENT,
            start=start,
        )  # fmt: skip
        records += [replace(live, experiment_arm="control"), shadow, pair]
    gw.gateway.store.write_batch(records)
    config = gw.gateway.config
    candidates = ExperimentPairs(reviews, lambda: config)(
        "bot", ANY_VERSION, since=start, limit=10 * count
    )
    assert len(candidates) == count
    verdicts = ["arm"] * preferred + ["tie"] * ties + ["control"] * lost
    for n, (c, verdict) in enumerate(zip(candidates, verdicts, strict=True)):
        shown_as = "A" if n % 2 else "B"  # the arm's answer on either side
        item = queued(c, shown_as=shown_as)
        assert reviews.enqueue([item]) == 1
        other = "B" if shown_as == "A" else "A"
        preference = {"arm": shown_as, "tie": "tie", "control": other}[verdict]
        assert reviews.add(review(item, "reviewer-1", preference=preference))


def preference_extra(reviews_needed: str = "human_preference") -> dict[str, Any]:
    extra = experiment_extra(
        arms={"control": {"model": "echo"}, "cheaper": {"model": "rule-follower"}},
        weights={"control": 50, "cheaper": 50},
    )
    route = extra["routes"]["bot"]
    route["shadows"] = [{"model": "rule-follower", "sample": 1.0}]
    route["experiment"]["primary_metric"] = reviews_needed
    route["experiment"]["guardrails"] = []
    return extra


def test_human_preference_decides_an_arm_from_blind_reviews_against_control(
    start_gateway: Any,
) -> None:
    gw = start_gateway(extra=preference_extra(), env=ENV)
    assert post(gw, "/admin/experiments/bot/start").status_code == 200
    seed(gw, {"control": 60, "cheaper": 60}, {"control": 0.5, "cheaper": 0.5})
    seed_reviews(gw, "cheaper", preferred=100, ties=20, lost=20)  # (100 + 10) / 140
    decider = gw.gateway.controller.experiments
    asyncio.run_coroutine_threadsafe(decider.tick(force=True), gw.loop).result(30)
    status = gw.http.get("/admin/experiments/bot", headers=AUTH).json()
    (arm,) = status["decision"]["arms"]
    primary = arm["lifts"][0]
    assert primary["metric"] == "human_preference"
    assert primary["n_arm"] == 140 and primary["control_value"] == 0.5
    assert primary["arm_value"] == pytest.approx(110 / 140)
    assert primary["estimate"] == pytest.approx(110 / 140 - 0.5)
    assert 0 < primary["low"] < primary["estimate"] < primary["high"]
    assert arm["verdict"] == "ship"
    assert "human preference" in arm["text"] and arm["text"].endswith("ship it")


def test_too_few_reviews_leave_the_arm_inconclusive_never_stopped(start_gateway: Any) -> None:
    extra = preference_extra("completion_rate")
    extra["routes"]["bot"]["experiment"]["guardrails"] = ["human_preference"]
    gw = start_gateway(extra=extra, env=ENV)
    assert post(gw, "/admin/experiments/bot/start").status_code == 200
    seed(gw, {"control": 60, "cheaper": 60}, {"control": 0.5, "cheaper": 0.5})
    seed_reviews(gw, "cheaper", preferred=0, ties=0, lost=20)  # every one lost, but too few
    decider = gw.gateway.controller.experiments
    asyncio.run_coroutine_threadsafe(decider.tick(force=True), gw.loop).result(30)
    status = gw.http.get("/admin/experiments/bot", headers=AUTH).json()
    (arm,) = status["decision"]["arms"]
    guard = next(x for x in arm["lifts"] if x["metric"] == "human_preference")
    assert guard["n_arm"] == 20 and guard["estimate"] == pytest.approx(-0.5)
    assert guard["low"] is None and guard["high"] is None
    assert arm["verdict"] != "stopped" and not arm["stopped"] and arm["breached"] == []
    assert gw.gateway.experiments.running("bot").stopped_arms == frozenset()
