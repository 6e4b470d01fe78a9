"""Debian's Prometheus and Alertmanager as real child processes on 127.0.0.1, for end-to-end tests.

Each runs from its own binary in a temporary folder (config, data, log), on a free port, and is
stopped by its PID. Use the `start_prometheus` / `start_alertmanager` fixtures of
tests/e2e/conftest.py (skipped when the binaries are missing, failed with
MIRRORGATE_REQUIRE_SERVICES=1), or these classes directly in wider-scoped fixtures.
"""

from __future__ import annotations

import math
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import require_service, wait_until

PROMETHEUS = "prometheus"
ALERTMANAGER = "prometheus-alertmanager"  # Debian's name for the alertmanager binary


def require_binary(name: str) -> str:
    """The binary's path; skip (or fail under MIRRORGATE_REQUIRE_SERVICES=1) when missing."""
    path = shutil.which(name)
    require_service(name, path is not None, "apt-get install prometheus prometheus-alertmanager")
    assert path is not None
    return path


class BinaryProcess:
    """A server binary started in `folder`, its output in `folder/<name>.log`."""

    def __init__(self, name: str, args: Sequence[str], folder: Path) -> None:
        self.name = name
        self.log = folder / f"{name}.log"
        self._log_file = self.log.open("wb")
        self.proc = subprocess.Popen(
            [require_binary(name), *args],
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            cwd=folder,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, url: str) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                pytest.fail(f"{self.name} exited with {self.proc.returncode}:\n{self.output()}")
            try:
                return httpx.get(url, timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, timeout_s=30, what=f"{self.name} to be ready")

    def stop(self, timeout_s: float = 15) -> None:
        """SIGTERM this process (by its PID), then SIGKILL it if it lingers."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()


class PrometheusProcess(BinaryProcess):
    """Prometheus scraping `scrape_targets` ({job: ["127.0.0.1:port", …]}) every
    `scrape_interval`, evaluating `rule_files` as often, and sending alerts to `alertmanager`
    (a base URL) with a 1 s resend delay so a firing alert is delivered at once."""

    def __init__(
        self,
        folder: Path,
        port: int,
        scrape_targets: Mapping[str, Sequence[str]],
        rule_files: Sequence[Path] = (),
        alertmanager: str | None = None,
        scrape_interval_s: float = 1.0,
    ) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.url = f"http://127.0.0.1:{port}"
        self.scrape_interval_s = scrape_interval_s
        interval = f"{scrape_interval_s:g}s"
        config: dict[str, Any] = {
            "global": {
                "scrape_interval": interval,
                "scrape_timeout": interval,
                "evaluation_interval": interval,
            },
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": list(targets)}]}
                for job, targets in scrape_targets.items()
            ],
            "rule_files": [str(path) for path in rule_files],
        }
        if alertmanager is not None:
            host = alertmanager.removeprefix("http://").rstrip("/")
            config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [host]}]}]}
        self.config_path = folder / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config))
        super().__init__(
            PROMETHEUS,
            [
                f"--config.file={self.config_path}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--rules.alert.resend-delay=1s",
                "--log.level=warn",
            ],
            folder,
        )
        self.wait_ready(self.url + "/-/ready")

    def api(self, path: str, **params: Any) -> Any:
        """GET /api/v1/<path>; the `data` of a successful answer (fails the test otherwise)."""
        response = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        body = response.json()
        if response.status_code != 200 or body.get("status") != "success":
            pytest.fail(f"Prometheus {path} {params}: {response.status_code} {body}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's result (a vector)."""
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return list(self.api("query", **params)["result"])

    def query_range(
        self, expr: str, start: float, end: float, step_s: float = 1.0
    ) -> list[dict[str, Any]]:
        """A range query's result (a matrix), as Grafana's time series panels ask for it."""
        data = self.api(
            "query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{step_s:g}"
        )
        return list(data["result"])

    def wait_for_targets_up(self, job: str, timeout_s: float = 30) -> None:
        def up() -> bool:
            samples = self.query(f'up{{job="{job}"}}')
            return bool(samples) and all(s["value"][1] == "1" for s in samples)

        wait_until(up, timeout_s=timeout_s, what=f"Prometheus to scrape job {job}")

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.api("alerts")["alerts"])


def has_finite_value(result: list[dict[str, Any]]) -> bool:
    """True when a query result holds at least one number that is not NaN or ±Inf: a panel
    would draw something."""
    for series in result:
        points = series.get("values") or [series["value"]]
        if any(math.isfinite(float(value)) for _ts, value in points):
            return True
    return False


def alertmanager_config(
    webhook_url: str,
    bearer_token: str | None = None,
    matchers: Sequence[str] = ('mirrorgate_action="rollback"', 'mirrorgate_origin!="mirrorgate"'),
) -> dict[str, Any]:
    """An Alertmanager config that sends alerts matching `matchers` to `webhook_url` (mirrorgate's
    /hooks/alertmanager) at once: group_wait 1 s, group_interval 5 s. Alertmanager 0.25 rejects
    `timeout` and `url_file` in webhook_configs, so neither is used."""
    webhook: dict[str, Any] = {"url": webhook_url, "send_resolved": True}
    if bearer_token is not None:
        webhook["http_config"] = {"authorization": {"credentials": bearer_token}}
    return {
        "route": {
            "receiver": "blackhole",
            "group_by": ["alertname", "mirrorgate_route"],
            "group_wait": "1s",
            "group_interval": "5s",
            "repeat_interval": "1h",
            "routes": [{"receiver": "mirrorgate", "matchers": list(matchers)}],
        },
        "receivers": [{"name": "blackhole"}, {"name": "mirrorgate", "webhook_configs": [webhook]}],
    }


class AlertmanagerProcess(BinaryProcess):
    """Alertmanager with `config` (see `alertmanager_config`), clustering off."""

    def __init__(self, folder: Path, port: int, config: Mapping[str, Any]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.url = f"http://127.0.0.1:{port}"
        self.config_path = folder / "alertmanager.yml"
        self.config_path.write_text(yaml.safe_dump(dict(config)))
        super().__init__(
            ALERTMANAGER,
            [
                f"--config.file={self.config_path}",
                f"--storage.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",
                "--log.level=warn",
            ],
            folder,
        )
        self.wait_ready(self.url + "/-/ready")

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts Alertmanager holds now (API v2)."""
        return list(httpx.get(self.url + "/api/v2/alerts", timeout=10).json())


def elapsed_since(start: float) -> str:
    """A Prometheus duration covering the time since `start` (for `$__range`)."""
    return f"{math.ceil(time.time() - start) + 1}s"
