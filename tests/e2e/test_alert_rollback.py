"""An SRE's own alert rolls a canary back: Debian's Prometheus evaluates mirrorgate's shipped
`MirrorgateCanaryErrorRate` rule on a real gateway's metrics, Alertmanager delivers the firing
alert to `/hooks/alertmanager`, and the gateway rolls the route back — once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import wait_until
from tests.e2e.conftest import GatewayProcess, Process, free_port
from tests.e2e.monitoring import AlertmanagerProcess, PrometheusProcess, alertmanager_config

pytestmark = pytest.mark.e2e

RULES = Path(__file__).resolve().parents[2] / "prometheus" / "mirrorgate-rules.yml"
TOKEN = "am-t0ken"
AUTH = {"authorization": f"Bearer {TOKEN}"}
ROUTE = "support-bot"
BEHAVIOR = {
    "record_requests": False,
    "default": {"answer": {"type": "echo"}},
    "models": {"flaky": {"error": {"status": 503, "rate": 0.6}}},
}


def shipped_rule_without_its_wait(folder: Path, alert: str) -> Path:
    """The shipped rule, expression and labels untouched, with `for: 0s` so the test does not
    wait the two minutes a production team would."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    rules = [r for g in groups for r in g["rules"] if r.get("alert") == alert]
    assert len(rules) == 1, f"{alert} is not in {RULES}"
    rule = {**rules[0], "for": "0s"}
    path = folder / "rule.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "e2e", "rules": [rule]}]}))
    return path


class Traffic:
    def __init__(self, url: str) -> None:
        self.url = url
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=10) as client:
            n = 0
            while not self.stop.is_set():
                n += 1
                try:
                    client.post(
                        "/v1/chat/completions",
                        json={"model": ROUTE, "messages": [{"role": "user", "content": f"q{n}"}]},
                    )
                except httpx.HTTPError:
                    return  # the gateway is being stopped
                self.stop.wait(0.02)  # pacing (~40 requests a second), not synchronisation

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


def test_the_shipped_canary_error_alert_rolls_the_route_back_through_alertmanager(
    tmp_path: Path,
    start_prometheus: Callable[..., PrometheusProcess],
    start_alertmanager: Callable[..., AlertmanagerProcess],
) -> None:
    behavior = tmp_path / "behavior.yaml"
    behavior.write_text(yaml.safe_dump(BEHAVIOR))
    mock_port = free_port()
    mock = Process(
        ["mock-upstream", "--port", str(mock_port), "--behavior", str(behavior)],
        tmp_path / "mock.log",
    )
    processes: list[Process] = [mock]
    traffic: Traffic | None = None
    try:
        mock_url = f"http://127.0.0.1:{mock_port}"
        mock.wait_ready(mock_url + "/_mock/stats", "mock-upstream")

        def model(name: str) -> dict[str, Any]:
            return {"provider": "openai", "base_url": mock_url + "/v1", "model": name}

        config = {
            "server": {"route_refresh_s": 0.5},
            "store": {"url": f"sqlite:///{tmp_path / 'gw.db'}"},
            "models": {"prod": model("prod"), "flaky": model("flaky"), "safe": model("safe")},
            "routes": {
                ROUTE: {
                    "primary": "prod",
                    "fallback": "safe",
                    # The judge looks once an hour here: the rollback must come from Prometheus.
                    "canary": {"model": "flaky", "steps": [50], "analysis": {"interval_s": 3600}},
                }
            },
        }
        gateway = GatewayProcess(config, tmp_path, env={"MIRRORGATE_ADMIN_TOKEN": TOKEN})
        processes.append(gateway)
        alertmanager = start_alertmanager(
            alertmanager_config(gateway.url + "/hooks/alertmanager", bearer_token=TOKEN)
        )
        prometheus = start_prometheus(
            scrape_targets={"mirrorgate": [f"127.0.0.1:{gateway.port}"]},
            rule_files=[shipped_rule_without_its_wait(tmp_path, "MirrorgateCanaryErrorRate")],
            alertmanager=alertmanager.url,
        )
        prometheus.wait_for_targets_up("mirrorgate")
        with httpx.Client(base_url=gateway.url, headers=AUTH, timeout=10) as admin:
            admin.post(f"/admin/rollouts/{ROUTE}/start", json={}).raise_for_status()
            traffic = Traffic(gateway.url)

            def rollout() -> dict[str, Any]:
                body: dict[str, Any] = admin.get(f"/admin/rollouts/{ROUTE}").json()
                return body

            state = wait_until(
                lambda: (body := rollout())["phase"] == "rolled_back" and body,
                timeout_s=90,
                what="the alert-driven rollback",
            )
            assert state["actor"] == "alertmanager"
            assert "MirrorgateCanaryErrorRate" in state["reason"]
            # The canary's errors roll the canary back; the healthy primary keeps the route.
            assert state["rolled_back_to"] == "primary"
            assert state["serving"] == {
                "primary": "prod", "arm": "primary", "canary": None, "canary_weight_percent": 0.0
            }  # fmt: skip
            fired = [a for a in prometheus.alerts() if a["state"] == "firing"]
            assert fired and fired[0]["labels"]["mirrorgate_route"] == ROUTE

            # Alertmanager keeps re-sending while the alert fires; the route rolled back once.
            text = admin.get("/metrics").text
            assert (
                f'mirrorgate_rollbacks_total{{reason="alertmanager",route="{ROUTE}",'
                f'target="flaky"}} 1.0' in text
            )
            wait_until(
                lambda: prometheus.query(
                    f'mirrorgate_rollout_phase{{route="{ROUTE}",phase="rolled_back"}} == 1'
                ),
                what="Prometheus to scrape the rolled-back phase",
            )
            assert [t["action"] for t in rollout()["transitions"]] == ["rollback", "start"]
    finally:
        if traffic is not None:
            traffic.close()
        for process in reversed(processes):
            process.terminate()
