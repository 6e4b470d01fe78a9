"""The production model's guard against a real store: check and probe records written straight
into it, then the controller's looks alert (alert mode) or switch the route to the best candidate
(switch mode); restore gives the route back; a new guard over the same store neither alerts twice
nor loses the switch; on PostgreSQL two replicas share one schema and exactly one acts."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from alerts.alert import Alert
from alerts.dispatcher import AlertDispatcher
from proxy.config import MirrorgateConfig, parse_config
from proxy.core.records import Arm, CheckRecord, ProbeRecord
from proxy.core.rollout_state import Action, Phase
from proxy.gateway.routing import RouteTable
from proxy.observability.metrics import GatewayMetrics
from proxy.rollout.controller import RolloutController
from proxy.rollout.guard import DEFAULT_INTERVAL_S, RuleGuard, interval_s
from proxy.rollout.manager import RolloutManager
from proxy.store.exchanges import Store
from proxy.store.guard import GuardStore
from proxy.store.judge_windows import JudgeWindows
from proxy.store.leadership import Leadership
from proxy.store.probes import ProbeStore
from proxy.store.rollouts import RolloutStore
from proxy.store.rule_events import RuleEvent, RuleEventStore
from tests.conftest import seed_sqlite

CONFIG = """
models:
  prod: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: prod}
  follower: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: follower}
  safe: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: safe}
routes:
  bot:
    primary: prod
    shadows: [{model: follower, sample: 0.2}]
    guard: {on_rule_regression: MODE, candidates: [follower, safe], min_samples: 30}
rules:
  shipping:
    routes: [bot]
    checks: [{name: valid-json, type: json}]
