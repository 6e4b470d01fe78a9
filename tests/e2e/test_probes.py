"""Rule-flip probes end to end: `mirrorgate serve` in front of `mirrorgate mock-upstream`, a
handful of requests at low traffic, every one probed (sample 1): the probes' rows reach the store
and their results reach /metrics."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest

from proxy.core.records import Arm
from proxy.store import ProbeStore
from proxy.store.exchanges import Store
from tests.conftest import wait_until
from tests.e2e.conftest import GatewayProcess, RolloutClient

pytestmark = pytest.mark.e2e

REQUESTS = 4


def test_probes_are_stored_and_counted_by_a_real_gateway(tmp_path: Path, mock_process: str) -> None:
    models = {
        name: {"provider": "openai", "base_url": mock_process + "/v1", "model": name,
               "timeout_s": 5, "price": {"input_per_mtok": 1, "output_per_mtok": 2}}
        for name in ("rule-follower", "stale")
    }  # fmt: skip
    expect = [{"name": "follows", "type": "json_path", "path": "$.max_weight", "equals": "{value}"}]
    db_url = f"sqlite:///{tmp_path / 'probes.db'}"
    config = {
        "store": {"url": db_url, "bodies": "none"},
        "models": models,
        "routes": {
            "bot": {"primary": "rule-follower", "shadows": [{"model": "stale", "sample": 0}]}
        },
        "rules": {
            "shipping": {
                "routes": ["bot"],
                "probes": {
                    "parameter": r"max_weight\s*=\s*(?P<value>\d+)",
                    "values": [150, 175],
                    "expect": expect,
                    "sample": 1,
                },
            }
        },
    }
    gateway = GatewayProcess(config, tmp_path)
    client = RolloutClient()
    try:
        for _ in range(REQUESTS):
            body = {
                "model": "bot",
                "messages": [
                    {"role": "system", "content": "Rules: max_weight = 100."},
                    {"role": "user", "content": f"{uuid.uuid4().hex} how heavy?"},
                ],
            }
            response = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=10)
            assert response.status_code == 200 and "100" in response.text

        def counted() -> bool:
            total = sum(
                client.metric(gateway, "mirrorgate_probe_results_total", target=t, result=r)
                for t, r in (("rule-follower", "followed"), ("stale", "stuck"))
            )
            return total == 2 * REQUESTS

        wait_until(counted, timeout_s=30, what="probe results in /metrics")
        with Store(db_url) as store:
            rows = wait_until(
                lambda: len(r := ProbeStore(store).recent("shipping", limit=100)) == 2 * REQUESTS
                and r,
                timeout_s=30,
                what="probe rows",
            )
            calls = store.query(arm=Arm.PROBE)
        assert {(r.target, r.result) for r in rows} == {
            ("rule-follower", "followed"), ("stale", "stuck"),
        }  # fmt: skip
        assert {r.asked_value for r in rows} <= {"150", "175"}
        assert {r.original_value for r in rows} == {"100"}
        assert sorted(c.pair_id for c in calls) == sorted(r.probe_id for r in rows)
    finally:
        client.close()
        assert gateway.terminate() == 0
