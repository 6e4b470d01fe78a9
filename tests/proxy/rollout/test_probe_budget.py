"""When a spent probe budget frees, read from the store every replica writes to."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from proxy.config import ProbesSpec
from proxy.core.records import ProbeRecord
from proxy.rollout.probe_budget import clock_text, probe_budget_until
from proxy.store.exchanges import Store
from proxy.store.probes import ProbeStore
from tests.conftest import seed_sqlite

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path, migrated_sqlite: Path) -> Iterator[Store]:
    seed_sqlite(f"sqlite:///{tmp_path / 'probes.db'}", migrated_sqlite)
    with Store(f"sqlite:///{tmp_path / 'probes.db'}") as opened:
        opened.migrate()
        yield opened


def spec(**fields: object) -> ProbesSpec:
    follows = {"name": "follows", "type": "regex", "pattern": "{value}"}
    return ProbesSpec.model_validate(
        {"parameter": "w=(?P<value>\\d+)", "values": [1], "expect": [follows], **fields}
    )


def probes(store: Store, target: str, ages_min: list[float], cost: float = 0.0) -> None:
    records = []
    for i, age in enumerate(ages_min):
        records.append(
            ProbeRecord(
                probe_id=f"{target}-{i}", request_id=f"r-{target}-{i}", route="bot",
                target=target, rule="r", rule_version="v1",
                created_at=NOW - timedelta(minutes=age), original_value="1", asked_value="2",
                result="followed", answered_value="2", cost_usd=cost,
            )
        )  # fmt: skip
    store.write_batch(records)


def test_a_spent_rate_cap_frees_an_hour_after_the_oldest_probe_of_the_hour(store: Store) -> None:
    probes(store, "a", [50, 40, 30, 5])  # 4 in the hour: below the cap of 3 once 2 are left
    probes(store, "b", [10])
    until = probe_budget_until(ProbeStore(store), "r", spec(max_per_hour=3), ["a", "b"], NOW)
    assert until == NOW + timedelta(minutes=20)
    assert probe_budget_until(ProbeStore(store), "r", spec(max_per_hour=5), ["a"], NOW) is None


def test_a_spent_usd_cap_frees_when_the_hours_spend_falls_below_it(store: Store) -> None:
    probes(store, "a", [50, 20, 10], cost=1.0)
    until = probe_budget_until(
        ProbeStore(store), "r", spec(max_per_hour=100, max_usd_per_hour=2.5), ["a"], NOW
    )
    assert until == NOW + timedelta(minutes=10)  # 3 USD: once the oldest leaves, 2 < 2.5


def test_the_moment_is_shown_to_the_minute_rounded_up() -> None:
    assert clock_text(datetime(2026, 3, 1, 12, 40, tzinfo=UTC)) == "12:40Z"
    assert clock_text(datetime(2026, 3, 1, 12, 40, 1, tzinfo=UTC)) == "12:41Z"
