"""`mirrorgate rollout` as a process of its own, from a shell, against a gateway on 127.0.0.1
(what it prints and its exit codes are tested in process in tests/proxy/cli/test_rollout.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from proxy.app.serve import GatewayServer
from tests.proxy.api.test_rollouts import ENV, TOKEN, rollout, rollout_config

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def gw(start_gateway_server: Callable[..., GatewayServer]) -> GatewayServer:
    return start_gateway_server(extra=rollout_config(steps=[30, 60]), env=ENV)


def test_the_console_entry_runs_as_a_process(gw: GatewayServer) -> None:
    env = {**os.environ, "MIRRORGATE_ADMIN_TOKEN": TOKEN, "MIRRORGATE_URL": gw.url}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "proxy.cli",
            "rollout",
            "start",
            "bot",
            "--reason",
            "from a shell",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("route bot: changed by start — now progressing")
    with httpx.Client(base_url=gw.url) as client:
        assert rollout(client)["reason"] == "from a shell"
    usage = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "rollout", "pause"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert usage.returncode == 2
    assert "rollout pause needs a ROUTE" in usage.stderr
