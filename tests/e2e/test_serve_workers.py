"""`mirrorgate serve --workers 2` as real processes on one port, sharing one PostgreSQL store:
new connections reach both workers, exactly one decides, a route change made through one is
applied by both within 2 s, a killed worker is replaced, a reload reaches both, SIGTERM stops all
with every request recorded, a stop during start-up is clean, and a worker that cannot start
stops the whole command.

Which worker answered is read from `GET /admin/rollouts` (`replica` is host:pid); every call
here opens a connection of its own, so the kernel picks a worker's socket afresh each time."""

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
import sqlalchemy as sa
import yaml

from tests.conftest import wait_until
from tests.e2e.conftest import (
    ADMIN,
    ADMIN_TOKEN,
    GatewayProcess,
    Process,
    free_port,
    rollout_gateway_config,
)
from tests.rollout_scene import rule_request

pytestmark = pytest.mark.e2e

ROUTE_REFRESH_S = 1.0
"""`server.route_refresh_s`, left at its default."""


def replica(gateway: GatewayProcess) -> dict[str, Any]:
    """`GET /admin/rollouts` on a new connection: whichever worker the kernel picked."""
    response = httpx.get(gateway.url + "/admin/rollouts", headers=ADMIN, timeout=10)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def pid_of(status: dict[str, Any]) -> int:
    return int(status["replica"].rpartition(":")[2])


def worker_pids(parent: int) -> set[int]:
    """The parent's live children, from /proc (the workers it forked)."""
    children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    return {int(pid) for pid in children}


def seen_on_every_worker(
    gateway: GatewayProcess, wanted: Callable[[dict[str, Any]], bool]
) -> Callable[[], bool]:
    """A predicate: true once every live worker answered with a status meeting `wanted`
    (polling `/admin/rollouts` on new connections; an older answer of a worker is replaced by
    its newer one)."""
    latest: dict[int, dict[str, Any]] = {}

    def check() -> bool:
        status = replica(gateway)
        latest[pid_of(status)] = status
        pids = worker_pids(gateway.pid)
        return pids <= set(latest) and all(wanted(latest[pid]) for pid in pids)

    return check


def metric(scrape: str, name: str, **labels: str) -> float:
    """The sum of every sample of `name` carrying `labels` in an exposition."""
    total = 0.0
    for line in scrape.splitlines():
        series, _, value = line.rpartition(" ")
        if series.partition("{")[0] == name and all(
            f'{k}="{v}"' in series for k, v in labels.items()
        ):
            total += float(value)
    return total


def stored_exchanges(db_url: str) -> int:
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT count(*) FROM exchanges")).scalar_one())
    finally:
        engine.dispose()


@pytest.fixture
def workers_gateway(
    tmp_path: Path, mock_process: str, pg_schema: tuple[str, str]
) -> Iterator[GatewayProcess]:
    """`serve` with `server.workers: 2`, route `bot` with a canary (rollout_gateway_config)."""
    config = rollout_gateway_config(mock_process, pg_schema[0])
    config["server"] = {"workers": 2}
    gateway = GatewayProcess(config, tmp_path, env={"MIRRORGATE_ADMIN_TOKEN": ADMIN_TOKEN})
    # One worker's /readyz answers before the other is up: the parent's line says both are.
    wait_until(lambda: "(2 workers)" in gateway.output(), what="the parent saying it listens")
    yield gateway
    gateway.terminate()


def test_two_workers_serve_one_port_one_decides_and_sigterm_stops_both_with_every_request_kept(
    workers_gateway: GatewayProcess, pg_schema: tuple[str, str]
) -> None:
    gateway = workers_gateway
    assert len(worker_pids(gateway.pid)) == 2
    assert f"listening on http://127.0.0.1:{gateway.port} (2 workers)" in gateway.output()

    # Both workers answer on the one port; exactly one holds the decider lock.
    wait_until(
        seen_on_every_worker(gateway, lambda status: True), what="an answer from each worker"
    )
    decides: dict[int, bool] = {}

    def one_decider() -> bool:
        status = replica(gateway)
        decides[pid_of(status)] = status["decider"]
        return set(decides) == worker_pids(gateway.pid) and list(decides.values()).count(True) == 1

    wait_until(one_decider, what="exactly one worker deciding")

    sent = 40
    for i in range(sent):
        answer = httpx.post(
            gateway.url + "/v1/chat/completions", **rule_request(f"user-{i}"), timeout=10
        )
        assert answer.status_code == 200, answer.text

    # One scrape, whichever worker takes it, has both workers' samples, each labelled; their
    # request counts add up to what was sent, and both workers served some.
    scrape = httpx.get(gateway.url + "/metrics", timeout=10).text
    assert scrape.count("# TYPE mirrorgate_requests_total counter") == 1
    assert 'mirrorgate_worker_up{worker="0"} 1.0' in scrape
    assert 'mirrorgate_worker_up{worker="1"} 1.0' in scrape
    served = {
        worker: metric(scrape, "mirrorgate_requests_total", route="bot", worker=worker)
        for worker in ("0", "1")
    }
    assert sum(served.values()) == sent and all(served.values()), served

    workers = worker_pids(gateway.pid)
    assert gateway.terminate() == 0
    output = gateway.output()
    for pid in workers:
        assert f"(pid {pid}) exited (exit code 0)" in output
    assert stored_exchanges(pg_schema[0]) == sent


