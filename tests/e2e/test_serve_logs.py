"""`mirrorgate serve` as a real process: its JSON log lines (uvicorn's included, the access line,
the upstream warning), and the one-line start-up failures a user can fix."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.conftest import Process, free_port

pytestmark = pytest.mark.e2e

MESSAGES = [{"role": "user", "content": "a prompt that must not be logged"}]


def config(store_url: str, mock_url: str = "http://127.0.0.1:9") -> dict[str, Any]:
    return {
        "store": {"url": store_url, "bodies": "none"},
        "models": {
            "echo": {"provider": "openai", "base_url": mock_url + "/v1", "model": "echo",
                     "api_key_env": "E2E_KEY"},
            # Nothing listens on the discard port: every call is refused at once.
            "dead": {"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "x",
                     "api_key_env": "E2E_KEY"},
        },
        "routes": {"echo": {"primary": "echo"}, "saved": {"primary": "dead", "fallback": "echo"}},
    }  # fmt: skip


ENV = {"E2E_KEY": "sk-e2e-not-a-secret", "MIRRORGATE_FEEDBACK_SIGNING_KEY": "k" * 40}


def test_json_logs_are_one_object_per_line_with_the_access_line_and_the_upstream_warning(
    tmp_path: Path, mock_process: str
) -> None:
    port = free_port()
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config(f"sqlite:///{tmp_path / 'gw.db'}", mock_process)))
    gateway = Process(
        ["serve", "--config", str(path), "--port", str(port), "--log-format", "json"],
        tmp_path / "gw.log",
        ENV,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        gateway.wait_ready(url + "/readyz", "mirrorgate serve")
        for route in ("echo", "saved"):
            answer = httpx.post(
                url + "/v1/chat/completions", json={"model": route, "messages": MESSAGES}
            )
            assert answer.status_code == 200
        assert httpx.get(url + "/v1/chat/completions").status_code == 405
    finally:
        assert gateway.terminate() == 0  # the access lines are written before it drains
    lines = [json.loads(line) for line in gateway.output().splitlines()]  # every line is JSON
    assert all({"ts", "level", "logger", "msg"} <= set(line) for line in lines)
    assert any(line["logger"] == "uvicorn.error" for line in lines)
    access = [line for line in lines if line["logger"] == "mirrorgate.access"]
    assert [(a["route"], a["arm"], a["target"], a["http_status"]) for a in access] == [
        ("echo", "primary", "echo", 200),
        ("saved", "fallback", "echo", 200),
    ]
    assert all(a["tokens_out"] > 0 and a["duration_ms"] > 0 for a in access)
    (warning,) = [line for line in lines if line["logger"] == "mirrorgate.upstream"]
    assert warning["level"] == "WARNING" and warning["target"] == "dead"
    assert warning["error_class"] and warning["request_id"] == access[1]["request_id"]
    text = gateway.output()
    assert "must not be logged" not in text and "sk-e2e" not in text


def serve_fails(tmp_path: Path, store_url: str, *flags: str) -> list[str]:
    """Run `serve`, expect exit 1; return its stderr lines."""
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config(store_url)))
    done = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "serve", "--config", str(path), *flags],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env={**ENV, "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr.splitlines()


def test_start_up_failures_are_one_line_and_exit_1(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "folder"
    (line,) = serve_fails(tmp_path, f"sqlite:///{missing / 'x.db'}", "--port", "0")
    assert line == f"mirrorgate: cannot use the store at sqlite:///{missing / 'x.db'}: " + (
        f"the directory {missing} does not exist"
    )
    refused = "postgresql+psycopg://mg:hunter2@127.0.0.1:9/test"
    (line,) = serve_fails(tmp_path, refused, "--port", "0")
    assert line.startswith("mirrorgate: cannot use the store at postgresql+psycopg://mg:***@")
    assert "Connection refused" in line and "hunter2" not in line
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        lines = serve_fails(tmp_path, f"sqlite:///{tmp_path / 'ok.db'}", "--port", str(port))
    assert lines == [f"mirrorgate: port {port} on 127.0.0.1 is in use"]
