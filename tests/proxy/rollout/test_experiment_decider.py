"""The experiments' decider: a broken split is flagged (gauge, event, alert, once), the decision
is persisted in words and numbers, and only the leading replica decides."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from proxy.core import Arm, OutcomeRecord
from proxy.store import OutcomeStore
from tests.conftest import wait_until
from tests.proxy.api.test_experiments import AUTH, ENV, experiment_extra, post
from tests.proxy.store.test_exchanges import make_record
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
