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
from tests.webhook_receiver import WebhookReceiver

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


def _ask(http: httpx.Client, gateway: GatewayProcess, version: str, weight: int) -> httpx.Response:
    response = http.post(gateway.url + "/v1/chat/completions", **rule_request("u", version, weight))
    assert response.status_code == 200, response.text
    return response


def _killed_and_restarted(
    first: GatewayProcess, config: dict[str, Any], tmp_path: Path, env: dict[str, str]
) -> GatewayProcess:
    """SIGKILL `first` (no drain, no goodbye) and start another gateway on the same store."""
    first.proc.kill()
    first.proc.wait(10)
    return GatewayProcess(config, tmp_path, env=env)


def test_after_a_sigkill_the_guard_does_not_alert_twice(tmp_path: Path, mock_process: str) -> None:
    """A gateway whose guard alerted is SIGKILLed; the next one on the same store keeps looking
    at the same regression and sends no second alert (the alert was claimed in the store)."""
    receiver = WebhookReceiver()
    config = guarded_config(mock_process, f"sqlite:///{tmp_path / 'guard.db'}")
    config["routes"]["bot"]["guard"]["on_rule_regression"] = "alert"
    config["alerts"] = {"sinks": [{"type": "webhook", "url": receiver.url}]}
    env = {"MIRRORGATE_ADMIN_TOKEN": ADMIN_TOKEN, "MIRRORGATE_LOG_LEVEL": "debug"}
    first = GatewayProcess(config, tmp_path, env=env)
    second: GatewayProcess | None = None
    try:
        with httpx.Client(timeout=10) as http:
            for _ in range(25):
                _ask(http, first, "v1", 100)

            def alerted() -> bool:
                for _ in range(5):
                    _ask(http, first, "v2", 150)
                return any(b.get("kind") == "rule_regression" for b in receiver.bodies)

            wait_until(alerted, timeout_s=60, what="the guard's alert")
            second = restarted = _killed_and_restarted(first, config, tmp_path, env)

            def looked_again() -> bool:  # each look logs its verdict at debug level
                for _ in range(3):
                    _ask(http, restarted, "v2", 150)
                return restarted.output().count("guard of bot on shipping@v2") >= 5

            wait_until(looked_again, timeout_s=60, what="the new gateway's guard looking")
            assert rollout(http, restarted)["phase"] is None  # alert only: nothing switched
        regressions = [b for b in receiver.bodies if b.get("kind") == "rule_regression"]
        assert len(regressions) == 1, regressions
        assert regressions[0]["rule_version"] == "v2"
    finally:
        if second is not None:
            second.terminate()
        first.terminate()
        receiver.close()


def test_after_a_sigkill_the_guards_switch_is_still_served(
    tmp_path: Path, mock_process: str
) -> None:
    config = guarded_config(mock_process, f"sqlite:///{tmp_path / 'guard.db'}")
    env = {"MIRRORGATE_ADMIN_TOKEN": ADMIN_TOKEN}
    first = GatewayProcess(config, tmp_path, env=env)
    second: GatewayProcess | None = None
    try:
        with httpx.Client(timeout=10) as http:
            for _ in range(25):
                _ask(http, first, "v1", 100)

            def switched() -> bool:
                for _ in range(5):
                    _ask(http, first, "v2", 150)
                return rollout(http, first)["phase"] == "rolled_back"

            wait_until(switched, timeout_s=60, what="the guard's switch")
            second = _killed_and_restarted(first, config, tmp_path, env)
            answer = _ask(http, second, "v2", 150)
            assert answer.headers["x-mirrorgate-arm"] == "fallback"
            assert answer.json()["choices"][0]["message"]["content"] == '{"max_weight": 150}'
            state = rollout(http, second)
            assert (state["actor"], state["serving"]["primary"]) == ("guard", "rule-follower")
    finally:
        if second is not None:
            second.terminate()
        first.terminate()
