"""`mirrorgate demo`: the whole story of a model change, locally, with no setup (about 60 s).

Built-in fake models, a gateway on SQLite and scripted traffic through the official `openai` SDK:

1. live traffic on route `support-bot` (primary `prod`), under shipping rule v1 (max 100 kg);
2. an operator starts a canary of `new-model` — cheaper, and perfect on today's rule — which the
   judge lets climb its steps (10 % → 25 % → 50 %) as every metric passes;
3. the business rule changes (max 150 kg, a new system prompt): the primary follows it, the new
   model keeps answering from what it memorised;
4. within seconds the judge sees the new rule version's check failing on the canary only, rolls
   the route back to its safe model, and the alert (rule, version, check, example requests)
   arrives at the webhook the demo listens on;
5. a summary with every phase and its timestamp.

Ctrl-C ends it cleanly at any point; `--keep-running` keeps the gateway up after the story.
"""

from __future__ import annotations

import json
import logging
import signal
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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

RULE_FOLLOWER = {
    "type": "regex_from_system",
    "pattern": r"max_weight\s*=\s*(\d+)",
    "template": '{"max_weight": {1}, "answer": "Parcels up to {1} kg ship as standard."}',
}
DEMO_BEHAVIOR: dict[str, Any] = {
    "record_requests": False,
    "default": {"ttft_ms": 30, "tokens_per_second": 800, "latency_ms": 40},
    "models": {
        "prod-model": {"answer": RULE_FOLLOWER},
        "safe-model": {"answer": RULE_FOLLOWER},
        # Trained before the rule changed: it answers 100 kg whatever its instructions say.
        "new-model": {
            "answer": '{"max_weight": 100, "answer": "Parcels up to 100 kg ship as standard."}'
        },
    },
}
QUESTIONS = [
    "Can I ship a 120 kg crate?",
    "What is the heaviest parcel you take?",
    "Is a 90 kg pallet a standard parcel?",
]
ROUTE = "support-bot"
STEPS = [10, 25, 50]
STEP_S = 14.0
START_AT_S = 4.0
CHANGE_BY_S = 45.0
"""The rule changes once the canary reached its last step, or at this time at the latest."""
AFTER_ROLLBACK_S = 10.0
RULE_CHANGE_AFTER_LAST_STEP_S = 10.0
STORY_LIMIT_S = 90.0


DEMO_KEY_ENV = "MIRRORGATE_DEMO_KEY"
"""The variable the demo's models read their key from (the fake model takes any key)."""
DEMO_ENV = {DEMO_KEY_ENV: "demo-key"}


def _config(mock_url: str, db: Path, port: int, hook_url: str) -> str:
    def model(name: str, inp: float, out: float) -> dict[str, Any]:
        return {
            "provider": "openai", "base_url": f"{mock_url}/v1", "model": name,
            "api_key_env": DEMO_KEY_ENV,
            "price": {"input_per_mtok": inp, "output_per_mtok": out},
        }  # fmt: skip

    check = {"name": "max-weight", "type": "json_path", "path": "$.max_weight"}
    doc = {
        "server": {"host": "127.0.0.1", "port": port, "route_refresh_s": 0.5},
        "store": {"url": f"sqlite:///{db}", "bodies": "redacted"},
        "models": {
            "prod": model("prod-model", 0.15, 0.60),
            "new-model": model("new-model", 0.10, 0.40),
            "safe": model("safe-model", 0.15, 0.60),
        },
        "routes": {
            ROUTE: {
                "primary": "prod",
                "fallback": "safe",
                "canary": {
                    "model": "new-model",
                    "steps": STEPS,
                    "step_interval_s": STEP_S,
                    "sticky": "header:x-user-id",
                    "analysis": {
                        "interval_s": 2,
                        "min_samples": 30,
                        "failure_limit": 2,
                        # No p95: a p95 is bounded from above only once enough canary answers
                        # lie above it (about 230 at this budget), half a minute at 10 %.
                        "metrics": ["error_rate", "latency_p50", "cost_per_request",
                                    "check_pass_rate"],
                        # The scene's rate margins are wide: with no error and every check
                        # passing on both arms, a margin of 5 points needs ~250 canary answers
                        # to pass (the variance at the margin), 10 points ~100, so the canary
                        # climbs within the scene's minute; the rule change it shows is 100 %
                        # to 0 %.
                        "thresholds": {"error_rate_increase": 0.1,
                                       "check_pass_rate_drop": 0.1,
                                       "min_samples_latency": 20},
                    },
                },
            }
        },
        "rules": {
            "shipping-policy": {
                "routes": [ROUTE],
                "checks": [{"name": "valid-json", "type": "json"}],
                "versions": {
                    "v1": {"match_prompt": r"max_weight\s*=\s*100\b",
                           "checks": [{**check, "equals": 100}]},
                    "v2": {"match_prompt": r"max_weight\s*=\s*150\b",
                           "checks": [{**check, "equals": 150}]},
                },
            }
        },
        "alerts": {"sinks": [{"type": "webhook", "url": hook_url}]},
    }  # fmt: skip
    return yaml.safe_dump(doc, sort_keys=False)


