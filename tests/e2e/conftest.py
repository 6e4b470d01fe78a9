"""End-to-end fixtures: mirrorgate's own commands as real processes on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import BEHAVIOR, wait_until
from tests.e2e.monitoring import AlertmanagerProcess, PrometheusProcess
from tests.rollout_scene import rule_request


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/e2e is marked `e2e` (`make test-fast` leaves them out), whether or
    not its module says so."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.e2e)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Process:
    """A mirrorgate command running as a child process; stopped by its PID only."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self._log_file = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "proxy.cli", *args],
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, url: str, what: str) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                pytest.fail(f"{what} exited with {self.proc.returncode}:\n{self.output()}")
            try:
                return httpx.get(url, timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, timeout_s=30, what=what)

    def terminate(self, timeout_s: float = 30) -> int:
        """SIGTERM, as an orchestrator would; return the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()
        return int(self.proc.returncode)


@pytest.fixture(scope="session")
def mock_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`mirrorgate mock-upstream` with the shared scripted behaviour; yields its URL."""
    folder = tmp_path_factory.mktemp("mock")
    behavior = folder / "behavior.yaml"
    behavior.write_text(yaml.safe_dump({**BEHAVIOR, "record_requests": False}))
    port = free_port()
    process = Process(
        ["mock-upstream", "--port", str(port), "--behavior", str(behavior)], folder / "mock.log"
    )
    url = f"http://127.0.0.1:{port}"
    process.wait_ready(url + "/_mock/stats", "mock-upstream")
    yield url
    process.terminate()


class GatewayProcess(Process):
    """`mirrorgate serve` on a free port."""

    def __init__(self, config: dict[str, Any], folder: Path, env: dict[str, str] | None = None):
        self.port = free_port()
        config = {**config, "server": {**config.get("server", {}), "port": self.port}}
        self.config_path = folder / f"gateway-{self.port}.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        super().__init__(
            ["serve", "--config", str(self.config_path)], folder / f"gateway-{self.port}.log", env
        )
        self.url = f"http://127.0.0.1:{self.port}"
        self.wait_ready(self.url + "/readyz", "mirrorgate serve")


@pytest.fixture
def start_gateway_process(
    tmp_path: Path, mock_process: str
) -> Iterator[Callable[..., GatewayProcess]]:
    """Start `mirrorgate serve` processes in front of the mock; all are stopped afterwards."""
    started: list[GatewayProcess] = []

    def start(db_url: str, **store: Any) -> GatewayProcess:
        config = {
            "store": {"url": db_url, "bodies": "none", **store},
            "models": {"echo": {"provider": "openai", "base_url": mock_process + "/v1",
                                "model": "echo",
                                "price": {"input_per_mtok": 1, "output_per_mtok": 2}}},
            "routes": {"echo": {"primary": "echo"}},
        }  # fmt: skip
        gateway = GatewayProcess(config, tmp_path)
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        gateway.terminate()


@pytest.fixture
def start_prometheus(tmp_path: Path) -> Iterator[Callable[..., PrometheusProcess]]:
    """Start Debian's Prometheus on free ports: `start_prometheus(scrape_targets={"mirrorgate":
    ["127.0.0.1:8080"]}, rule_files=[...], alertmanager=am.url)`; each is stopped by PID after
    the test. Skipped when the binary is missing (failed under MIRRORGATE_REQUIRE_SERVICES=1)."""
    started: list[PrometheusProcess] = []

    def start(**kwargs: Any) -> PrometheusProcess:
        port = free_port()
        server = PrometheusProcess(tmp_path / f"prometheus-{port}", port, **kwargs)
        started.append(server)
        return server

    yield start
    for server in reversed(started):
        server.stop()


@pytest.fixture
def start_alertmanager(tmp_path: Path) -> Iterator[Callable[..., AlertmanagerProcess]]:
    """Start Debian's Alertmanager on a free port: `start_alertmanager(alertmanager_config(
    gateway.url + "/hooks/alertmanager", bearer_token=...))`; each is stopped by PID after the
    test. Skipped when the binary is missing (failed under MIRRORGATE_REQUIRE_SERVICES=1)."""
    started: list[AlertmanagerProcess] = []

    def start(config: dict[str, Any]) -> AlertmanagerProcess:
        port = free_port()
        server = AlertmanagerProcess(tmp_path / f"alertmanager-{port}", port, config)
        started.append(server)
        return server

    yield start
    for server in reversed(started):
        server.stop()


# --- rollouts through real gateway processes ----------------------------------------------

ADMIN_TOKEN = "e2e-admin-t0ken"
ADMIN = {"authorization": f"Bearer {ADMIN_TOKEN}"}


