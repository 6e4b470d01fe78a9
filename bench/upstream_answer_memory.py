"""Peak memory of a gateway process while upstreams send huge answers, and what the client gets.

    .venv/bin/python bench/upstream_answer_memory.py [--size-mb 100] [--concurrency 1]
        [--chunked] [--max-response-mb N] [--bodies full|redacted|none] [--checkout DIR]

Starts `mirrorgate mock-upstream` (this checkout, with its `huge_body` fault) and `mirrorgate
serve` (this checkout, or the one at `--checkout`, e.g. an export of an older commit, run with
`PYTHONPATH=DIR`), both on 127.0.0.1; sends `--concurrency` requests at once for a
`--size-mb` answer; prints the statuses, the seconds to the last answer, and the gateway's resident
memory at rest and at its peak (VmHWM in /proc). `--max-response-mb` sets
`server.limits.max_response_bytes` (leave it out for a checkout that has no such key);
`--bodies` is `store.bodies` (default `full`, the worst case for memory).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.processes import ServerProcess, http_ok


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _requests(url: str, count: int) -> list[int]:
    body = {"model": "huge", "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        answers = await asyncio.gather(
            *(client.post("/v1/chat/completions", json=body) for _ in range(count))
        )
    return [answer.status_code for answer in answers]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=100)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--chunked", action="store_true")
    parser.add_argument("--max-response-mb", type=float, default=None)
    parser.add_argument("--checkout", type=Path, default=None)
    parser.add_argument("--bodies", choices=("full", "redacted", "none"), default="full")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="mirrorgate-answer-memory-"))
    behavior = {
        "record_requests": False,
        "models": {"huge": {"huge_body": {"bytes": int(args.size_mb * 2**20),
                                          "chunked": args.chunked}}},
    }  # fmt: skip
    (folder / "behavior.yaml").write_text(yaml.safe_dump(behavior))
    mock_port, gateway_port = _free_port(), _free_port()
    mock_url = f"http://127.0.0.1:{mock_port}"
    server: dict[str, object] = {"port": gateway_port}
    if args.max_response_mb is not None:
        server["limits"] = {"max_response_bytes": int(args.max_response_mb * 2**20)}
    config = {
        "server": server,
        "store": {"url": f"sqlite:///{folder / 'gw.db'}", "bodies": args.bodies},
        "models": {"huge": {"provider": "openai", "base_url": mock_url + "/v1", "model": "huge",
                            "timeout_s": 120}},
        "routes": {"huge": {"primary": "huge"}},
    }  # fmt: skip
    (folder / "gateway.yaml").write_text(yaml.safe_dump(config))
    python = sys.executable
    gateway_env = dict(os.environ)
    if args.checkout is not None:
        gateway_env["PYTHONPATH"] = str(args.checkout.resolve())
    mock = ServerProcess(
        "mock-upstream",
        [python, "-m", "proxy.cli", "mock-upstream", "--port", str(mock_port),
         "--behavior", str(folder / "behavior.yaml")],
        ready=http_ok(mock_url + "/healthz"), log_path=folder / "mock.log",
    )  # fmt: skip
    gateway = ServerProcess(
        "gateway",
        [python, "-m", "proxy.cli", "serve", "--config", str(folder / "gateway.yaml")],
        ready=http_ok(f"http://127.0.0.1:{gateway_port}/readyz"),
        log_path=folder / "gateway.log", env=gateway_env, cwd=folder,
    )  # fmt: skip
    with mock, gateway:
        at_rest = _rss_mb(gateway.pid)
        started = time.monotonic()
        statuses = asyncio.run(_requests(f"http://127.0.0.1:{gateway_port}", args.concurrency))
        seconds = time.monotonic() - started
        peak = _peak_rss_mb(gateway.pid)
    print(
        f"answer {args.size_mb:g} MB{' chunked' if args.chunked else ''} x{args.concurrency}: "
        f"statuses {statuses}, {seconds:.2f} s, gateway RSS at rest {at_rest:.0f} MB, "
        f"peak {peak:.0f} MB (+{peak - at_rest:.0f} MB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
