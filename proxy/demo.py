"""`mirrorgate demo`: a complete local scene with no setup.

Starts the built-in fake models and a gateway on SQLite, drives traffic through it with the
official `openai` SDK (streamed and not), and prints a live summary until Ctrl-C (or `--duration`).
"""

from __future__ import annotations

import signal
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import FrameType
from typing import Any

import openai
import yaml

from proxy.config import parse_config
from proxy.mock_upstream.behavior import parse_behavior
from proxy.mock_upstream.server import MockUpstreamServer
from proxy.records import ExchangeRecord, Status
from proxy.serve import GatewayServer

DEMO_BEHAVIOR: dict[str, Any] = {
    "record_requests": False,
    "default": {"ttft_ms": 80, "tokens_per_second": 250, "latency_ms": 150},
    "models": {"fast-model": {"ttft_ms": 30, "tokens_per_second": 600, "latency_ms": 60}},
}
QUESTIONS = [
    "Where is my parcel?",
    "Can I ship a 120 kg crate?",
    "How do I change my delivery address?",
    "What does express shipping cost?",
]


def _config(mock_url: str, db: Path, port: int) -> str:
    price = {"input_per_mtok": 0.15, "output_per_mtok": 0.60, "cached_input_per_mtok": 0.075}
    doc = {
        "server": {"host": "127.0.0.1", "port": port},
        "store": {"url": f"sqlite:///{db}", "bodies": "redacted"},
        "models": {
            "prod": {"provider": "openai", "base_url": f"{mock_url}/v1", "model": "prod-model",
                     "price": price},
            "safe": {"provider": "openai", "base_url": f"{mock_url}/v1", "model": "fast-model",
                     "price": {"input_per_mtok": 0.10, "output_per_mtok": 0.40}},
        },
        "routes": {"support-bot": {"primary": "prod", "fallback": "safe"}},
    }  # fmt: skip
    return yaml.safe_dump(doc, sort_keys=False)


class _Tally:
    """Collects the primary-path records the demo prints (a record sink)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.records: list[ExchangeRecord] = []

    def __call__(self, record: ExchangeRecord) -> None:
        with self._lock:
            self.records.append(record)

    def summary(self) -> str:
        with self._lock:
            records = list(self.records)
        if not records:
            return "waiting for the first answers..."
        durations = sorted(r.duration_s * 1000 for r in records)
        ttfts = sorted(r.ttft_s * 1000 for r in records if r.ttft_s is not None)
        errors = sum(r.status is not Status.OK for r in records)
        cost = sum(r.cost_usd for r in records)
        line = (
            f"requests {len(records):5d}  errors {errors:3d}  "
            f"latency p50 {_pct(durations, 50):6.1f} ms  p95 {_pct(durations, 95):6.1f} ms  "
        )
        if ttfts:
            line += f"ttft p50 {_pct(ttfts, 50):5.1f} ms  "
        return line + f"cost ${cost:.6f}"


def _pct(values: list[float], pct: int) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[pct - 1]


def _traffic(url: str, stop: threading.Event, worker: int) -> None:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="demo", max_retries=0)
    turn = 0
    while not stop.is_set():
        turn += 1
        messages: Any = [
            {"role": "system", "content": "You are the support bot of a parcel company."},
            {"role": "user", "content": QUESTIONS[(worker + turn) % len(QUESTIONS)]},
        ]
        try:
            if turn % 2:
                stream = client.chat.completions.create(
                    model="support-bot", messages=messages, stream=True
                )
                for _ in stream:
                    pass
            else:
                client.chat.completions.create(model="support-bot", messages=messages)
        except openai.OpenAIError:
            pass  # counted by the gateway; the demo goes on
        stop.wait(0.05)


def run_demo(port: int = 8080, duration_s: float = 0.0, out: Callable[[str], None] = print) -> int:
    """Run the scene; return the exit code. Ctrl-C (or `duration_s`) ends it cleanly."""
    stop = threading.Event()

    def interrupt(_sig: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGINT, interrupt)
    folder = Path(tempfile.mkdtemp(prefix="mirrorgate-demo-"))
    db = folder / "mirrorgate.db"
    tally = _Tally()
    try:
        with MockUpstreamServer(parse_behavior(DEMO_BEHAVIOR)) as mock:
            config = parse_config(_config(mock.url, db, port), env={})
            try:
                gateway = GatewayServer(config).__enter__()
            except RuntimeError as exc:
                out(f"mirrorgate: could not start the gateway on port {port} ({exc}); "
                    "try --port 0")  # fmt: skip
                return 1
            gateway.gateway.sinks.append(tally)
            _banner(out, gateway.url, mock.url, db)
            started = time.monotonic()
            with ThreadPoolExecutor(max_workers=4, thread_name_prefix="demo-traffic") as pool:
                for worker in range(4):
                    pool.submit(_traffic, gateway.url, stop, worker)
                while not stop.wait(2.0):
                    out(tally.summary())
                    if duration_s and time.monotonic() - started >= duration_s:
                        stop.set()
            gateway.stop()
            out(tally.summary())
            out(f"stopped cleanly; the records stay in {db}")
        return 0
    finally:
        signal.signal(signal.SIGINT, previous)


def _banner(out: Callable[[str], None], url: str, mock_url: str, db: Path) -> None:
    out("mirrorgate demo: a gateway in front of two fake models, with live traffic.")
    out(f"  gateway      {url}   (route 'support-bot': primary 'prod', fallback 'safe')")
    out(f"  fake models  {mock_url}")
    out(f"  metrics      {url}/metrics")
    out(f"  health       {url}/healthz  {url}/readyz")
    out(f"  records      {db}  (SQLite: sqlite3 {db} 'select * from exchanges limit 5')")
    body = '{"model": "support-bot", "messages": [{"role": "user", "content": "hi"}]}'
    out(f"  try it       curl -s {url}/v1/chat/completions -H 'content-type: application/json' "
        f"-d '{body}'")  # fmt: skip
    out("Press Ctrl-C to stop.\n")