def test_a_route_change_through_one_worker_is_applied_by_both_within_2_s(
    workers_gateway: GatewayProcess,
) -> None:
    gateway = workers_gateway
    started = httpx.post(
        gateway.url + "/admin/rollouts/bot/start", headers=ADMIN, json={}, timeout=10
    )
    assert started.status_code == 200, started.text
    revision = started.json()["rollout"]["revision"]

    def bot(status: dict[str, Any]) -> dict[str, Any]:
        return next(r for r in status["rollouts"] if r["route"] == "bot")

    # Both workers route with the canary at its first step within 2 s (plus one refresh interval
    # of tolerance for the polling itself), as replicas do.
    wait_until(
        seen_on_every_worker(
            gateway,
            lambda s: bot(s)["revision"] == revision and bot(s)["weight_percent"] == 50.0,
        ),
        timeout_s=2.0 + ROUTE_REFRESH_S,
        what="both workers applying the start",
    )


def test_a_killed_worker_is_replaced_and_the_port_keeps_serving(
    workers_gateway: GatewayProcess,
) -> None:
    gateway = workers_gateway
    before = worker_pids(gateway.pid)
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    wait_until(
        lambda: len(worker_pids(gateway.pid) - before) == 1
        and victim not in worker_pids(gateway.pid),
        what="the parent forking a replacement",
    )
    after = worker_pids(gateway.pid)
    wait_until(
        seen_on_every_worker(gateway, lambda status: pid_of(status) in after),
        what="both workers, the new one too, answering on the port",
    )
    output = gateway.output()
    assert f"(pid {victim}) exited (killed by SIGKILL): restarting it in 0.5s" in output
    answer = httpx.post(gateway.url + "/v1/chat/completions", **rule_request("u"), timeout=10)
    assert answer.status_code == 200


def test_sighup_and_one_reload_call_reach_both_workers(workers_gateway: GatewayProcess) -> None:
    gateway = workers_gateway
    config = yaml.safe_load(gateway.config_path.read_text())

    def add_route(name: str) -> None:
        config["routes"][name] = {"primary": "echo"}
        gateway.config_path.write_text(yaml.safe_dump(config))

    def serves(name: str) -> Callable[[dict[str, Any]], bool]:
        return lambda status: name in {r["route"] for r in status["rollouts"]}

    add_route("late")
    os.kill(gateway.pid, signal.SIGHUP)
    wait_until(seen_on_every_worker(gateway, serves("late")), what="both workers reloading")

    # One POST lands on one worker, which reloads itself and has the parent reload the other.
    add_route("later")
    reloaded = httpx.post(gateway.url + "/admin/reload", headers=ADMIN, json={}, timeout=10)
    assert reloaded.status_code == 200, reloaded.text
    assert reloaded.json()["changed"] == ["routes.later"]
    wait_until(seen_on_every_worker(gateway, serves("later")), what="both workers reloading")


def test_a_worker_that_cannot_start_stops_the_command_with_its_reason(tmp_path: Path) -> None:
    port = free_port()
    dead_store = free_port()  # nothing listens there: the connection is refused at once
    config = {
        "server": {"port": port, "workers": 2},
        "store": {"url": f"postgresql+psycopg://nobody@127.0.0.1:{dead_store}/none"},
        "models": {"m": {"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}},
        "routes": {"r": {"primary": "m"}},
    }
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "serve", "--config", str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    problems = [line for line in done.stderr.splitlines() if line.startswith("mirrorgate: ")]
    assert len(problems) == 1, done.stderr
    assert problems[0].startswith("mirrorgate: cannot use the store at postgresql+psycopg://")
    assert "listening on" not in done.stderr


@pytest.mark.parametrize("signo", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_while_the_workers_are_starting_is_a_clean_stop(
    tmp_path: Path, signo: signal.Signals
) -> None:
    # A store that takes the connection and never answers holds every worker in its start-up
    # (connecting to the store) for as long as the test needs.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    config = {
        "server": {"port": free_port(), "workers": 2},
        "store": {"url": f"postgresql+psycopg://nobody@127.0.0.1:{silent.getsockname()[1]}/x"},
        "models": {"m": {"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}},
        "routes": {"r": {"primary": "m"}},
    }
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config))
    gateway = Process(["serve", "--config", str(path)], tmp_path / "gw.log")
    try:
        wait_until(
            lambda: "worker 1 started" in gateway.output() or gateway.proc.poll() is not None,
            timeout_s=60,
            what="the parent forking its second worker",
        )
        workers = worker_pids(gateway.pid)
        assert len(workers) == 2, gateway.output()
        gateway.proc.send_signal(signo)
        assert gateway.proc.wait(60) == 0, gateway.output()
    finally:
        gateway.terminate()
        silent.close()
    output = gateway.output()
    assert "listening on" not in output
    assert "Traceback" not in output
    assert output.count(f"{signo.name} forwarded to the workers") == 1
    for pid in workers:
        assert f"(pid {pid}) exited (exit code 0)" in output


def test_the_workers_flag_forks_and_sigint_is_forwarded_once_to_each_worker(
    tmp_path: Path, mock_process: str, pg_schema: tuple[str, str]
) -> None:
    port = free_port()
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(rollout_gateway_config(mock_process, pg_schema[0])))
    gateway = Process(
        ["serve", "--config", str(path), "--port", str(port), "--workers", "2"],
        tmp_path / "gw.log",
        {"MIRRORGATE_ADMIN_TOKEN": ADMIN_TOKEN},
    )
    try:
        wait_until(
            lambda: "(2 workers)" in gateway.output() or gateway.proc.poll() is not None,
            timeout_s=60,
            what="the parent saying it listens",
        )
        assert f"listening on http://127.0.0.1:{port} (2 workers)" in gateway.output()
        workers = worker_pids(gateway.pid)
        assert len(workers) == 2
        gateway.proc.send_signal(signal.SIGINT)
        assert gateway.proc.wait(60) == 0
    finally:
        gateway.terminate()
    output = gateway.output()
    assert output.count("SIGINT forwarded to the workers") == 1
    for pid in workers:
        assert f"(pid {pid}) exited (exit code 0)" in output
