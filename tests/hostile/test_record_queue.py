"""The record queue is bounded by bytes (issue 12, item 11): during a store outage, requests with
big bodies keep the recorder's memory under `store.queue_max_bytes`, records beyond the bodies'
share are kept without their bodies rather than lost, and every one is written once the store is
back. The outage is real: PostgreSQL behind a TCP forwarder that cuts every connection.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
import yaml

from tests.conftest import wait_until
from tests.e2e.conftest import GatewayProcess, Process, free_port
from tests.e2e.tcp_forwarder import TcpForwarder

pytestmark = pytest.mark.e2e

BOUND = 2 * 2**20
"""`store.queue_max_bytes` of the gateway under test: 2 MiB."""
BODY_CHARS = 200_000
REQUESTS = 40
"""40 requests of 200 KB each would hold 8 MB of bodies (16 MB with the stored answers)."""


def metric(client: httpx.Client, url: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in client.get(url + "/metrics").text.splitlines():
        series, _, value = line.rpartition(" ")
        if series.partition("{")[0] == name and all(
            f'{k}="{v}"' in series for k, v in labels.items()
        ):
            total += float(value)
    return total


@pytest.fixture
def mock_url(tmp_path: Path) -> Iterator[str]:
    behavior = tmp_path / "behavior.yaml"
    behavior.write_text(yaml.safe_dump({"record_requests": False}))
    port = free_port()
    mock = Process(
        ["mock-upstream", "--port", str(port), "--behavior", str(behavior)], tmp_path / "mock.log"
    )
    url = f"http://127.0.0.1:{port}"
    try:
        mock.wait_ready(url + "/_mock/stats", "mock-upstream")
        yield url
    finally:
        mock.terminate()


def stored(db_url: str) -> list[dict[str, Any]]:
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT request_id, tags, request_body FROM exchanges"))
            return [dict(row._mapping) for row in rows]
    finally:
        engine.dispose()


def test_big_bodies_during_a_store_outage_stay_under_queue_max_bytes_and_all_land(
    pg_schema: tuple[str, str], mock_url: str, tmp_path: Path
) -> None:
    db_url, _schema = pg_schema
    with TcpForwarder("127.0.0.1", 5432) as forwarder:
        via_forwarder = db_url.replace("127.0.0.1:5432", f"127.0.0.1:{forwarder.port}")
        config = {
            "store": {"url": via_forwarder, "bodies": "full", "queue_max_bytes": BOUND},
            "models": {"echo": {"provider": "openai", "base_url": mock_url + "/v1",
                                "model": "echo"}},
            "routes": {"echo": {"primary": "echo"}},
        }  # fmt: skip
        gateway = GatewayProcess(config, tmp_path)
        try:
            with httpx.Client(timeout=30) as client:
                forwarder.cut()
                accepted: list[str] = []
                held: list[float] = []
                for n in range(REQUESTS):
                    content = f"{n} " + "x" * BODY_CHARS
                    response = client.post(
                        gateway.url + "/v1/chat/completions",
                        json={"model": "echo", "messages": [{"role": "user", "content": content}]},
                    )
                    assert response.status_code == 200, response.text
                    accepted.append(response.headers["x-mirrorgate-request-id"])
                    held.append(metric(client, gateway.url, "mirrorgate_recorder_queue_bytes"))
                assert metric(client, gateway.url, "mirrorgate_recorder_write_errors_total") > 0
                assert max(held) <= BOUND
                bare = metric(client, gateway.url, "mirrorgate_recorder_bodies_dropped_total")
                assert bare >= REQUESTS - BOUND // BODY_CHARS  # most lost their bodies, not rows
                forwarder.restore()

                rows = wait_until(
                    lambda: (r := stored(db_url)) and len(r) == REQUESTS and r,
                    timeout_s=30,
                    what="every record accepted during the outage in the store",
                )
                assert sorted(row["request_id"] for row in rows) == sorted(accepted)
                without = [row for row in rows if "bodies_dropped" in row["tags"]]
                assert len(without) == bare
                assert all(row["request_body"] is None for row in without)
                kept = [row for row in rows if row not in without]
                assert kept and all(len(row["request_body"]) > BODY_CHARS for row in kept)
                assert metric(client, gateway.url, "mirrorgate_recorder_dropped_total") == 0
                wait_until(
                    lambda: metric(client, gateway.url, "mirrorgate_recorder_queue_bytes") == 0,
                    what="the recorder holding nothing",
                )
        finally:
            gateway.terminate()