PRINTED_HEADER = """\
# The configuration `mirrorgate demo` runs, as `mirrorgate demo --print-config` prints it: a route
# with a fallback, a canary judged on error rate, latency, cost and a business rule's checks, the
# rule set that finds the rule's version in the system prompt, and a webhook for the alerts.
# The demo fills in its own addresses; here they are placeholders: the fake model
# (`mirrorgate mock-upstream --port 9999`), the gateway's port, the store and the webhook.
# Every model sends the key in MIRRORGATE_DEMO_KEY (the fake model takes any: export
# MIRRORGATE_DEMO_KEY=anything to serve this file). See docs/configuration.md and examples/.
"""


def print_config(out: TextIO) -> int:
    """Write the demo's configuration, with placeholder addresses, to `out` (`--print-config`)."""
    text = _config(
        "http://127.0.0.1:9999", Path("mirrorgate-demo.db"), 8080, "http://127.0.0.1:9000/alerts"
    )
    out.write(PRINTED_HEADER + text)
    return 0


class _Scene:
    """Shared state of the story: the rule in force, what clients saw, the alerts received."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.max_weight = 100
        self.arms: Counter[str] = Counter()
        self.errors = 0
        self.alerts: list[dict[str, Any]] = []
        self.alert_arrived = threading.Condition(self.lock)

    def wait_for_alert(self, kinds: tuple[str, ...], timeout_s: float) -> dict[str, Any] | None:
        """The first alert received of one of `kinds`, waiting up to `timeout_s` for it."""

        def found() -> dict[str, Any] | None:
            return next((a for a in self.alerts if a.get("kind") in kinds), None)

        with self.alert_arrived:
            self.alert_arrived.wait_for(found, timeout_s)
            return found()

    def system_prompt(self) -> str:
        with self.lock:
            weight = self.max_weight
        return f"You are the support bot of a parcel company. Shipping rule: max_weight = {weight}."

    def saw(self, arm: str | None) -> None:
        with self.lock:
            if arm is None:
                self.errors += 1
            else:
                self.arms[arm] += 1


@contextmanager
def _alert_receiver(scene: _Scene) -> Iterator[str]:
    """A webhook on 127.0.0.1 standing in for the team's alert channel."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0") or 0)
            try:
                alert = json.loads(self.rfile.read(length))
                with scene.alert_arrived:
                    scene.alerts.append(alert)
                    scene.alert_arrived.notify_all()
            finally:
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="demo-alerts", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/alerts"
    finally:
        server.shutdown()
        server.server_close()


def _traffic(url: str, scene: _Scene, stop: threading.Event, worker: int) -> None:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="demo", max_retries=0)
    turn = 0
    try:
        while not stop.is_set():
            turn += 1
            user = f"user-{(worker * 7919 + turn * 104729) % 400}"
            messages: Any = [
                {"role": "system", "content": scene.system_prompt()},
                {"role": "user", "content": QUESTIONS[(worker + turn) % len(QUESTIONS)]},
            ]
            try:
                raw = client.chat.completions.with_raw_response.create(
                    model=ROUTE, messages=messages, extra_headers={"x-user-id": user}
                )
                scene.saw(raw.headers.get("x-mirrorgate-arm"))
            except openai.OpenAIError:
                scene.saw(None)
            stop.wait(0.01)
    finally:
        client.close()


def _status(admin: httpx.Client) -> dict[str, Any]:
    response = admin.get(f"/admin/rollouts/{ROUTE}")
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


def _interval(verdict: Mapping[str, Any]) -> str:
    """A verdict's bounds as `[low, high]`, or how it was decided when it has none (a rate's
    exact guard fails a canary on few answers without a normal interval)."""
    if verdict.get("low") is None or verdict.get("high") is None:
        return "(by an exact test)"
    return f"[{verdict['low']:.2f}, {verdict['high']:.2f}]"


def _clock(started: float) -> str:
    return f"[{time.monotonic() - started:5.1f}s]"


