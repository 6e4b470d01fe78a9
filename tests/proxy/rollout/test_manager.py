"""The rollout manager following the store: an outage keeps the last route table and says the
store is unreachable; a bug is logged with its traceback, counted under component="decider", and
the following goes on."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from proxy.config import parse_config
from proxy.core import Action
from proxy.gateway.routing import RouteTable
from proxy.observability.metrics import GatewayMetrics
from proxy.rollout.manager import RUNBOOK_ANCHORS, RolloutManager
from proxy.store.errors import StoreUnavailableError
from proxy.store.exchanges import Store
from proxy.store.rollouts import RolloutStore
from tests.conftest import seed_sqlite
from tests.prometheus.test_alert_rules import github_anchor
from tests.proxy.rollout.test_controller import CONFIG


class FlakyRollouts(RolloutStore):
    """Real rollout state, except that the first reads of revisions raise `failures`."""

    def __init__(self, store: Store, *failures: Exception) -> None:
        super().__init__(store)
        self.failures = list(failures)
        self.reads = 0

    def revisions(self) -> dict[str, int]:
        self.reads += 1
        if self.failures:
            raise self.failures.pop(0)
        return super().revisions()


@pytest.fixture
def store(tmp_path: Path, migrated_sqlite: Path) -> Iterator[Store]:
    seed_sqlite(f"sqlite:///{tmp_path / 'manager.db'}", migrated_sqlite)
    with Store(f"sqlite:///{tmp_path / 'manager.db'}") as opened:
        opened.migrate()
        yield opened


def follow(rollouts: FlakyRollouts, reads: int) -> tuple[RolloutManager, CollectorRegistry]:
    """Run the manager's follower until it has read the store `reads` times."""
    config = parse_config(CONFIG, {})
    registry = CollectorRegistry()
    manager = RolloutManager(config, rollouts, RouteTable(config), GatewayMetrics(registry))

    async def scenario() -> None:
        task = asyncio.get_running_loop().create_task(manager.run_refresh(0.001))
        deadline = asyncio.get_running_loop().time() + 15
        while rollouts.reads < reads:
            assert not task.done(), "the follower ended"
            assert asyncio.get_running_loop().time() < deadline, "the follower stopped reading"
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    return manager, registry


def internal_errors(registry: CollectorRegistry) -> float:
    value = registry.get_sample_value("mirrorgate_internal_errors_total", {"component": "decider"})
    return value or 0.0


def test_a_bug_while_following_is_logged_counted_and_following_goes_on(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mirrorgate.rollouts")
    rollouts = FlakyRollouts(store, KeyError("a bug"), KeyError("a bug"))
    _manager, registry = follow(rollouts, reads=4)
    assert internal_errors(registry) == 2
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(failures) == 2 and all(r.exc_info for r in failures)
    assert "serving the last route table" not in caplog.text


def test_an_outage_is_waited_out_and_not_counted_as_a_bug(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mirrorgate.rollouts")
    outage = [StoreUnavailableError("reading rollout revisions: locked")] * 3
    manager, registry = follow(FlakyRollouts(store, *outage), reads=5)
    assert internal_errors(registry) == 0
    assert manager.store_ok is True  # reachable again by the end
    assert not [r for r in caplog.records if r.exc_info]
    messages = [r.getMessage() for r in caplog.records]
    assert sum("serving the last route table" in m for m in messages) == 1  # once per outage
    assert sum("followed again" in m for m in messages) == 1


def manager_for(store: Store, extra: str = "") -> RolloutManager:
    config = parse_config(CONFIG + extra, {})
    return RolloutManager(
        config, RolloutStore(store), RouteTable(config), GatewayMetrics(CollectorRegistry())
    )


def test_a_rollback_or_a_promotion_is_a_warning_and_a_start_or_pause_is_info(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "mirrorgate.rollouts")
    manager = manager_for(store)

    async def scenario() -> None:
        await manager.act("bot", Action.START, reason="ship it", actor="operator")
        await manager.act("bot", Action.PAUSE, reason="look", actor="operator")
        await manager.act("bot", Action.ROLLBACK, reason="answers got worse", actor="decider")
        await manager.act("bot", Action.START, reason="again", actor="operator")
        await manager.act("bot", Action.PROMOTE, reason="fine now", actor="operator")

    asyncio.run(scenario())
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "mirrorgate.rollouts"]
    levels = [level for level, _ in said]
    assert levels == [logging.INFO, logging.INFO, logging.WARNING, logging.INFO, logging.WARNING]
    assert "-> rolled_back" in said[2][1] and "answers got worse" in said[2][1]
    assert "-> promoted" in said[4][1] and "fine now" in said[4][1]


def test_an_alert_link_points_at_the_runbook_section_of_its_kind(store: Store) -> None:
    default = manager_for(store)
    assert default.alert_link("rollback", "bot").endswith("docs/runbook.md#mirrorgaterolledback")
    assert default.alert_link("step_held", "bot").endswith(
        "#a-step-held-mirrorgates-step_held-warning"
    )
    own = manager_for(
        store, "alerts: {generator_url: 'https://wiki.example.org/{kind}?route={route}'}\n"
    )
    assert own.alert_link("rollback", "bot") == "https://wiki.example.org/rollback?route=bot"


def test_every_runbook_anchor_is_a_section_of_the_runbook() -> None:
    runbook = Path(__file__).parents[3] / "docs" / "runbook.md"
    headings = {
        github_anchor(line.lstrip("#"))
        for line in runbook.read_text().splitlines()
        if line[:1] == "#"
    }
    assert set(RUNBOOK_ANCHORS.values()) <= headings
    assert "reading-the-logs" in headings
