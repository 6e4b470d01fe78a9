"""`mirrorgate demo --scene experiment`: an online A/B experiment decided live (~1 min).

Built-in fake models, a gateway on SQLite, and a scripted application using the official
`openai` SDK: each business operation (a support ticket) is one or two calls carrying
`x-mirrorgate-operation`, then its outcome posted to `POST /v1/outcomes`. Route `support-bot`
runs an experiment of three arms, one unit per operation:

- `control`: `prod`, as today;
- `cheaper`: `cand-a`, a quarter of the price;
- `terse`: `prod` told to "Answer in one sentence." (`system_prompt_append`).

The script completes operations at known true rates per arm (`TRUE_COMPLETION`: control 60 %,
cheaper 75 %, terse 35 %), so the right decision is known in advance: `cheaper` ships (it
completes more, and costs less), `terse` is worse. The decider looks every 2 s and the scene
prints each new decision in words until the one on `cheaper` is reached.

Ctrl-C ends it cleanly at any point.
"""

from __future__ import annotations

import logging
import random
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import httpx
import openai
import yaml

from proxy.app import GatewayServer
from proxy.config import parse_config
from proxy.mock_upstream.behavior import parse_behavior
from proxy.mock_upstream.server import MockUpstreamServer

from .demo import DEMO_ENV, DEMO_KEY_ENV, _clock

ROUTE = "support-bot"
TRUE_COMPLETION = {"control": 0.60, "cheaper": 0.75, "terse": 0.35}
"""The share of operations the scripted application completes on each arm."""
WORKERS = 6
STORY_LIMIT_S = 150.0
EXPERIMENT_BEHAVIOR: dict[str, Any] = {
    "record_requests": False,
    "default": {"latency_ms": 30, "answer": {"type": "echo", "answer_tokens": 40}},
}
TERSE = "Answer in one sentence."
QUESTIONS = ["Where is my parcel?", "Can I change the delivery address?", "My box arrived open."]


def experiment_config(mock_url: str, db: Path, port: int) -> str:
    """The scene's configuration: two fake models and a route with a three-arm experiment."""

    def model(name: str, inp: float, out: float) -> dict[str, Any]:
        return {
            "provider": "openai", "base_url": f"{mock_url}/v1", "model": f"{name}-model",
            "api_key_env": DEMO_KEY_ENV,
            "price": {"input_per_mtok": inp, "output_per_mtok": out},
        }  # fmt: skip

    doc = {
        "server": {"host": "127.0.0.1", "port": port, "route_refresh_s": 0.5},
        "store": {"url": f"sqlite:///{db}", "bodies": "redacted"},
        "models": {"prod": model("prod", 2.5, 10.0), "cand-a": model("cand-a", 0.6, 2.5)},
        "routes": {
            ROUTE: {
                "primary": "prod",
                "experiment": {
                    "arms": {
                        "control": {"model": "prod"},
                        "cheaper": {"model": "cand-a"},
                        "terse": {"model": "prod", "system_prompt_append": TERSE},
                    },
                    "weights": {"control": 34, "cheaper": 33, "terse": 33},
                    "unit": "operation",
                    "primary_metric": "completion_rate",
                    "guardrails": ["error_rate"],
                    "minimum_detectable_effect": 0.1,
                    "interval_s": 2,
                    "min_units": 30,
                },
            }
        },
    }  # fmt: skip
    return yaml.safe_dump(doc, sort_keys=False)


def print_experiment_config(out: TextIO) -> int:
    """`--scene experiment --print-config`: the scene's configuration, placeholder addresses."""
    out.write("# mirrorgate demo --scene experiment: the configuration it runs\n")
    out.write(experiment_config("http://127.0.0.1:9999", Path("mirrorgate-demo.db"), 8080))
    return 0


class _Counts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.operations = 0
        self.errors = 0


