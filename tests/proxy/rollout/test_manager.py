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
from proxy.gateway.routing import RouteTable
from proxy.observability.metrics import GatewayMetrics
from proxy.rollout.manager import RolloutManager
from proxy.store.errors import StoreUnavailableError
from proxy.store.exchanges import Store
from proxy.store.rollouts import RolloutStore
from tests.conftest import seed_sqlite
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