def run_demo(
    port: int = 8080,
    duration_s: float = 0.0,
    out: Callable[[str], None] = print,
    keep_running: bool = False,
) -> int:
    """Run the story; return the exit code. Ctrl-C (or `duration_s`) ends it cleanly."""
    stop = threading.Event()

    def interrupt(_sig: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGINT, interrupt)
    for name in ("mirrorgate", "proxy"):  # the story prints what matters; logs would repeat it
        logging.getLogger(name).setLevel(logging.WARNING)
    for name in ("mirrorgate.rollouts", "mirrorgate.upstream"):  # the story's own events
        logging.getLogger(name).setLevel(logging.ERROR)
    folder = Path(tempfile.mkdtemp(prefix="mirrorgate-demo-"))
    db = folder / "mirrorgate.db"
    scene = _Scene()
    try:
        with (
            MockUpstreamServer(parse_behavior(DEMO_BEHAVIOR)) as mock,
            _alert_receiver(scene) as hook_url,
        ):
            config = parse_config(_config(mock.url, db, port, hook_url), env=DEMO_ENV)
            try:
                gateway = GatewayServer(config, env=DEMO_ENV).__enter__()
            except RuntimeError as exc:
                out(f"mirrorgate: could not start the gateway on port {port} ({exc}); "
                    "try --port 0")  # fmt: skip
                return 1
            _banner(out, gateway.url, mock.url, db)
            started = time.monotonic()
            limit = duration_s or STORY_LIMIT_S
            with (
                ThreadPoolExecutor(max_workers=6, thread_name_prefix="demo-traffic") as pool,
                httpx.Client(base_url=gateway.url, timeout=10) as admin,
            ):
                for worker in range(6):
                    pool.submit(_traffic, gateway.url, scene, stop, worker)
                _story(admin, scene, stop, started, limit, out)
                if keep_running and not stop.is_set():
                    out(f"the gateway keeps serving at {gateway.url}; Ctrl-C to stop")
                    stop.wait()
                stop.set()
            gateway.stop()
            out(f"stopped cleanly; the records stay in {db}")
        return 0
    finally:
        signal.signal(signal.SIGINT, previous)


def _story(
    admin: httpx.Client,
    scene: _Scene,
    stop: threading.Event,
    started: float,
    limit: float,
    out: Callable[[str], None],
) -> None:
    rollout_started = False
    rule_changed_at: float | None = None
    rolled_back_at: float | None = None
    seen_revision = 0
    warned = False
    last_status = 0.0
    while not stop.wait(0.25):
        elapsed = time.monotonic() - started
        if elapsed >= limit:
            break
        if not rollout_started and elapsed >= START_AT_S:
            rollout_started = True
            admin.post(
                f"/admin/rollouts/{ROUTE}/start",
                json={"reason": "operator: try new-model, 33% cheaper"},
            ).raise_for_status()
            out(f"{_clock(started)} $ mirrorgate rollout start {ROUTE}   "
                f"(new-model gets {STEPS[0]}% of users, sticky by x-user-id)")  # fmt: skip
        state = _status(admin)
        for event in reversed(state["transitions"]):
            if event["revision"] > seen_revision:
                seen_revision = event["revision"]
                out(_event_line(started, event))
        if not warned:
            warning = scene.wait_for_alert(("verdict_fail",), 0)
            if warning is not None:
                warned = True
                out(f"{_clock(started)} !! warning alert sent: {warning['summary']}")
        at_last_step = state["phase"] == "progressing" and state["step"] == len(STEPS) - 1
        if (
            rule_changed_at is None
            and rollout_started
            and (
                (
                    at_last_step
                    and time.time() - _since(state["step_started_at"])
                    >= RULE_CHANGE_AFTER_LAST_STEP_S
                )
                or elapsed >= CHANGE_BY_S
            )
        ):
            with scene.lock:
                scene.max_weight = 150
            rule_changed_at = elapsed
            out(f"{_clock(started)} the business rule changes: max_weight = 150 "
                "(new system prompt, rule shipping-policy v1 -> v2)")  # fmt: skip
        if state["phase"] == "rolled_back" and rolled_back_at is None:
            rolled_back_at = elapsed
            _print_rollback(out, state, scene, rule_changed_at, elapsed)
        if elapsed - last_status >= 4:
            last_status = elapsed
            out(_status_line(started, state, scene))
        if rolled_back_at is not None and elapsed - rolled_back_at >= AFTER_ROLLBACK_S:
            break
    out(_summary(admin, scene))
    out(GUARD_SCENE_LINE)


