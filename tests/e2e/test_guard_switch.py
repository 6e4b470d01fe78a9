"""The guard through real processes: `mirrorgate serve` in front of `mirrorgate mock-upstream`, a
production model that memorised `max_weight = 100` and a shadow that follows the prompt. Traffic
under rule v1 (100), then v2 (150): the gateway switches the route to the follower by itself,
answers carry `x-mirrorgate-arm: fallback` from it, and `mirrorgate rollout restore` gives the
route back."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import wait_until
from tests.e2e.conftest import ADMIN, ADMIN_TOKEN, GatewayProcess
from tests.rollout_scene import rule_request

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def guarded_config(mock_url: str, db_url: str) -> dict[str, Any]:
    models = {
        name: {"provider": "openai", "base_url": mock_url + "/v1", "model": name, "timeout_s": 5}
        for name in ("stale", "rule-follower")
    }

    def version(equals: int) -> dict[str, Any]:
        check = {"name": "max-weight", "type": "json_path", "path": "$.max_weight"}
        return {"checks": [{**check, "equals": equals}]}

    return {
        # Shadows are never shed here: the evidence must come on a loaded test machine too.
        "server": {"shadow_shed_lag_ms": 0, "shadow_shed_busy_percent": 0},
        "store": {"url": db_url, "bodies": "none", "flush_interval_ms": 10},
        "models": models,
        "routes": {
            "bot": {
                "primary": "stale",
                "shadows": [{"model": "rule-follower", "sample": 1.0}],
                "guard": {
                    "on_rule_regression": "switch",
                    "candidates": ["rule-follower"],
                    "min_samples": 20,
                    "interval_s": 0.2,
                },
            }
        },
        "rules": {
            "shipping": {
                "routes": ["bot"],
                "version": "header:x-rule-version",
                "versions": {"v1": version(100), "v2": version(150)},
            }
        },
    }


@pytest.fixture
def gateway(tmp_path: Path, mock_process: str) -> Iterator[GatewayProcess]:
    config = guarded_config(mock_process, f"sqlite:///{tmp_path / 'guard.db'}")
    process = GatewayProcess(config, tmp_path, env={"MIRRORGATE_ADMIN_TOKEN": ADMIN_TOKEN})
    yield process
    process.terminate()


def rollout(http: httpx.Client, gateway: GatewayProcess) -> dict[str, Any]:
    response = http.get(gateway.url + "/admin/rollouts/bot", headers=ADMIN)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_a_stubborn_primary_is_switched_to_the_follower_and_restored(
    gateway: GatewayProcess,
) -> None:
    url = gateway.url + "/v1/chat/completions"
    with httpx.Client(timeout=10) as http:

        def ask(version: str, weight: int) -> httpx.Response:
            response = http.post(url, **rule_request("u", version, weight))
            assert response.status_code == 200, response.text
            return response

        for _ in range(25):
            assert ask("v1", 100).headers["x-mirrorgate-arm"] == "primary"

        def switched() -> bool:
            for _ in range(5):
                ask("v2", 150)
            return rollout(http, gateway)["phase"] == "rolled_back"

        wait_until(switched, timeout_s=60, what="the guard's switch")
        state = rollout(http, gateway)
        answer = ask("v2", 150)
        assert answer.headers["x-mirrorgate-arm"] == "fallback"
        assert answer.json()["choices"][0]["message"]["content"] == '{"max_weight": 150}'
        assert (state["actor"], state["rolled_back_to"]) == ("guard", "fallback")
        assert state["serving"] == {
            "primary": "rule-follower", "arm": "fallback", "canary": None,
            "canary_weight_percent": 0.0,
        }  # fmt: skip
        assert "keeps the old rule shipping" in gateway.output()

        env = {**os.environ, "MIRRORGATE_ADMIN_TOKEN": ADMIN_TOKEN, "MIRRORGATE_URL": gateway.url}
        done = subprocess.run(
            [sys.executable, "-m", "proxy.cli", "rollout", "restore", "bot", "--reason", "fixed"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        back = ask("v2", 150)
        assert back.headers["x-mirrorgate-arm"] == "primary"
        assert back.json()["choices"][0]["message"]["content"] == '{"max_weight": 100}'
