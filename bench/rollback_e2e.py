"""Time from a rule change to the rollback, and of a good canary to its promotion, end to end
through real processes.

    .venv/bin/python bench/rollback_e2e.py [--runs 5] [--rate 40] [--before-s 60] [--steps 50]
    .venv/bin/python bench/rollback_e2e.py --scenario good --rate 5 --steps default

Each run starts `mirrorgate mock-upstream` and `mirrorgate serve` (SQLite, default analysis
settings: a look every 10 s, a 60 s window, `failure_limit: 2`) with route `support-bot`: primary
`prod` follows the shipping rule in its system prompt, canary `stale` (50 %, sticky by user) always
answers the old rule. Client threads send `--rate` requests/s in all (so `--rate 40` is 20 per arm,
the issue's scenario) with rule v1 for `--before-s` seconds plus a random 0 to 10 s after the
rollout starts (so the change lands anywhere in the judge's 10 s look cycle), then switch the
system prompt to rule v2. The clock runs from the first v2 request to the moment
`GET /admin/rollouts/support-bot` says `rolled_back`. The models answer after 50 ms.

After the rollback, 20 requests from as many users check where traffic went: the route's
`canary.rollback_to` is the default `primary`, so every answer must come from the primary
(`x-mirrorgate-arm: primary`), none from the canary or the fallback.

Prints one line per run and the median and maximum (the issue's target: 30 s median, 60 s p95);
exits 1 if any run's answers after the rollback did not all come from the primary.

`--steps` sets the canary's steps (`50`, `10,25,50,100`, or `default` for the config's default);
`--scenario good` runs a canary `good` that follows the rule like the primary, with no rule change,
and times the start to the promotion (then every answer must come from the promoted candidate,
served as `primary`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.processes import ServerProcess, http_ok, port_free

HOST = "127.0.0.1"
MOCK_PORT, GATEWAY_PORT = 18091, 18090
ROUTE = "support-bot"
FOLLOWER = {
    "type": "regex_from_system",
    "pattern": r"max_weight\s*=\s*(\d+)",
    "template": '{"max_weight": {1}}',
}


def _config(db: Path, canary: str, steps: list[int] | None) -> str:
    def model(name: str) -> dict[str, Any]:
        return {
            "provider": "openai",
            "base_url": f"http://{HOST}:{MOCK_PORT}/v1",
            "model": name,
            "price": {"input_per_mtok": 0.15, "output_per_mtok": 0.6},
        }

    check = {"name": "max-weight", "type": "json_path", "path": "$.max_weight"}
    doc = {
        "server": {"host": HOST, "port": GATEWAY_PORT},
        "store": {"url": f"sqlite:///{db}", "bodies": "none"},
        "models": {
            "prod": model("prod"), "stale": model("stale"), "good": model("good"),
            "safe": model("prod"),
        },
        "routes": {
            ROUTE: {
                "primary": "prod",
                "fallback": "safe",
                "canary": {"model": canary, "sticky": "header:x-user-id",
                           **({"steps": steps, "step_interval_s": 3600} if steps else {})},
            }
        },
        "rules": {
            "shipping": {
                "routes": [ROUTE],
                "versions": {
                    "v1": {"match_prompt": r"max_weight\s*=\s*100\b",
                           "checks": [{**check, "equals": 100}]},
                    "v2": {"match_prompt": r"max_weight\s*=\s*150\b",
                           "checks": [{**check, "equals": 150}]},
                },
            }
        },
    }  # fmt: skip
    return json.dumps(doc)


def _post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", **(headers or {})},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _arms_after_rollback(users: int = 20) -> Counter[str]:
    """Which arm served one v2 request of each of `users` users (`x-mirrorgate-arm`)."""
    arms: Counter[str] = Counter()
    for n in range(users):
        request = urllib.request.Request(
            f"http://{HOST}:{GATEWAY_PORT}/v1/chat/completions",
            data=json.dumps(
                {
                    "model": ROUTE,
                    "messages": [
                        {"role": "system", "content": "Shipping rule: max_weight = 150."},
                        {"role": "user", "content": "How heavy may my parcel be?"},
                    ],
                }
            ).encode(),
            headers={"content-type": "application/json", "x-user-id": f"after-{n}"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            arms[response.headers.get("x-mirrorgate-arm", "?")] += 1
    return arms


def _phase() -> str:
    with urllib.request.urlopen(
        f"http://{HOST}:{GATEWAY_PORT}/admin/rollouts/{ROUTE}", timeout=10
    ) as response:
        state = json.loads(response.read())
    return str(state["phase"])


class Traffic:
    """`rate` requests/s in all, from `rate / 10` threads (each sends one every 0.1 s at most)."""

    def __init__(self, rate: int) -> None:
        self.weight = 100
        self.stop = threading.Event()
        self.first_v2: float | None = None
        self.sent = 0
        self._lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._run, args=(i, max(1, rate // 10)), daemon=True)
            for i in range(max(1, rate // 10))
        ]
        self.period = max(1, rate // 10) / rate

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def _run(self, worker: int, workers: int) -> None:
        n = 0
        next_at = time.monotonic() + worker * self.period / workers
        while not self.stop.is_set():
            n += 1
            weight = self.weight
            if weight == 150:
                with self._lock:
                    if self.first_v2 is None:
                        self.first_v2 = time.monotonic()
            body = {
                "model": ROUTE,
                "messages": [
                    {"role": "system", "content": f"Shipping rule: max_weight = {weight}."},
                    {"role": "user", "content": "How heavy may my parcel be?"},
                ],
            }
            try:
                _post(
                    f"http://{HOST}:{GATEWAY_PORT}/v1/chat/completions",
                    body,
                    # 1,000 users a worker: with a 10 % step, a hundred of them are the canary's,
                    # so its share of requests is close to 10 % (50 users could leave it 2 %).
                    {"x-user-id": f"user-{worker}-{n % 1000}"},
                )
                with self._lock:
                    self.sent += 1
            except OSError:
                pass
            next_at += self.period
            self.stop.wait(max(0.0, next_at - time.monotonic()))


def one_run(
    work: Path,
    rate: int,
    before_s: float,
    give_up_s: float,
    steps: list[int] | None,
    scenario: str = "rule-change",
) -> tuple[float | None, Counter[str]]:
    """Seconds from the first v2 request to the rollback (None: none) — or, for `good`, from the
    start to the promotion — and the arms that served the requests sent after it."""
    for port in (MOCK_PORT, GATEWAY_PORT):
        if not port_free(HOST, port):
            raise SystemExit(f"port {port} is taken")
    behavior = work / "behavior.json"
    behavior.write_text(
        json.dumps(
            {
                "record_requests": False,
                "default": {"latency_ms": 50},
                "models": {
                    "prod": {"answer": FOLLOWER},
                    "stale": {"answer": {"type": "fixed", "text": '{"max_weight": 100}'}},
                    "good": {"answer": FOLLOWER},
                },
            }
        )
    )
    config = work / "mirrorgate.yaml"
    canary = "good" if scenario == "good" else "stale"
    config.write_text(_config(work / "gw.db", canary, steps))
    python = sys.executable
    mock = ServerProcess(
        "mock-upstream",
        [python, "-m", "proxy.cli", "--log-level", "warning", "mock-upstream", "--host", HOST,
         "--port", str(MOCK_PORT), "--behavior", str(behavior)],
        ready=http_ok(f"http://{HOST}:{MOCK_PORT}/healthz"),
        log_path=work / "mock.log",
    )  # fmt: skip
    gateway = ServerProcess(
        "mirrorgate",
        [python, "-m", "proxy.cli", "serve", "--config", str(config)],
        ready=http_ok(f"http://{HOST}:{GATEWAY_PORT}/readyz"),
        log_path=work / "gateway.log",
        env={k: v for k, v in os.environ.items() if k != "MIRRORGATE_ADMIN_TOKEN"},  # open admin
    )
    with mock, gateway:
        _post(f"http://{HOST}:{GATEWAY_PORT}/admin/rollouts/{ROUTE}/start", {})
        traffic = Traffic(rate)
        traffic.start()
        started = time.monotonic()
        try:
            if scenario == "good":
                deadline = started + give_up_s
                while time.monotonic() < deadline:
                    phase = _phase()
                    if phase == "promoted":
                        return time.monotonic() - started, _arms_after_rollback()
                    if phase != "progressing":
                        print(f"  the good canary ended {phase}")
                        return None, Counter()
                    time.sleep(1.0)  # polling the admin API
                return None, Counter()
            time.sleep(before_s)  # the load generator's v1 period, not a synchronisation
            if _phase() != "progressing":
                print(f"  the canary was rolled back before the rule changed ({_phase()})")
                return None, Counter()
            traffic.weight = 150
            deadline = time.monotonic() + give_up_s
            while time.monotonic() < deadline:
                if _phase() == "rolled_back":
                    first = traffic.first_v2 or time.monotonic()
                    return time.monotonic() - first, _arms_after_rollback()
                time.sleep(0.2)  # polling the admin API
            return None, Counter()
        finally:
            traffic.stop.set()
            for thread in traffic.threads:
                thread.join(35)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rate", type=int, default=40, help="requests/s, both arms together")
    parser.add_argument("--before-s", type=float, default=60.0)
    parser.add_argument("--give-up-s", type=float, default=300.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--steps", default="50", help="the canary's steps: '50', '10,25,50,100' or 'default'"
    )
    parser.add_argument("--scenario", choices=("rule-change", "good"), default="rule-change")
    args = parser.parse_args()
    steps = None if args.steps == "default" else [int(v) for v in args.steps.split(",")]
    jitter = random.Random(args.seed)
    times: list[float] = []
    wrong_arm = False
    for run in range(1, args.runs + 1):
        before = args.before_s + jitter.uniform(0, 10)
        with tempfile.TemporaryDirectory(prefix="mirrorgate-rollback-") as folder:
            took, arms = one_run(
                Path(folder), args.rate, before, args.give_up_s, steps, args.scenario
            )
        served = ", ".join(f"{arm} {n}" for arm, n in sorted(arms.items()))
        after = f"; answers after it: {served}" if arms else ""
        if args.scenario == "good":
            shown = f"promoted after {took:.0f} s" if took is not None else "not promoted"
            print(f"run {run}: {shown}{after}", flush=True)
        else:
            shown = f"{took:.1f} s" if took is not None else "no rollback"
            print(
                f"run {run}: rule v2 after {before:.1f} s, then rollback {shown}{after}", flush=True
            )
        if took is not None:
            times.append(took)
            wrong_arm = wrong_arm or set(arms) != {"primary"}
    if times:
        print(
            f"median {statistics.median(times):.1f} s, max {max(times):.1f} s over "
            f"{len(times)}/{args.runs} runs ({args.rate} req/s, steps {args.steps}, "
            f"{args.scenario})"
        )
    if wrong_arm:
        print("after a rollback, some answers did not come from the primary", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
