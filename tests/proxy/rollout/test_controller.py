"""The decider's failures: an outage is waited out; a bug is logged with its traceback, counted
under component="decider", and judging goes on."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from proxy.config import MirrorgateConfig, parse_config
from proxy.core.records import Arm
from proxy.core.rollout_state import Action
from proxy.gateway.routing import RouteTable
from proxy.observability.metrics import GatewayMetrics
from proxy.rollout.controller import RolloutController
from proxy.rollout.manager import RolloutManager
from proxy.store.errors import StoreError, StoreUnavailableError
from proxy.store.exchanges import Store
from proxy.store.judge_windows import ArmExchange, Arms, JudgeWindows
from proxy.store.leadership import Leadership
from proxy.store.rollouts import RolloutStore
from tests.proxy.store.test_exchanges import make_record

CONFIG = """
models:
  prod: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: prod}
  cand: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: cand}
routes:
  bot:
    primary: prod
    canary: {model: cand, steps: [50], step_interval_s: 3600, analysis: {interval_s: 0.01}}
"""


class FailingWindows(JudgeWindows):
    """Real window queries, except that the first `failures` reads of traffic raise."""

    def __init__(self, store: Store, *failures: Exception) -> None:
        super().__init__(store)
        self.failures = list(failures)
        self.reads = 0

    def exchanges(self, arms: Arms, since: datetime) -> list[ArmExchange]:
        self.reads += 1
        if self.failures:
            raise self.failures.pop(0)
        return super().exchanges(arms, since)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(f"sqlite:///{tmp_path / 'decider.db'}") as opened:
        opened.migrate()
        yield opened


async def started(
    store: Store, windows: JudgeWindows
) -> tuple[RolloutController, CollectorRegistry]:
    config: MirrorgateConfig = parse_config(CONFIG, {})
    registry = CollectorRegistry()
    metrics = GatewayMetrics(registry)
    manager = RolloutManager(config, RolloutStore(store), RouteTable(config), metrics)
    await manager.act("bot", Action.START, reason="test", actor="operator")
    # Some traffic of both arms since the start: enough for the judge to give verdicts.
    now = datetime.now(UTC)
    store.write_batch(
        [make_record(route="bot", target="prod", arm=Arm.PRIMARY, started_at=now)] * 3
        + [make_record(route="bot", target="cand", arm=Arm.CANARY, started_at=now)] * 3
    )
    return RolloutController(config, manager, windows, Leadership(store), metrics), registry


def internal_errors(registry: CollectorRegistry, component: str) -> float:
    value = registry.get_sample_value("mirrorgate_internal_errors_total", {"component": component})
    return value or 0.0


def verdicts(registry: CollectorRegistry) -> float:
    return sum(
        sample.value
        for family in registry.collect()
        if family.name == "mirrorgate_analysis_verdicts"
        for sample in family.samples
        if sample.name == "mirrorgate_analysis_verdicts_total"
    )


@pytest.mark.parametrize(
    "bug",
    [
        RuntimeError("a bug in the window query"),
        # A query the database refuses is a bug in the query, not an outage.
        StoreError("reading traffic: UndefinedColumn: a bug in the window query"),
    ],
)
def test_a_bug_in_a_look_is_logged_counted_and_judging_goes_on(
    store: Store, caplog: pytest.LogCaptureFixture, bug: Exception
) -> None:
    caplog.set_level(logging.INFO, logger="mirrorgate.controller")

    async def scenario() -> tuple[Any, ...]:
        windows = FailingWindows(store, bug)
        controller, registry = await started(store, windows)
        assert await controller.tick(force=True) == []
        after_bug = (internal_errors(registry, "decider"), verdicts(registry))
        await controller.tick(force=True)  # the next look works, and judges
        return after_bug, internal_errors(registry, "decider"), verdicts(registry), windows

    (errors_then, verdicts_then), errors_now, verdicts_now, windows = asyncio.run(scenario())
    assert (errors_then, verdicts_then) == (1, 0)
    assert errors_now == 1 and verdicts_now > 0 and windows.reads == 2
    (failure,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert failure.exc_info is not None and "a bug in the window query" in caplog.text
    assert "judging route bot failed" in failure.getMessage()
    assert "wait for the store" not in caplog.text


def test_the_decider_loop_survives_a_bug_and_keeps_deciding(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> tuple[float, float]:
        windows = FailingWindows(store, RuntimeError("a bug"), RuntimeError("another bug"))
        controller, registry = await started(store, windows)
        loop = asyncio.get_running_loop().create_task(controller.run())
        deadline = loop.get_loop().time() + 15
        while verdicts(registry) == 0:
            assert not loop.done(), "the decider loop ended"
            assert loop.get_loop().time() < deadline, "no verdict after the bugs"
            await asyncio.sleep(0.01)
        loop.cancel()
        with pytest.raises(asyncio.CancelledError):
            await loop
        return internal_errors(registry, "decider"), verdicts(registry)

    errors, judged = asyncio.run(scenario())
    assert errors == 2 and judged > 0


def test_an_unavailable_store_is_waited_for_not_counted_as_a_bug(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mirrorgate.controller")

    async def scenario() -> float:
        windows = FailingWindows(store, StoreUnavailableError("reading traffic: locked"))
        controller, registry = await started(store, windows)
        with pytest.raises(StoreUnavailableError):
            await controller.tick(force=True)  # `run` logs this as waiting for the store
        return internal_errors(registry, "decider")

    assert asyncio.run(scenario()) == 0
    assert not [r for r in caplog.records if r.exc_info]
