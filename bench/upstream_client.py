"""Client CPU per request: `UpstreamHTTP` vs `httpx.AsyncClient`, against the same local server.

    .venv/bin/python bench/upstream_client.py [--requests 5000] [--rounds 3] [--loop uvloop]

Starts uvicorn (uvloop + httptools, a raw ASGI app answering every POST with a 600-byte JSON) in a
separate process pinned to its own CPU, so its work is not counted; then, in this process, sends
the same POST (a 300-byte JSON body, the headers the gateway sends) with each client at each
concurrency, and reports the client's CPU time per request (`time.process_time()` deltas: user +
system, every thread of this process) and the wall-clock rate. Each cell is the median of
`--rounds` runs after a warm-up; connections are kept alive throughout.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

_HEAD = b'{"id":"chatcmpl-bench","object":"chat.completion","choices":["'
RESPONSE = _HEAD + b"x" * (600 - len(_HEAD) - 3) + b'"]}'  # 600 bytes
REQUEST = b'{"model":"m","messages":[{"role":"user","content":"' + b"x" * 240 + b'"}]}'
HEADERS = [
    (b"content-type", b"application/json"),
    (b"authorization", b"Bearer sk-bench"),
    (b"accept-encoding", b"identity"),
    (b"user-agent", b"mirrorgate-bench"),
]
PATH = "/chat/completions"


async def json_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Raw ASGI: drain the request body, answer 200 with RESPONSE."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(RESPONSE))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": RESPONSE})


def serve(port: int) -> None:
    import uvicorn  # noqa: PLC0415 - only the server process needs it

    uvicorn.run(
        json_app, host="127.0.0.1", port=port, loop="uvloop", http="httptools", ws="none",
        lifespan="off", access_log=False, log_level="warning", server_header=False,
    )  # fmt: skip


def _wait_port(port: int, *, want_open: bool, timeout_s: float) -> bool:
    """Poll until 127.0.0.1:port accepts connections (or refuses them); False at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                is_open = True
        except OSError:
            is_open = False
        if is_open == want_open:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


Sender = Callable[[], Awaitable[None]]


async def measure(send_one: Sender, concurrency: int, requests: int) -> tuple[float, float]:
    """(client CPU µs per request, requests per second) for `requests` requests."""
    per_worker = requests // concurrency

    async def worker() -> None:
        for _ in range(per_worker):
            await send_one()

    cpu0, wall0 = time.process_time(), time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(worker())
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    done = per_worker * concurrency
    return cpu / done * 1e6, done / wall


async def bench(base_url: str, requests: int, rounds: int) -> list[tuple[str, int, float, float]]:
    import httpx  # noqa: PLC0415

    from proxy.upstream.http11 import UpstreamHTTP  # noqa: PLC0415

    lean = UpstreamHTTP(base_url, connect_timeout_s=5, read_timeout_s=30)

    async def send_lean() -> None:
        response = await lean.send("POST", PATH, HEADERS, REQUEST)
        try:
            body = await response.aread()
        finally:
            await response.aclose()
        if response.status_code != 200 or len(body) != 600:
            raise RuntimeError(f"unexpected answer {response.status_code}")

    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256, keepalive_expiry=30)
    client = httpx.AsyncClient(timeout=httpx.Timeout(30, connect=5), limits=limits)
    url = base_url + PATH
    httpx_headers = [(name.decode(), value.decode()) for name, value in HEADERS]

    async def send_httpx() -> None:
        response = await client.post(url, content=REQUEST, headers=httpx_headers)
        if response.status_code != 200 or len(response.content) != 600:
            raise RuntimeError(f"unexpected answer {response.status_code}")

    rows: list[tuple[str, int, float, float]] = []
    try:
        for name, sender in (("UpstreamHTTP", send_lean), ("httpx.AsyncClient", send_httpx)):
            for concurrency in (1, 16):
                await measure(sender, concurrency, min(requests, 1000))  # warm-up
                runs = [await measure(sender, concurrency, requests) for _ in range(rounds)]
                cpu = statistics.median(run[0] for run in runs)
                rate = statistics.median(run[1] for run in runs)
                rows.append((name, concurrency, cpu, rate))
    finally:
        await lean.aclose()
        await client.aclose()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    parser.add_argument("--port", type=int, default=18931)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cpu", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        if args.cpu is not None:
            os.sched_setaffinity(0, {args.cpu})
        serve(args.port)
        return 0

    if not _wait_port(args.port, want_open=False, timeout_s=0.0):
        print(f"127.0.0.1:{args.port} is taken; pass --port", file=sys.stderr)
        return 1
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu, client_cpu = (cpus[-1], cpus[0]) if len(cpus) >= 2 else (None, None)
    argv_server = [sys.executable, __file__, "--serve", "--port", str(args.port)]
    if server_cpu is not None:
        argv_server += ["--cpu", str(server_cpu)]
    server = subprocess.Popen(argv_server, stdin=subprocess.DEVNULL)
    try:
        if not _wait_port(args.port, want_open=True, timeout_s=30.0):
            print("the JSON server did not start", file=sys.stderr)
            return 1
        if client_cpu is not None:
            os.sched_setaffinity(0, {client_cpu})
        base_url = f"http://127.0.0.1:{args.port}/v1"
        coro = bench(base_url, args.requests, args.rounds)
        if args.loop == "uvloop":
            import uvloop  # noqa: PLC0415

            rows = uvloop.run(coro)
        else:
            rows = asyncio.run(coro)
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    pinning = (
        f"client on CPU {client_cpu}, server on CPU {server_cpu}"
        if client_cpu is not None
        else "unpinned"
    )
    print(f"{args.loop} loop, {args.requests} requests x {args.rounds} rounds, {pinning}")
    print(f"{'client':<20} {'concurrency':>11} {'CPU µs/request':>15} {'requests/s':>11}")
    for name, concurrency, cpu, rate in rows:
        print(f"{name:<20} {concurrency:>11} {cpu:>15.1f} {rate:>11.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
