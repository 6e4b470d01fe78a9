"""Reloading a real `mirrorgate serve` under load: `kill -HUP` after an edit of its file swaps the
configuration in with no request failing, a bad edit is rejected while serving goes on, and
SIGTERM still drains and exits 0."""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import wait_until
from tests.e2e.conftest import GatewayProcess

pytestmark = pytest.mark.e2e

CLIENTS = 4
MAX_REQUESTS = 20_000
"""A bound on the load, whatever happens: each client stops by itself at its share."""


class Load:
    """`CLIENTS` threads asking route `bot` back to back until stopped; every answer is kept."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.failures: list[str] = []
        self.served: list[str] = []
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(CLIENTS)]

    def _run(self) -> None:
        body = {"model": "bot", "messages": [{"role": "user", "content": "hi"}]}
        with httpx.Client(base_url=self.url, timeout=30) as client:
            for _ in range(MAX_REQUESTS // CLIENTS):
                if self.stop.is_set():
                    return
                try:
                    response = client.post("/v1/chat/completions", json=body)
                except httpx.HTTPError as exc:
                    with self.lock:
                        self.failures.append(repr(exc))
                    continue
                with self.lock:
                    if response.status_code != 200:
                        self.failures.append(f"{response.status_code} {response.text[:200]}")
                    else:
                        self.served.append(response.json()["model"])

    def count(self) -> int:
        with self.lock:
            return len(self.served) + len(self.failures)

    def models_after(self, mark: int) -> Counter[str]:
        with self.lock:
            return Counter(self.served[mark:])

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)


def reloads(url: str, result: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith(f'mirrorgate_config_reloads_total{{result="{result}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def edit(path: Path, change: Any) -> None:
    config = yaml.safe_load(path.read_text())
    change(config)
    path.write_text(yaml.safe_dump(config))


def test_sighup_reloads_under_load_without_a_failed_request(
    tmp_path: Path, mock_process: str
) -> None:
    models = {
        name: {"provider": "openai", "base_url": mock_process + "/v1", "model": name,
               "price": {"input_per_mtok": 1, "output_per_mtok": 2}}
        for name in ("echo", "stale")
    }  # fmt: skip
    config = {
        "store": {"url": f"sqlite:///{tmp_path / 'gw.db'}", "bodies": "none"},
        "models": models,
        "routes": {"bot": {"primary": "echo"}},
    }
    gateway = GatewayProcess(config, tmp_path)
    try:
        with Load(gateway.url) as load:
            wait_until(lambda: load.count() >= 40, what="steady load")
            assert load.models_after(0).keys() == {"echo"}

            def to_stale(c: dict[str, Any]) -> None:
                c["routes"]["bot"]["primary"] = "stale"

            edit(gateway.config_path, to_stale)
            os.kill(gateway.pid, signal.SIGHUP)
            wait_until(lambda: reloads(gateway.url, "applied") == 1, what="the reload applied")
            mark = load.count()
            wait_until(lambda: load.count() >= mark + 40, what="load after the reload")
            # New requests are served per the new file (answers made before the reload's mark
            # may still end on the old primary: they started before it).
            assert load.models_after(mark + CLIENTS).keys() == {"stale"}

            gateway.config_path.write_text("routes: [this is not a config")
            os.kill(gateway.pid, signal.SIGHUP)
            wait_until(lambda: reloads(gateway.url, "rejected") == 1, what="the bad edit rejected")
            mark = load.count()
            wait_until(lambda: load.count() >= mark + 40, what="load after the rejection")
            assert load.models_after(mark).keys() == {"stale"}
        assert load.failures == []
        assert gateway.proc.poll() is None  # SIGHUP never stopped it
        assert "rejected, the running configuration stays" in gateway.output()
    finally:
        code = gateway.terminate()
    assert code == 0  # SIGTERM still drains and exits 0
