"""`mirrorgate experiment start|status|stop ROUTE` against a gateway in process: what it prints,
what it changes, and its exit codes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from proxy.cli.main import build_parser, cmd_experiment
from tests.asgi_driver import sync_transport
from tests.conftest import InProcessGateway
from tests.proxy.api.test_experiments import ENV, TOKEN, ask, experiment_extra

pytestmark = pytest.mark.usefixtures("quick_rollout_ticks")
Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def gw(start_gateway: Any, monkeypatch: pytest.MonkeyPatch) -> InProcessGateway:
    monkeypatch.setenv("MIRRORGATE_ADMIN_TOKEN", TOKEN)
    monkeypatch.delenv("MIRRORGATE_URL", raising=False)
    gateway: InProcessGateway = start_gateway(extra=experiment_extra(), env=ENV)
    return gateway


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], gw: InProcessGateway) -> Run:
    transport = sync_transport(gw.app_thread)

    def run_cli(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = cmd_experiment(build_parser().parse_args(["experiment", *args]), transport)
        out, err = capsys.readouterr()
        return code, out, err

    return run_cli


def test_start_status_stop(gw: InProcessGateway, run: Run) -> None:
    code, out, _ = run("status", "bot")
    assert code == 0 and "never started" in out
    code, out, _ = run("start", "bot", "--reason", "is cheaper as good")
    assert code == 0 and "start: done" in out and "running" in out
    assert "control" in out and "cheaper" in out and "terse" in out
    assert gw.gateway.experiments.running("bot") is not None
    code, out, _ = run("start", "bot")
    assert code == 0 and "nothing to change" in out
    for n in range(40):
        ask(gw, f"c{n}")
    decider = gw.gateway.controller.experiments
    assert decider is not None
    asyncio.run_coroutine_threadsafe(decider.tick(force=True), gw.loop).result(30)
    code, out, _ = run("status", "bot")
    assert code == 0 and "decision (" in out and "needs" in out
    code, out, _ = run("stop", "bot")
    assert code == 0 and "stopped" in out
    assert gw.gateway.experiments.running("bot") is None


def test_refusals_exit_1_with_one_line(
    gw: InProcessGateway, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = run("start", "nope")
    assert code == 1 and "no route 'nope'" in err
    code, _, err = run("start", "echo")
    assert code == 1 and "no experiment configured" in err
    monkeypatch.delenv("MIRRORGATE_ADMIN_TOKEN")
    code, _, err = run("start", "bot")
    assert code == 1 and "needs a token" in err
    assert gw.gateway.experiments.running("bot") is None


def test_usage_errors_exit_2() -> None:
    for args in (["experiment"], ["experiment", "pause", "bot"], ["experiment", "status"]):
        with pytest.raises(SystemExit) as exit_:
            build_parser().parse_args(args)
        assert exit_.value.code == 2