def rollout_gateway_config(
    mock_url: str,
    db_url: str,
    *,
    steps: list[int] | None = None,
    step_interval_s: float = 3600,
    canary: str = "stale",
    metrics: list[str] | None = None,
    thresholds: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Route `bot`: primary `rule-follower` (answers the max_weight of its system prompt), a
    canary (by default `stale`, which always answers 100), fallback `echo`; rule `shipping`
    versioned by the `x-rule-version` header: v1 wants 100, v2 wants 150."""
    models = {
        name: {"provider": "openai", "base_url": mock_url + "/v1", "model": name, "timeout_s": 5,
               "price": {"input_per_mtok": 1, "output_per_mtok": 2}}
        for name in ("rule-follower", "stale", "echo")
    }  # fmt: skip
    analysis: dict[str, Any] = {
        "interval_s": 0.2,
        "min_samples": 20,
        "failure_limit": 2,
        "thresholds": {"min_samples_latency": 10, **(thresholds or {})},
    }
    if metrics is not None:
        analysis["metrics"] = metrics
    canary_spec = {
        "model": canary,
        "steps": steps or [50],
        "step_interval_s": step_interval_s,
        "sticky": "header:x-user-id",
        "analysis": analysis,
    }

    def version(equals: int) -> dict[str, Any]:
        check = {"name": "max-weight", "type": "json_path", "path": "$.max_weight"}
        return {"checks": [{**check, "equals": equals}]}

    return {
        "store": {"url": db_url, "bodies": "none"},
        "models": models,
        "routes": {"bot": {"primary": "rule-follower", "fallback": "echo", "canary": canary_spec}},
        "rules": {
            "shipping": {
                "routes": ["bot"],
                "version": "header:x-rule-version",
                "versions": {"v1": version(100), "v2": version(150)},
            }
        },
    }


@pytest.fixture
def start_rollout_gateway(
    tmp_path: Path, mock_process: str
) -> Iterator[Callable[..., GatewayProcess]]:
    """Start `mirrorgate serve` processes with route `bot` (see `rollout_gateway_config`) and the
    admin token; every one still running is stopped (SIGTERM, by PID) afterwards."""
    started: list[GatewayProcess] = []

    def start(db_url: str, **options: Any) -> GatewayProcess:
        config = rollout_gateway_config(mock_process, db_url, **options)
        gateway = GatewayProcess(config, tmp_path, env={"MIRRORGATE_ADMIN_TOKEN": ADMIN_TOKEN})
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        gateway.terminate()


class RolloutClient:
    """The calls the rollout tests make to gateway processes (one keep-alive client)."""

    def __init__(self) -> None:
        self.http = httpx.Client(timeout=10)

    def close(self) -> None:
        self.http.close()

    def ask(
        self, gateway: GatewayProcess, user: str, version: str = "v1", weight: int = 100
    ) -> httpx.Response:
        """One chat completion on route `bot` as `user`, under rule `version`."""
        response = self.http.post(
            gateway.url + "/v1/chat/completions", **rule_request(user, version, weight)
        )
        assert response.status_code == 200, response.text
        return response

    def arms(self, gateway: GatewayProcess, users: list[str], **kwargs: Any) -> dict[str, str]:
        """user → the arm (`x-mirrorgate-arm`) that served the user's request."""
        return {u: self.ask(gateway, u, **kwargs).headers["x-mirrorgate-arm"] for u in users}

    def rollout(self, gateway: GatewayProcess) -> dict[str, Any]:
        """`GET /admin/rollouts/bot`: state, live routing, transitions, verdicts."""
        response = self.http.get(gateway.url + "/admin/rollouts/bot", headers=ADMIN)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def replica(self, gateway: GatewayProcess) -> dict[str, Any]:
        """`GET /admin/rollouts`: every route, `store_reachable`, `replica`, `decider`."""
        response = self.http.get(gateway.url + "/admin/rollouts", headers=ADMIN)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def act(self, gateway: GatewayProcess, action: str) -> httpx.Response:
        return self.http.post(gateway.url + f"/admin/rollouts/bot/{action}", headers=ADMIN, json={})

    def metric(self, gateway: GatewayProcess, name: str, **labels: str) -> float:
        """The sum of every sample of `name` carrying `labels`."""
        total = 0.0
        for line in self.http.get(gateway.url + "/metrics").text.splitlines():
            series, _, value = line.rpartition(" ")
            if series.partition("{")[0] == name and all(
                f'{k}="{v}"' in series for k, v in labels.items()
            ):
                total += float(value)
        return total


@pytest.fixture
def rollout_client() -> Iterator[RolloutClient]:
    client = RolloutClient()
    yield client
    client.close()


# The console's browser fixtures (tests/e2e/console_browser.py), for every e2e test module.
from tests.e2e.console_browser import console_browser, start_console  # noqa: E402, F401
