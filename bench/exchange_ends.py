"""How exchanges end: records against upstream calls when clients hang up and the gateway stops.

    .venv/bin/python bench/exchange_ends.py              # this tree
    .venv/bin/python bench/exchange_ends.py --src DIR    # another checkout's gateway (before/after)

Runs `mirrorgate serve` (from `--src`) in front of this tree's mock upstream on 127.0.0.1 and
prints one line per scenario: pipelining clients that hang up, hang-ups while a non-stream
waits, SIGTERM with streams longer than the drain time, SIGHUP under load; and the gateway's own
overhead per request (median and p99 of the records' `overhead_s`, sequential keep-alive
requests). Not part of the test suite: tests/hostile asserts the outcomes, this counts them.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import sqlalchemy as sa
import yaml

from proxy.mock_upstream.behavior import parse_behavior
from proxy.mock_upstream.server import MockUpstreamServer

BEHAVIOR = {
    "record_requests": False,
    "models": {
        "delayed": {"latency_ms": 400},
        "never": {"latency_ms": 600_000},
        "long": {"ttft_ms": 5, "tokens_per_second": 40, "stream_chunk_tokens": 1,
                 "answer": {"type": "echo", "answer_tokens": 100_000}},
    },
}  # fmt: skip
MESSAGES = [{"role": "user", "content": "tell me a long story"}]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Gateway:
    """`mirrorgate serve` from `src`, with its SQLite file and log in `folder`."""

    def __init__(self, src: Path, folder: Path, mock_url: str, drain_timeout_s: float) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.db = folder / f"gw-{self.port}.db"
        price = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}
        models = {
            name: {"provider": "openai", "base_url": mock_url + "/v1", "model": name,
                   "price": price}
            for name in ("quick", "delayed", "never", "long")
        }  # fmt: skip
        config = {
            "server": {"port": self.port, "drain_timeout_s": drain_timeout_s},
            "store": {"url": f"sqlite:///{self.db}", "bodies": "none", "flush_interval_ms": 10},
            "models": models,
            "routes": {name: {"primary": name} for name in models},
        }
        path = folder / f"gw-{self.port}.yaml"
        path.write_text(yaml.safe_dump(config))
        self.log = folder / f"gw-{self.port}.log"
        env = {**os.environ, "PYTHONPATH": str(src)}
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "proxy.cli", "serve", "--config", str(path)],
                cwd=src, env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"the gateway did not start:\n{self.log.read_text()}")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60) -> tuple[int, float]:
        """Send `sig`; the exit code (-9 if it had to be killed) and the seconds to exit."""
        started = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode, time.monotonic() - started

    def statuses(self, route: str) -> list[str]:
        engine = sa.create_engine(f"sqlite:///{self.db}")
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT status FROM exchanges WHERE route = :r"), {"r": route}
            ).fetchall()
        engine.dispose()
        return [row[0] for row in rows]

    def overheads(self, route: str) -> list[float]:
        engine = sa.create_engine(f"sqlite:///{self.db}")
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT overhead_s FROM exchanges WHERE route = :r"), {"r": route}
            ).fetchall()
        engine.dispose()
        return [float(row[0]) for row in rows]

    def tracebacks(self) -> int:
        return self.log.read_text(errors="replace").count("Traceback")


def raw_request(route: str, stream: bool = False) -> bytes:
    body = orjson.dumps({"model": route, "messages": MESSAGES, "stream": stream})
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def stats(mock: MockUpstreamServer) -> dict[str, Any]:
    httpx_stats: dict[str, Any] = httpx.get(mock.url + "/_mock/stats").json()
    return httpx_stats


def settle(predicate: Any, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)


def hang_ups(gw: Gateway, mock: MockUpstreamServer, route: str, pipelined: int) -> str:
    """20 connections send `pipelined` requests each and hang up once the upstream has them."""
    httpx.post(mock.url + "/_mock/reset")
    connections = [socket.create_connection(("127.0.0.1", gw.port)) for _ in range(20)]
    for sock in connections:
        sock.sendall(raw_request(route) * pipelined)
    settle(lambda: stats(mock)["total"] >= 20)
    for sock in connections:
        sock.close()
    settle(lambda: len(gw.statuses(route)) >= stats(mock)["total"], 5)
    calls, recorded = stats(mock)["total"], gw.statuses(route)
    gone = recorded.count("client_disconnected")
    return (
        f"{calls} upstream calls, {len(recorded)} records ({gone} client_disconnected), "
        f"{stats(mock)['abandoned']} upstream calls cancelled"
    )


def read_stream(url: str, first: threading.Event) -> bytes:
    body = {"model": "long", "messages": MESSAGES, "stream": True}
    received = b""
    try:
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as r:
            for chunk in r.iter_raw():
                received += chunk
                first.set()
    except httpx.HTTPError:
        pass
    return received


def stop_with_streams(gw: Gateway, sig: int, streams: int, hammer: bool) -> str:
    """`streams` long streams (and, with `hammer`, 4 keep-alive clients of `quick`), then `sig`."""
    answered: list[str] = []
    stop = threading.Event()

    def load() -> None:
        with httpx.Client(base_url=gw.url, timeout=10) as client:
            while not stop.is_set():
                try:
                    response = client.post(
                        "/v1/chat/completions", json={"model": "quick", "messages": MESSAGES}
                    )
                except httpx.HTTPError:
                    return
                if response.status_code == 200:
                    answered.append(response.headers["x-mirrorgate-request-id"])

    firsts = [threading.Event() for _ in range(streams)]
    with ThreadPoolExecutor(streams + 4) as pool:
        futures = [pool.submit(read_stream, gw.url, first) for first in firsts]
        for first in firsts:
            first.wait(30)
        loaders = [pool.submit(load) for _ in range(4 if hammer else 0)]
        settle(lambda: len(answered) >= 200 or not hammer, 30)
        code, took = gw.stop(sig)
        stop.set()
        bodies = [f.result(60) for f in futures]
        for loader in loaders:
            loader.result(60)
    events = sum(b"shutting down" in body for body in bodies)
    cut = gw.statuses("long")
    line = (
        f"exit {code} after {took:.1f}s; {streams} streams: {events} got the error event, "
        f"{len(cut)} records ({cut.count('shutdown')} shutdown)"
    )
    if hammer:
        engine = sa.create_engine(f"sqlite:///{gw.db}")
        with engine.connect() as conn:
            stored = {
                row[0]
                for row in conn.execute(
                    sa.text("SELECT request_id FROM exchanges WHERE route = 'quick'")
                )
            }
        engine.dispose()
        lost = sum(1 for rid in answered if rid not in stored)
        line += f"; {len(answered)} answered requests, {lost} unrecorded"
    return line


def overhead(gw: Gateway, count: int) -> str:
    with httpx.Client(base_url=gw.url, timeout=10) as client:
        for _ in range(count):
            client.post("/v1/chat/completions", json={"model": "quick", "messages": MESSAGES})
    settle(lambda: len(gw.overheads("quick")) >= count)
    values = sorted(gw.overheads("quick"))
    p99 = values[int(len(values) * 0.99) - 1]
    return (
        f"{len(values)} requests: overhead median {statistics.median(values) * 1e6:.0f} µs, "
        f"p99 {p99 * 1e6:.0f} µs"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--src", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--overhead-requests", type=int, default=2000)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="exchange-ends-"))
    with MockUpstreamServer(parse_behavior(BEHAVIOR)) as mock:
        gw = Gateway(args.src, folder, mock.url, drain_timeout_s=1)
        print("pipelining x3, hang-up:  ", hang_ups(gw, mock, "delayed", 3))
        print("non-stream hang-up:      ", hang_ups(gw, mock, "never", 1))
        print("overhead:                ", overhead(gw, args.overhead_requests))
        print("tracebacks in the log:   ", gw.tracebacks())
        gw.stop()
        gw = Gateway(args.src, folder, mock.url, drain_timeout_s=1)
        print("SIGTERM, 11 long streams:", stop_with_streams(gw, signal.SIGTERM, 11, False))
        gw = Gateway(args.src, folder, mock.url, drain_timeout_s=1)
        print("SIGHUP under load:       ", stop_with_streams(gw, signal.SIGHUP, 2, True))


if __name__ == "__main__":
    main()
