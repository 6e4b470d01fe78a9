"""`serve --workers N` scaling: the plain route at concurrency C, with 1 worker and with more.

    .venv/bin/python -m bench.workers [--workers 1 2] [--concurrency 16] [--seconds 8]
        [--admin-url postgresql+psycopg://postgres@127.0.0.1:5432/test]

For each worker count it starts the mock upstream (answers at once) and `mirrorgate serve
--workers N` on PostgreSQL (a fresh schema, `bodies: none`), runs `bench.loadgen` closed-loop
on the plain route, and reports req/s, the gateway's CPU per request (the parent and every
worker, from /proc) and the load generator's. Nothing is pinned: the workers, the mock, the load
generator and PostgreSQL share the machine's cores, so on a small machine the figure is a lower
bound of what the workers alone would serve. Prints one JSON object per worker count.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.processes import ServerProcess, http_ok, machine_busy_seconds, port_free

HOST = "127.0.0.1"
ROUTE = "plain"


def free_port() -> int:
    for port in range(18600, 18700):
        if port_free(HOST, port):
            return port
    raise RuntimeError("no free port in 18600-18699")


def gateway_config(mock_port: int, port: int, store_url: str, workers: int) -> str:
    """The YAML of a gateway with one plain route in front of the mock."""
    return (
        f"server: {{host: {HOST}, port: {port}, workers: {workers}}}\n"
        f'store: {{url: "{store_url}", bodies: none}}\n'
        "models:\n"
        f'  fast: {{provider: openai, base_url: "http://{HOST}:{mock_port}/v1", model: fast}}\n'
        f"routes:\n  {ROUTE}: {{primary: fast}}\n"
    )


def per_request(result: dict[str, Any], gateway_cpu_s: float, busy_s: float) -> dict[str, Any]:
    """The figures of one run from the load generator's result and the CPU counted meanwhile."""
    requests = int(result["requests"])
    elapsed = float(result["elapsed_s"]) or 1.0
    return {
        "requests": requests,
        "errors": int(result["errors"]),
        "req_per_s": round(requests / elapsed),
        "gateway_cpu_us_per_request": round(gateway_cpu_s / max(requests, 1) * 1e6),
        "loadgen_cpu_us_per_request": round(float(result["cpu_s"]) / max(requests, 1) * 1e6),
        "machine_busy_cores": round(busy_s / elapsed, 2),
    }


def run_one(
    workers: int, concurrency: int, seconds: float, admin_url: str, work: Path
) -> dict[str, Any]:
    schema = f"bench_workers_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(admin_url)
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    store_url = f"{admin_url}?options=-csearch_path%3D{schema}"
    python = sys.executable
    mock_port, port = free_port(), 0
    mock = ServerProcess(
        "mock-upstream",
        [python, "-m", "proxy.cli", "--log-level", "warning", "mock-upstream",
         "--host", HOST, "--port", str(mock_port)],
        ready=http_ok(f"http://{HOST}:{mock_port}/healthz"), log_path=work / "mock.log",
    )  # fmt: skip
    try:
        with mock:
            port = free_port()
            config = work / f"gateway-{workers}.yaml"
            config.write_text(gateway_config(mock_port, port, store_url, workers))
            gateway = ServerProcess(
                "mirrorgate",
                [python, "-m", "proxy.cli", "serve", "--config", str(config)],
                ready=http_ok(f"http://{HOST}:{port}/readyz"),
                log_path=work / f"gateway-{workers}.log",
            )
            with gateway:
                # Every worker up (readyz answers as soon as one is).
                deadline = time.monotonic() + 60
                while workers > 1 and "workers)" not in gateway.tail(200):
                    if time.monotonic() > deadline:
                        raise RuntimeError(gateway.tail())
                    time.sleep(0.1)
                out = work / f"load-{workers}.json"
                load = [python, "-m", "bench.loadgen", "--port", str(port), "--model", ROUTE,
                        "--concurrency", str(concurrency), "--seconds", str(seconds),
                        "--warmup", "2", "--output", str(out), "--announce"]  # fmt: skip
                proc = subprocess.Popen(load, stdout=subprocess.PIPE, text=True)
                assert proc.stdout is not None
                proc.stdout.readline()  # "measuring": the warm-up is over
                cpu0, busy0 = gateway.cpu_seconds(), machine_busy_seconds()
                proc.wait()
                cpu1, busy1 = gateway.cpu_seconds(), machine_busy_seconds()
                result = json.loads(out.read_text())
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        engine.dispose()
    return {
        "workers": workers,
        "concurrency": concurrency,
        **per_request(result, cpu1 - cpu0, busy1 - busy0),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--admin-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as folder:
        for workers in args.workers:
            figures = run_one(workers, args.concurrency, args.seconds, args.admin_url, Path(folder))
            print(json.dumps(figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
