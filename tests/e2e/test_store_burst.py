"""A burst through a real `mirrorgate serve` gives exactly one row per request, on SQLite and
on PostgreSQL; a restart reuses the database; SIGTERM drains what was accepted."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from proxy.store.exchanges import Store
from tests.e2e.conftest import GatewayProcess
from tests.e2e.rawhttp import burst

pytestmark = pytest.mark.e2e

BODY = orjson.dumps({"model": "echo", "messages": [{"role": "user", "content": "hello"}]})


def send(gateway: GatewayProcess, count: int, concurrency: int = 16) -> list[int]:
    return asyncio.run(burst(gateway.url, "/v1/chat/completions", BODY, count, concurrency))


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'burst.db'}"
    url, _schema = request.getfixturevalue("pg_schema")
    return url  # type: ignore[no-any-return]


def test_burst_of_10000_gives_10000_rows_and_a_restart_reuses_the_database(
    start_gateway_process: Callable[..., GatewayProcess], db_url: str
) -> None:
    gateway = start_gateway_process(db_url)
    assert send(gateway, 10_000).count(200) == 10_000
    # SIGTERM right after the burst: whatever is still queued must be written before exit.
    assert gateway.terminate() == 0
    with Store(db_url) as store:
        assert store.count(route="echo") == 10_000
    again = start_gateway_process(db_url)
    assert send(again, 25).count(200) == 25
    assert again.terminate() == 0
    with Store(db_url) as store:
        assert store.count() == 10_025
