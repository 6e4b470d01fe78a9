"""The three servers of the rig — mock upstream, mirrorgate, LiteLLM — and where they run.

Every server listens on 127.0.0.1 only. Config files and logs go to the run's work directory; the
gateway's SQLite database lives there too, so every run starts from an empty store.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import production
from bench.processes import ServerProcess, http_ok

HOST = "127.0.0.1"
PORT_BASE = int(os.environ.get("MIRRORGATE_BENCH_PORT_BASE", "18000"))
"""Ports are offsets from this (default 18000), so that two runs on one machine need not collide."""
MOCK_PORT = PORT_BASE + 999
CANDIDATE_MOCK_PORT = PORT_BASE + 998
"""A second mock, for the runs that give the candidate a mock of its own."""
MIRRORGATE_PORT = PORT_BASE + 80
LITELLM_PORT = PORT_BASE + 81
PRODUCTION_PORT = PORT_BASE + 82
"""The gateway of the `production` stage (PostgreSQL, tracing, the production-shaped route)."""
ROUTE = "bench"
"""The model name clients send: a mirrorgate route, and a LiteLLM model_name."""
UPSTREAM_MODEL = "fake"
"""The model name the mock upstream receives (and direct load sends)."""
SHADOW_ROUTE = "bench-shadow"
"""A second mirrorgate route: the same primary as `ROUTE`, plus the two shadows below."""
FAST_CANDIDATE = "cand-fast"
"""Shadow candidate that answers like the primary (no delay)."""
SLOW_CANDIDATE = "cand-slow"
"""Shadow candidate that answers after `SLOW_CANDIDATE_MS` (non-streams and streams alike)."""
SLOW_CANDIDATE_MS = 2000
PACED_MODEL = "fake-paced"
"""A primary that answers like a (fast) real model: after `PACED_LATENCY_MS`, streams too."""
PACED_LATENCY_MS = 50
"""Real LLM calls take hundreds of ms to seconds; 50 ms is a fast one. Short enough that the
gateway still serves ~300 req/s at c=16 (the shadows' cost is not drowned in the upstream's
wait: 1 ms is 2 % of it), long enough that the gateway's core is far from saturated (measured
7-11 % busy without shadows, 13-19 % with them), so that the overload shedding stays off and the
shadows run."""
PACED_ROUTE = "bench-paced"
"""The paced primary without shadows."""
PACED_SHADOW_ROUTE = "bench-paced-shadow"
"""The paced primary with the same two shadows as `SHADOW_ROUTE`."""


@dataclass(frozen=True)
class CpuLayout:
    """Which CPUs each party is pinned to (taskset -c syntax)."""

    gateway: str
    """The gateway under test (mirrorgate or LiteLLM; only one is under load at a time)."""
    mock: str
    load: str
    nice: int = 0
    """Scheduling niceness of everything the rig starts (negative: ahead of other work)."""

    def pin(self, cpus: str, argv: Sequence[str]) -> list[str]:
        """`argv` under `taskset -c cpus` and `nice -n` (both exec: the PID stays the command's)."""
        out = list(argv)
        if self.nice:
            out = ["nice", "-n", str(self.nice), *out]
        return ["taskset", "-c", cpus, *out] if cpus else out

    @classmethod
    def for_machine(cls, nice: int = 0) -> CpuLayout:
        """Give the gateway a core of its own; the mock and the client share what is left.

        On 2 CPUs: gateway on CPU 1, mock upstream and load generator on CPU 0. With 4 or more the
        load generator gets its own CPUs too.
        """
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            return cls("", "", "", nice)
        if len(cpus) < 4:
            return cls(str(cpus[1]), str(cpus[0]), str(cpus[0]), nice)
        return cls(str(cpus[1]), str(cpus[0]), ",".join(str(c) for c in cpus[2:]), nice)


@dataclass(frozen=True)
class Rig:
    """Paths and interpreters of one benchmark run."""

    repo: Path
    work: Path
    """Configs, logs, the SQLite database and profiles of this run."""
    python: Path
    """The project's interpreter (runs the mock, mirrorgate and the load generator)."""
    litellm_venv: Path
    layout: CpuLayout

    @staticmethod
    def repo_root() -> Path:
        return Path(__file__).resolve().parent.parent

    @classmethod
    def create(cls, work: Path, nice: int = 0) -> Rig:
        repo = cls.repo_root()
        work.mkdir(parents=True, exist_ok=True)
        venv_python = repo / ".venv" / "bin" / "python"
        python = venv_python if venv_python.exists() else Path(sys.executable)
        layout = CpuLayout.for_machine(nice)
        return cls(repo, work, python, repo / "bench" / ".venv-litellm", layout)


def mock_upstream(
    rig: Rig, port: int = MOCK_PORT, name: str = "mock-upstream", cpus: str = ""
) -> ServerProcess:
    """The mock model server: no request recording, no faults, no delays except for the slow
    candidate and the paced primary. The JSON-answering models of the production-shaped route
    (bench/production.py) answer at once.

    Both set `ttft_ms` as well as `latency_ms`: `latency_ms` only delays non-streamed answers
    (and shadows stream when the primary streams). After the first token a stream goes as fast as
    possible, so a paced stream takes about as long as a paced non-stream. `cpus` pins it
    elsewhere than the layout's mock CPUs (taskset -c syntax).
    """
    behavior = rig.work / "mock-behavior.yaml"
    behavior.write_text(
        "record_requests: false\n"
        "models:\n"
        f"  {SLOW_CANDIDATE}: {{latency_ms: {SLOW_CANDIDATE_MS}, ttft_ms: {SLOW_CANDIDATE_MS}}}\n"
        f"  {PACED_MODEL}: {{latency_ms: {PACED_LATENCY_MS}, ttft_ms: {PACED_LATENCY_MS}}}\n"
        + production.mock_behaviour()
    )
    argv = [
        str(rig.python), "-m", "proxy.cli", "--log-level", "warning", "mock-upstream",
        "--host", HOST, "--port", str(port), "--behavior", str(behavior),
    ]  # fmt: skip
    return ServerProcess(
        name, rig.layout.pin(cpus or rig.layout.mock, argv), cwd=rig.repo, env=_base_env(),
        ready=http_ok(f"http://{HOST}:{port}/healthz"),
        log_path=rig.work / ("mock.log" if name == "mock-upstream" else f"{name}.log"),
    )  # fmt: skip


def mirrorgate(rig: Rig, env: dict[str, str] | None = None) -> ServerProcess:
    """mirrorgate as a user would run it: `mirrorgate serve --config FILE`, default log level.

    Two routes with the same primary `UPSTREAM_MODEL` (answers at once): `ROUTE` (no shadows;
    every stage but `shadows` uses only it) and `SHADOW_ROUTE`, which mirrors every request to a
    fast and a slow candidate with the default shadow limits (`max_concurrency` 8,
    `server.max_shadow_calls` 1000). Two more, only for the shadow stage, with the paced primary
    `PACED_MODEL`: `PACED_ROUTE` (no shadows) and `PACED_SHADOW_ROUTE` (the same two shadows).
    Overload shedding keeps its defaults. `env` is added to the environment it runs in.
    """
    config = rig.work / "mirrorgate.yaml"
    for suffix in ("", "-wal", "-shm"):  # every run starts from an empty store
        (rig.work / f"gateway.db{suffix}").unlink(missing_ok=True)
    models = "".join(
        f"  {name}: {{provider: openai, "
        f'base_url: "http://{HOST}:{MOCK_PORT}/v1", model: {name}, '
        "price: {input_per_mtok: 0.15, output_per_mtok: 0.6}}\n"
        for name in (UPSTREAM_MODEL, PACED_MODEL, FAST_CANDIDATE, SLOW_CANDIDATE)
    )
    shadows = (
        "    shadows:\n"
        f"      - {{model: {FAST_CANDIDATE}, sample: 1.0}}\n"
        f"      - {{model: {SLOW_CANDIDATE}, sample: 1.0}}\n"
    )
    config.write_text(
        f"server: {{host: {HOST}, port: {MIRRORGATE_PORT}}}\n"
        f'store: {{url: "sqlite:///{rig.work / "gateway.db"}", bodies: none}}\n'
        f"models:\n{models}"
        "routes:\n"
        f"  {ROUTE}: {{primary: {UPSTREAM_MODEL}}}\n"
        f"  {SHADOW_ROUTE}:\n"
        f"    primary: {UPSTREAM_MODEL}\n"
        f"{shadows}"
        f"  {PACED_ROUTE}: {{primary: {PACED_MODEL}}}\n"
        f"  {PACED_SHADOW_ROUTE}:\n"
        f"    primary: {PACED_MODEL}\n"
        f"{shadows}"
    )
    argv = [str(rig.python), "-m", "proxy.cli", "serve", "--config", str(config)]
    return ServerProcess(
        "mirrorgate", rig.layout.pin(rig.layout.gateway, argv), cwd=rig.repo,
        env={**_base_env(), **(env or {})},
        ready=http_ok(f"http://{HOST}:{MIRRORGATE_PORT}/readyz"),
        log_path=rig.work / "mirrorgate.log",
    )  # fmt: skip


def mirrorgate_production(
    rig: Rig, database_url: str, otlp_endpoint: str, port: int = PRODUCTION_PORT,
    mock_port: int = MOCK_PORT, candidate_mock_port: int | None = None,
) -> ServerProcess:  # fmt: skip
    """mirrorgate with the plain `ROUTE` beside the production-shaped route
    (`production.gateway_config`): PostgreSQL at `database_url` with redacted bodies, OTLP to
    `otlp_endpoint`; the candidate on the mock at `candidate_mock_port` when one is given. Named
    `mirrorgate-production` (its log and config have that name too)."""
    config = rig.work / "mirrorgate-production.yaml"
    mock_url = f"http://{HOST}:{mock_port}/v1"
    candidate_url = f"http://{HOST}:{candidate_mock_port}/v1" if candidate_mock_port else ""
    config.write_text(
        production.gateway_config(mock_url, port, database_url, otlp_endpoint, candidate_url)
    )
    argv = [str(rig.python), "-m", "proxy.cli", "serve", "--config", str(config)]
    return ServerProcess(
        "mirrorgate-production", rig.layout.pin(rig.layout.gateway, argv), cwd=rig.repo,
        env=_base_env(), ready=http_ok(f"http://{HOST}:{port}/readyz"),
        log_path=rig.work / "mirrorgate-production.log",
    )  # fmt: skip


def litellm_available(rig: Rig) -> bool:
    return (rig.litellm_venv / "bin" / "litellm").exists()


def litellm(rig: Rig, master_key: str) -> ServerProcess:
    """LiteLLM proxy, one worker, no database, no callbacks, no telemetry, offline cost map.

    Recent LiteLLM refuses to start without a master key (UnsafeMasterKeyError), so it gets a
    random one and the load generator sends it; without a database the key is checked in memory.
    """
    config = rig.work / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        f"  - model_name: {ROUTE}\n"
        "    litellm_params:\n"
        f"      model: openai/{UPSTREAM_MODEL}\n"
        f"      api_base: http://{HOST}:{MOCK_PORT}/v1\n"
        "      api_key: x\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
    )
    env = {
        **_base_env(),
        "LITELLM_MASTER_KEY": master_key,
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "NO_DOCS": "True",
        "DISABLE_ADMIN_UI": "True",
    }
    argv = [
        str(rig.litellm_venv / "bin" / "litellm"), "--config", str(config),
        "--host", HOST, "--port", str(LITELLM_PORT), "--num_workers", "1",
    ]  # fmt: skip
    return ServerProcess(
        "litellm", rig.layout.pin(rig.layout.gateway, argv), cwd=rig.work, env=env,
        startup_timeout_s=180,
        ready=http_ok(f"http://{HOST}:{LITELLM_PORT}/health/liveliness"),
        log_path=rig.work / "litellm.log",
    )  # fmt: skip


def _base_env() -> dict[str, str]:
    """The caller's environment without settings that would send traffic elsewhere."""
    drop = {"DATABASE_URL", "REDIS_HOST", "REDIS_URL", "LITELLM_MASTER_KEY", "OPENAI_API_KEY"}
    return {
        k: v for k, v in os.environ.items() if k not in drop and not k.upper().endswith("_PROXY")
    }