def _application(url: str, counts: _Counts, stop: threading.Event, worker: int) -> None:
    """The scripted application: operations of one or two calls, then their outcome."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="demo", max_retries=0)
    outcomes = httpx.Client(base_url=url, timeout=10)
    draw = random.Random(worker)
    turn = 0
    try:
        while not stop.is_set():
            turn += 1
            operation = f"ticket-{worker}-{turn}"
            arm = None
            try:
                for call in range(1 + (turn % 2)):
                    raw = client.chat.completions.with_raw_response.create(
                        model=ROUTE,
                        messages=[{"role": "user", "content": QUESTIONS[(turn + call) % 3]}],
                        extra_headers={"x-mirrorgate-operation": operation},
                    )
                    arm = raw.headers.get("x-mirrorgate-experiment-arm")
                completed = draw.random() < TRUE_COMPLETION.get(arm or "control", 0.5)
                outcomes.post(
                    "/v1/outcomes", json={"operation_id": operation, "completed": completed}
                ).raise_for_status()  # a refused outcome is counted as an error, not as sent
                with counts.lock:
                    counts.operations += 1
            except (openai.OpenAIError, httpx.HTTPError):
                with counts.lock:
                    counts.errors += 1
            stop.wait(0.005)
    finally:
        client.close()
        outcomes.close()


def run_experiment_demo(
    port: int = 8080,
    duration_s: float = 0.0,
    out: Callable[[str], None] = print,
    keep_running: bool = False,
) -> int:
    """Run the scene; return the exit code. Ctrl-C (or `duration_s`) ends it cleanly."""
    stop = threading.Event()

    def interrupt(_sig: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGINT, interrupt)
    for name in ("mirrorgate", "proxy"):
        logging.getLogger(name).setLevel(logging.ERROR)
    folder = Path(tempfile.mkdtemp(prefix="mirrorgate-demo-"))
    db = folder / "mirrorgate.db"
    counts = _Counts()
    try:
        with MockUpstreamServer(parse_behavior(EXPERIMENT_BEHAVIOR)) as mock:
            config = parse_config(experiment_config(mock.url, db, port), env=DEMO_ENV)
            try:
                gateway = GatewayServer(config, env=DEMO_ENV).__enter__()
            except RuntimeError as exc:
                out(f"mirrorgate: could not start the gateway on port {port} ({exc}); "
                    "try --port 0")  # fmt: skip
                return 1
            out(f"mirrorgate demo --scene experiment: gateway {gateway.url}, fake models "
                f"{mock.url}, records {db}")  # fmt: skip
            out(f"  status:  mirrorgate experiment status {ROUTE} --url {gateway.url}")
            out(f"  metrics: {gateway.url}/metrics (mirrorgate_operations_total, "
                "mirrorgate_experiment_*)")  # fmt: skip
            truth = ", ".join(f"{arm} {rate:.0%}" for arm, rate in TRUE_COMPLETION.items())
            out(f"true completion rates the application follows: {truth}")
            started = time.monotonic()
            with (
                ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="demo-app") as pool,
                httpx.Client(base_url=gateway.url, timeout=10) as admin,
            ):
                answer = admin.post(
                    f"/admin/experiments/{ROUTE}/start", json={"reason": "demo: which arm"}
                )
                answer.raise_for_status()
                experiment = answer.json()["experiment"]
                out(f"{_clock(started)} experiment {experiment['id']} started on {ROUTE}: "
                    f"control prod, cheaper cand-a, terse prod + '{TERSE}'")  # fmt: skip
                for worker in range(WORKERS):
                    pool.submit(_application, gateway.url, counts, stop, worker)
                _story(admin, counts, stop, started, duration_s or STORY_LIMIT_S, out)
                if keep_running and not stop.is_set():
                    out(f"the gateway keeps serving at {gateway.url}; Ctrl-C to stop")
                    stop.wait()
                stop.set()
            gateway.stop()
            out(f"stopped cleanly; the records stay in {db} "
                f"(mirrorgate report --config <its config> shows the experiment)")  # fmt: skip
        return 0
    finally:
        signal.signal(signal.SIGINT, previous)


def _story(
    admin: httpx.Client,
    counts: _Counts,
    stop: threading.Event,
    started: float,
    limit_s: float,
    out: Callable[[str], None],
) -> None:
    last_text = ""
    while not stop.wait(2.0):
        elapsed = time.monotonic() - started
        status = admin.get(f"/admin/experiments/{ROUTE}").json()
        decision = status.get("decision") or {}
        text = str(decision.get("text", ""))
        with counts.lock:
            operations = counts.operations
        if text and text != last_text:
            out(f"{_clock(started)} {operations} operations; decision:")
            for line in text.splitlines():
                out(f"    {line}")
            last_text = text
        verdicts = {a["arm"]: a["verdict"] for a in decision.get("arms", [])}
        if verdicts.get("cheaper") == "ship" and verdicts.get("terse") in ("worse", "stopped"):
            out(f"{_clock(started)} DECISION after {elapsed:.1f}s and {operations} operations: "
                f"ship cheaper (cand-a); terse is {verdicts['terse']}")  # fmt: skip
            admin.post(f"/admin/experiments/{ROUTE}/stop", json={"reason": "decided"})
            return
        if elapsed >= limit_s:
            out(f"{_clock(started)} time is up after {operations} operations: no decision yet")
            return