"""

START = datetime(2026, 1, 1, tzinfo=UTC)
CHANGE = START + timedelta(minutes=10)


class CapturedAlerts(AlertDispatcher):
    """The alert fan-out, keeping what it was asked to send instead of sending it."""

    def __init__(self) -> None:  # no sinks, no client: nothing leaves the test
        self.sent: list[Alert] = []

    def notify(self, alert: Alert) -> None:
        self.sent.append(alert)


@pytest.fixture
def store(tmp_path: Path, migrated_sqlite: Path) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path / 'guard.db'}"
    seed_sqlite(url, migrated_sqlite)
    with Store(url) as opened:
        opened.migrate()
        yield opened


def config(mode: str) -> MirrorgateConfig:
    return parse_config(CONFIG.replace("MODE", mode), {})


def checks(target: str, arm: Arm, version: str, passed: int, failed: int) -> list[CheckRecord]:
    at = CHANGE + timedelta(seconds=5) if version == "v2" else START + timedelta(seconds=5)
    return [
        CheckRecord(
            request_id=f"{target}-{arm.value}-{version}-{i}", route="bot", target=target,
            arm=arm, rule="shipping", rule_version=version, check="valid-json",
            result="pass" if i < passed else "fail", reason="", created_at=at,
        )
        for i in range(passed + failed)
    ]  # fmt: skip


def probes(target: str, followed: int, stuck: int) -> list[ProbeRecord]:
    return [
        ProbeRecord(
            probe_id=f"probe-{uuid.uuid4().hex[:10]}", request_id=f"live-{i}", route="bot",
            target=target, rule="shipping", rule_version="v2",
            created_at=CHANGE + timedelta(seconds=6), original_value="150", asked_value="175",
            answered_value="175" if i < followed else "150",
            result="followed" if i < followed else "stuck", cost_usd=0.0,
        )
        for i in range(followed + stuck)
    ]  # fmt: skip


def rule_changed(store: Store) -> None:
    events = RuleEventStore(store)
    events.add(RuleEvent("shipping", "v1", None, START, "first-v1", "bot", ""))
    events.add(RuleEvent("shipping", "v2", "v1", CHANGE, "first-v2", "bot", ""))


def stubborn_primary(store: Store, *, safe_followed: int = 35) -> None:
    """prod kept v1's rule: it passes v1 and fails v2; follower (shadow) and safe (probed)
    adapted."""
    rule_changed(store)
    store.write_batch(
        checks("prod", Arm.PRIMARY, "v1", 60, 0)
        + checks("prod", Arm.PRIMARY, "v2", 2, 58)
        + checks("follower", Arm.SHADOW, "v2", 40, 0)
        + probes("follower", 30, 0)
        + probes("safe", safe_followed, 40 - safe_followed)
    )


def gateway(
    store: Store, mode: str
) -> tuple[RolloutController, RolloutManager, CapturedAlerts, RouteTable, CollectorRegistry]:
    """One replica's decider over `store`: manager, guard, controller, as the gateway wires
    them."""
    cfg = config(mode)
    registry = CollectorRegistry()
    metrics = GatewayMetrics(registry)
    alerts = CapturedAlerts()
    routes = RouteTable(cfg)
    manager = RolloutManager(cfg, RolloutStore(store), routes, metrics, alerts=alerts)
    guard = RuleGuard(cfg, manager, GuardStore(store), ProbeStore(store))
    controller = RolloutController(
        cfg, manager, JudgeWindows(store), Leadership(store), metrics, guard=guard
    )
    return controller, manager, alerts, routes, registry


def test_alert_mode_raises_one_rule_regression_alert_with_the_evidence(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    stubborn_primary(store)
    controller, manager, alerts, routes, _ = gateway(store, "alert")

    async def scenario() -> None:
        await manager.refresh()
        await controller.tick(force=True)
        await controller.tick(force=True)  # the same version: no second alert

    with caplog.at_level("WARNING", logger="mirrorgate.guard"):
        asyncio.run(scenario())
    (alert,) = alerts.sent
    assert (alert.kind, alert.route, alert.target, alert.severity) == (
        "rule_regression", "bot", "prod", "critical",
    )  # fmt: skip
    assert (alert.rule, alert.rule_version) == ("shipping", "v2")
    assert alert.evidence["primary_failure_rate_new"] == pytest.approx(58 / 60)
    assert alert.evidence["primary_failure_rate_previous"] == 0.0
    # follower: 40 shadow answers and 30 probes, all compliant; safe: 35 of 40 probes followed
    assert alert.evidence["others_failure_rate_new"] == pytest.approx(5 / 110)
    assert alert.example_request_ids and all(
        i.startswith("prod-primary-v2-") for i in alert.example_request_ids
    )
    assert "keeps the old rule shipping" in caplog.text
    plan = routes.plan("bot")
    assert plan is not None and (plan.target, plan.arm) == ("prod", Arm.PRIMARY)
    decision = GuardStore(store).decision("bot", "shipping", "v2")
    assert decision is not None and decision.outcome == "alerted"


def test_switch_mode_moves_the_route_to_the_best_candidate_and_restore_gives_it_back(
    store: Store,
) -> None:
    stubborn_primary(store)
    controller, manager, alerts, routes, registry = gateway(store, "switch")

    async def scenario() -> None:
        await manager.refresh()
        await controller.tick(force=True)
        look = controller.guard_looks[0]
        assert (look.action, look.model) == ("switched", "follower")
        plan = routes.plan("bot")
        assert plan is not None and (plan.target, plan.arm) == ("follower", Arm.FALLBACK)
        state = manager.state("bot")
        assert (state.phase, state.override, state.actor) == (
            Phase.ROLLED_BACK,
            "follower",
            "guard",
        )
        await controller.tick(force=True)  # switched: nothing more on this route
        assert controller.guard_looks == []
        await manager.act("bot", Action.RESTORE, reason="checked", actor="operator")
        plan = routes.plan("bot")
        assert plan is not None and (plan.target, plan.arm) == ("prod", Arm.PRIMARY)
        await controller.tick(force=True)  # restored: the decided version is not switched again
        assert manager.state("bot").override is None

    asyncio.run(scenario())
    (alert,) = alerts.sent
    assert (alert.kind, alert.rolled_back_to) == ("rule_regression", "fallback")
    assert "switched to follower" in alert.summary
    value = registry.get_sample_value(
        "mirrorgate_rollbacks_total", {"route": "bot", "target": "follower", "reason": "guard"}
    )
    assert value == 1
    decision = GuardStore(store).decision("bot", "shipping", "v2")
    assert decision is not None and (decision.outcome, decision.model) == ("switched", "follower")


def test_switch_mode_without_a_qualified_candidate_alerts_and_says_why(store: Store) -> None:
    rule_changed(store)
    store.write_batch(
        checks("prod", Arm.PRIMARY, "v1", 60, 0)
        + checks("prod", Arm.PRIMARY, "v2", 0, 60)
        + probes("follower", 35, 0)  # the others' evidence: follower's probes only
        + probes("safe", 5, 5)  # too little evidence to be chosen
    )
    cfg_text = CONFIG.replace("MODE", "switch").replace("[follower, safe]", "[safe]")
    cfg = parse_config(cfg_text, {})
    alerts = CapturedAlerts()
    metrics = GatewayMetrics(CollectorRegistry())
    manager = RolloutManager(cfg, RolloutStore(store), RouteTable(cfg), metrics, alerts=alerts)
    guard = RuleGuard(cfg, manager, GuardStore(store), ProbeStore(store))

    look = asyncio.run(guard.look("bot"))
    assert look is not None and look.action == "alerted" and look.model is None
    (alert,) = alerts.sent
    assert "not switched: no candidate qualifies: safe has 10 answers (needs 30)" in alert.summary
    assert manager.state("bot").phase is None  # still served by its primary


def test_a_new_guard_over_the_same_store_does_not_alert_twice_and_keeps_the_switch(
    store: Store,
) -> None:
    stubborn_primary(store)

    async def first_life() -> None:
        controller, manager, alerts, _, _ = gateway(store, "switch")
        await manager.refresh()
        await controller.tick(force=True)
        assert len(alerts.sent) == 1

    async def second_life() -> tuple[list[Alert], str | None, Arm | None]:
        controller, manager, alerts, routes, _ = gateway(store, "switch")
        await manager.refresh()  # as the gateway does before serving
        await controller.tick(force=True)
        plan = routes.plan("bot")
        return alerts.sent, plan.target if plan else None, plan.arm if plan else None

    asyncio.run(first_life())
    sent, target, arm = asyncio.run(second_life())
    assert sent == [] and (target, arm) == ("follower", Arm.FALLBACK)


def test_alert_mode_resumes_without_a_second_alert(store: Store) -> None:
    stubborn_primary(store)
    for _ in range(2):
        controller, _, alerts, _, _ = gateway(store, "alert")
        asyncio.run(controller.tick(force=True))
        last = alerts.sent
    assert last == []  # the second life found the decision row


def test_a_follower_primary_is_left_alone(store: Store) -> None:
    rule_changed(store)
    store.write_batch(
        checks("prod", Arm.PRIMARY, "v1", 60, 0)
        + checks("prod", Arm.PRIMARY, "v2", 59, 1)
        + checks("follower", Arm.SHADOW, "v2", 40, 0)
    )
    controller, _, alerts, routes, _ = gateway(store, "switch")
    asyncio.run(controller.tick(force=True))
    assert alerts.sent == [] and controller.guard_looks[0].action is None
    plan = routes.plan("bot")
    assert plan is not None and plan.target == "prod"


def test_nothing_to_judge_before_a_rule_change(store: Store) -> None:
    RuleEventStore(store).add(RuleEvent("shipping", "v1", None, START, "first-v1", "bot", ""))
    store.write_batch(checks("prod", Arm.PRIMARY, "v1", 0, 60))
    controller, _, alerts, _, _ = gateway(store, "switch")
    asyncio.run(controller.tick(force=True))
    assert controller.guard_looks == [] and alerts.sent == []


def test_the_look_interval_defaults() -> None:
    spec = config("alert").routes["bot"]
    assert interval_s(spec) == DEFAULT_INTERVAL_S
    tuned = parse_config(
        CONFIG.replace("MODE", "alert").replace(
            "min_samples: 30", "min_samples: 30, interval_s: 2"
        ),
        {},
    )
    assert interval_s(tuned.routes["bot"]) == 2


def test_two_replicas_on_postgresql_exactly_one_acts_and_the_other_follows(
    pg_schema: tuple[str, str],
) -> None:
    url, _ = pg_schema
    with Store(url) as one, Store(url) as two:
        one.migrate()
        stubborn_primary(one)

        async def scenario() -> tuple[list[str | None], int, list[str | None], list[object]]:
            first, second = gateway(one, "switch"), gateway(two, "switch")
            assert first[0].guard is not None and second[0].guard is not None
            # Both replicas' guards look at once (a takeover racing a slow leader): the decision
            # row is claimed by one of them, the switch fenced by the route's revision. Each
            # waits for the other to have read the route's decisions (none yet) before going on,
            # so that neither sees the other's decision already made and stays out of the race.
            both_read = threading.Barrier(2, timeout=10)
            guard_stores = [first[0].guard.store, second[0].guard.store]
            for guard_store in guard_stores:

                def read_then_wait(*args: Any, read: Any = guard_store.decision) -> Any:
                    found = read(*args)
                    both_read.wait()
                    return found

                guard_store.decision = read_then_wait
            raced = await asyncio.gather(first[0].guard.look("bot"), second[0].guard.look("bot"))
            for guard_store in guard_stores:
                del guard_store.decision  # the class's own again
            for replica in (first, second):
                await replica[1].refresh()
            # Then the controllers: only the leader looks, and finds the version decided.
            await first[0].tick(force=True)
            await second[0].tick(force=True)
            looked = [*first[0].guard_looks, *second[0].guard_looks]
            first[0].leadership.release()
            sent = sum(len(replica[2].sent) for replica in (first, second))
            served = [
                plan.target if plan else None
                for plan in (r[3].plan("bot") for r in (first, second))
            ]
            actions = sorted((look.action for look in raced if look is not None), key=str)
            return actions, sent, served, looked

        actions, sent, served, looked = asyncio.run(scenario())
    assert actions == [None, "switched"] and sent == 1
    assert served == ["follower", "follower"] and looked == []
