"""Rule-flip probes end to end: staged adaptation rates measured back through real processes.

`mirrorgate mock-upstream` serves a follower primary and three models of one rule that answer
the memorised `max_weight = 100` on a staged share of their answers (the fake model's counter
schedule, docs/mock-upstream.md): adaptation 0 %, 30 % and 95 %. `mirrorgate serve` probes every
live request of the rule (sample 1) on all three, flipping the prompt's 100 to 150. Open-loop
traffic at `--rate` requests/s until each target has `--probes` scored probes; then
`GET /admin/rules` gives each target's adaptation rate and its 95 % interval, which must lie within
±5 points of the staged rate (exit 1 otherwise). The mock's schedule is a counter, so this measures
the gateway's whole path (sampling, rewriting, calling, scoring, recording, counting) rather than
the binomial spread: `bench/adaptation_simulation.py` measures that.

    .venv/bin/python bench/probes_e2e.py                 # 200 probes per target at 20 req/s
    .venv/bin/python bench/probes_e2e.py --rate 2        # the same at 2 req/s (about 100 s)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.processes import ServerProcess, free_port, http_ok

HOST = "127.0.0.1"
RULE = "shipping"
STAGED = {"adapt-0": 0.0, "adapt-30": 0.30, "adapt-95": 0.95}
"""Each probed model and the share of probes it follows (it answers 100 on the rest)."""
PATTERN = r"max_weight\s*=\s*(\d+)"


def behavior() -> dict[str, Any]:
    def model(adaptation: float) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "type": "regex_from_system", "pattern": PATTERN, "template": '{"max_weight": {1}}',
        }  # fmt: skip
        if adaptation < 1.0:
            answer["memorised"] = {"group": 1, "value": "100", "rate": round(1 - adaptation, 4)}
        return {"answer": answer}

    models = {name: model(p) for name, p in STAGED.items()}
    return {"record_requests": False, "models": {"prod-model": model(1.0), **models}}


def config(mock_port: int, port: int, db: Path) -> dict[str, Any]:
    def model(name: str) -> dict[str, Any]:
        return {"provider": "openai", "base_url": f"http://{HOST}:{mock_port}/v1", "model": name,
                "api_key_env": "BENCH_KEY"}  # fmt: skip

    return {
        "server": {"host": HOST, "port": port},
        "store": {"url": f"sqlite:///{db}", "bodies": "none", "flush_interval_ms": 50},
        "models": {"prod": model("prod-model"), **{name: model(name) for name in STAGED}},
        "routes": {"bot": {"primary": "prod"}},
        "rules": {
            RULE: {
                "routes": ["bot"],
                "probes": {
                    "parameter": r"max_weight\s*=\s*(?P<value>\d+)",
                    "values": [150],
                    "expect": [{"name": "follows", "type": "json_path", "path": "$.max_weight",
                                "equals": "{value}"}],
                    "targets": list(STAGED),
                    "sample": 1.0,
                    "max_per_hour": 1_000_000,
                    "max_usd_per_hour": None,
                    "max_concurrency": 16,
                },
            }
        },
    }  # fmt: skip


def scores(url: str) -> dict[str, Any]:
    answer = httpx.get(f"{url}/admin/rules", timeout=10)
    answer.raise_for_status()
    probes: dict[str, Any] = answer.json().get("probes", {}).get(RULE, {})
    return probes


def traffic(url: str, rate: float, stop: threading.Event, sent: list[int]) -> None:
    """Open-loop: one request every 1/rate s, each on its own thread (a slow answer never slows
    the schedule)."""
    body = {
        "model": "bot",
        "messages": [
            {"role": "system", "content": "Parcel policy. max_weight = 100. Answer in JSON."},
            {"role": "user", "content": "What is the heaviest parcel you take?"},
        ],
    }
    threads: list[threading.Thread] = []
    with httpx.Client(timeout=30) as client:

        def one() -> None:
            with contextlib.suppress(httpx.HTTPError):  # counted by what the store holds
                client.post(f"{url}/v1/chat/completions", json=body)

        start = time.monotonic()
        n = 0
        while not stop.is_set():
            due = start + n / rate
            if stop.wait(max(0.0, due - time.monotonic())):
                break
            thread = threading.Thread(target=one, daemon=True)
            thread.start()
            threads.append(thread)
            n += 1
            sent[0] = n
        for thread in threads:  # the client closes once its requests are answered
            thread.join(30)


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    mock_port, port = free_port(), free_port()
    (work / "behavior.json").write_text(json.dumps(behavior()))
    (work / "mirrorgate.yaml").write_text(json.dumps(config(mock_port, port, work / "p.db")))
    python = sys.executable
    env = {**os.environ, "BENCH_KEY": "bench"}
    env.pop("MIRRORGATE_ADMIN_TOKEN", None)  # a loopback listener: the admin API is open
    mock = ServerProcess(
        "mock-upstream",
        [python, "-m", "proxy.cli", "--log-level", "warning", "mock-upstream", "--host", HOST,
         "--port", str(mock_port), "--behavior", str(work / "behavior.json")],
        ready=http_ok(f"http://{HOST}:{mock_port}/healthz"), log_path=work / "mock.log",
    )  # fmt: skip
    gateway = ServerProcess(
        "mirrorgate",
        [python, "-m", "proxy.cli", "--log-level", "warning", "serve",
         "--config", str(work / "mirrorgate.yaml")],
        ready=http_ok(f"http://{HOST}:{port}/readyz"), log_path=work / "gateway.log", env=env,
    )  # fmt: skip
    url = f"http://{HOST}:{port}"
    stop = threading.Event()
    sent = [0]
    with mock, gateway:
        started = time.monotonic()
        sender = threading.Thread(target=traffic, args=(url, args.rate, stop, sent), daemon=True)
        sender.start()
        deadline = started + args.probes / args.rate * 3 + 60
        found: dict[str, Any] = {}
        try:
            while time.monotonic() < deadline:
                found = scores(url)
                if all(found.get(t, {}).get("probes", 0) >= args.probes for t in STAGED):
                    break
                stop.wait(1.0)
        finally:
            stop.set()
            sender.join(10)
        took = time.monotonic() - started
    rows = []
    ok = True
    for target, staged in STAGED.items():
        score = found.get(target, {})
        adaptation = score.get("adaptation") or {}
        rate = adaptation.get("rate")
        within = rate is not None and abs(rate - staged) <= 0.05
        ok = ok and within and score.get("probes", 0) >= args.probes
        rows.append({
            "target": target, "staged": staged, "probes": score.get("probes", 0),
            "followed": score.get("followed", 0), "stuck": score.get("stuck", 0),
            "other": score.get("other", 0), "rate": rate, "low": adaptation.get("low"),
            "high": adaptation.get("high"), "within_5_points": within,
        })  # fmt: skip
    return {"rate": args.rate, "requests_sent": sent[0], "seconds": round(took, 1),
            "targets": rows, "ok": ok}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=20.0, help="live requests per second")
    parser.add_argument("--probes", type=int, default=200, help="scored probes per target")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mirrorgate-probes-") as folder:
        result = run(args, Path(folder))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['requests_sent']} requests at {args.rate:g}/s, {result['seconds']} s")
        for row in result["targets"]:
            rate = "-" if row["rate"] is None else f"{row['rate']:.1%}"
            interval = "" if row["low"] is None else f" [{row['low']:.1%}, {row['high']:.1%}]"
            print(f"  {row['target']:<9} staged {row['staged']:.0%}  measured {rate}{interval}  "
                  f"({row['followed']} followed, {row['stuck']} stuck, {row['other']} other of "
                  f"{row['probes']})  {'ok' if row['within_5_points'] else 'OFF'}")  # fmt: skip
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