GUARD_SCENE_LINE = (
    "Next: `mirrorgate demo --scene guard` - rule-flip probes catch a candidate that memorised "
    "the rule before it changes (its canary refused), and the guard switches a production model "
    "that keeps the old rule to one that follows."
)


def _since(iso: str | None) -> float:
    return datetime.fromisoformat(iso).timestamp() if iso else time.time()


def _event_line(started: float, event: dict[str, Any]) -> str:
    to = event["to_phase"]
    if to == "progressing" and event["action"] in ("start", "advance"):
        what = f"canary at {event['weight']:g}%"
    else:
        what = to.replace("_", " ")
    return f"{_clock(started)} >> {what:<16} by {event['actor']}: {event['reason']}"


def _status_line(started: float, state: dict[str, Any], scene: _Scene) -> str:
    with scene.lock:
        arms = dict(scene.arms)
        errors = scene.errors
    latest: dict[str, str] = {}
    for verdict in state.get("verdicts", []):
        latest.setdefault(verdict["metric"], verdict["verdict"])
    tally = Counter(latest.values())
    verdicts = " ".join(f"{k} {v}" for k, v in sorted(tally.items())) or "none yet"
    phase = state["phase"]
    if phase == "progressing":
        phase = f"step {state['step'] + 1}/{len(STEPS)} at {state['weight_percent']:g}%"
    served = "  ".join(f"{arm} {n}" for arm, n in sorted(arms.items()))
    return (
        f"{_clock(started)}    {phase:<22} answers: {served}  errors {errors}  "
        f"latest verdicts: {verdicts}"
    )


def _print_rollback(
    out: Callable[[str], None],
    state: dict[str, Any],
    scene: _Scene,
    changed_at: float | None,
    now: float,
) -> None:
    after = f" {now - changed_at:.1f}s after the rule changed" if changed_at is not None else ""
    out("")
    serving = state["serving"]["primary"]
    if state.get("rolled_back_to") == "fallback":
        out(f"ROLLED BACK{after}: all traffic now goes to the fallback '{serving}'.")
    else:
        out(f"ROLLED BACK{after}: canary '{state['candidate']}' at 0%; the primary '{serving}' "
            "serves every user again (fallback 'safe' stays its retry target).")  # fmt: skip
    out(f"  reason   {state['reason']}")
    fails = [v for v in state["verdicts"] if v["verdict"] == "fail"][:1]
    for v in fails:
        out(f"  evidence {v['metric']} ({v['scope']}): regression {v['estimate']:.2f} "
            f"{_interval(v)} > margin {v['threshold']:g}; "
            f"{v['n_primary']} primary vs {v['n_candidate']} canary answers")  # fmt: skip
    alert = scene.wait_for_alert(("rule_regression", "rollback"), 5.0)
    if alert is not None:
        out(f"  alert    -> webhook: [{alert['severity']}] {alert['kind']} rule={alert['rule']} "
            f"version={alert['rule_version']} check={alert['check']}")  # fmt: skip
        out(f"           example requests: {', '.join(alert['example_request_ids'][:3])}")
    out("")


def _summary(admin: httpx.Client, scene: _Scene) -> str:
    state = _status(admin)
    lines = ["", "What happened (from GET /admin/rollouts/support-bot):"]
    for event in reversed(state["transitions"]):
        lines.append(
            f"  {event['at'][11:23]}  {event['from_phase']!s:<12} -> {event['to_phase']:<12} "
            f"{event['weight']:>5g}%  {event['actor']:<9} {event['reason']}"
        )
    with scene.lock:
        arms = dict(scene.arms)
    lines.append("Answers by arm: " + ", ".join(f"{a} {n}" for a, n in sorted(arms.items())))
    phase = state["phase"]
    if state.get("rolled_back_to"):
        phase += f" to {state['rolled_back_to']}"
    lines.append(f"Now: phase {phase}, serving {state['serving']['primary']}.")
    return "\n".join(lines)


def _banner(out: Callable[[str], None], url: str, mock_url: str, db: Path) -> None:
    out("mirrorgate demo: a model change, start to rollback, in about a minute.")
    out(f"  gateway      {url}   (route '{ROUTE}': primary 'prod', fallback 'safe')")
    out(f"  fake models  {mock_url}")
    out(f"  rollout      {url}/admin/rollouts/{ROUTE}   "
        f"(or: mirrorgate rollout status {ROUTE} --url {url})")  # fmt: skip
    out(f"  metrics      {url}/metrics")
    out(f"  records      {db}")
    out("Press Ctrl-C to stop.\n")
