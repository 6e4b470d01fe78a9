"""The soak: a real gateway under a steady, mixed, partly hostile load; nothing answered may go
unrecorded and memory must stay flat.

    .venv/bin/python bench/soak.py                      # 20 minutes at 50 requests/s, SQLite
    .venv/bin/python bench/soak.py --duration 60        # a quick run
    .venv/bin/python bench/soak.py --store postgres     # the PostgreSQL on 127.0.0.1:5432

It starts `mirrorgate mock-upstream` and `mirrorgate serve` (two subprocesses on 127.0.0.1) with
route `chat` (OpenAI: primary, a shadow on every request, a canary rollout started at once and held
on its first step, a rule with a check), route `claude` (Anthropic, a shadow) and sends `--rate`
requests per second for `--duration` seconds, open loop (a request leaves on schedule whether or
not the earlier ones are answered), in this mix:

    30 %  OpenAI chat, not streamed           10 %  Anthropic messages, not streamed
    20 %  OpenAI chat, streamed               10 %  Anthropic messages, streamed
    10 %  a stream the client hangs up on after its first chunk
     5 %  an embeddings call                   5 %  a big body (200 KB prompt)
    10 %  malformed: invalid JSON, wrong types, an unknown route, a wrong content type

RSS of the gateway is read from /proc every `--sample-s` seconds. At the end the gateway is
stopped with SIGTERM (which drains the recorder) and the store is read:

- records == answered: the request ids the clients were given on every answer that was served
  (it carries `x-mirrorgate-arm`; the malformed requests are refused before and have none) are
  exactly the request ids of the client-path records (arm primary, canary or fallback);
  none missing, none extra;
- memory flat: the least-squares slope of RSS is below `--max-slope-mib-per-min`, over the
  second half of the run or from the moment the gateway's bounded cache of recent answers is full
  (`RECENT_ANSWERS`; it grows until then by design), whichever is later; a window shorter than
  five minutes (a quick run, or a 10-minute one: the cache is full at ~445 s at 50 requests/s) is
  reported, not judged.

Prints a summary (and `--json` the same as one object); exits 1 if either fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.processes import ServerProcess, http_ok, port_free

HOST = "127.0.0.1"
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
CLIENT_ARMS = ("primary", "canary", "fallback")
BIG_PROMPT = "lorem ipsum dolor sit amet " * 7_600  # ~200 KB
RECENT_ANSWERS = 20_000
"""The answers the gateway remembers for feedback (`RecentExchanges`, a few MB): until that many
were served its memory grows by design, so the memory slope is judged from then on (or over the
second half of the run, whichever starts later)."""
MIN_WINDOW_S = 300.0
"""A shorter window than this is too short to judge a slope: the memory verdict is skipped. RSS read
every 5 s moves by a MiB or two between readings (a look's rows, the recorder's batches), so a
least-squares slope over two or three minutes is mostly that noise: a quiet 10-minute run whose
last four minutes read 142.1, 142.4, 142.0 and 141.6 MiB still fitted +1.5 MiB/min over its 156 s
window. Over ten minutes (the default 20-minute run's second half) the same tree fits +0.2."""

MIX: list[tuple[str, int]] = [
    ("chat", 30),
    ("chat_stream", 20),
    ("messages", 10),
    ("messages_stream", 10),
    ("hang_up", 10),
    ("embeddings", 5),
    ("big_body", 5),
    ("malformed", 10),
]


def behavior() -> dict[str, Any]:
    """The mock's models: quick answers, a paced one for the streams clients hang up on."""
    return {
        "record_requests": False,
        "default": {"latency_ms": 5, "answer": {"type": "echo", "answer_tokens": 40}},
        "models": {
            "paced": {
                "ttft_ms": 20,
                "tokens_per_second": 400,
                "answer": {"type": "echo", "answer_tokens": 120},
            },
        },
    }


def config(mock_port: int, gateway_port: int, store_url: str) -> dict[str, Any]:
    def model(name: str, provider: str = "openai") -> dict[str, Any]:
        base = f"http://{HOST}:{mock_port}" + ("/v1" if provider == "openai" else "")
        return {
            "provider": provider,
            "base_url": base,
            "model": name,
            "timeout_s": 10,
            "price": {"input_per_mtok": 0.15, "output_per_mtok": 0.6},
        }

    return {
        "server": {"host": HOST, "port": gateway_port, "drain_timeout_s": 20},
        "store": {"url": store_url, "bodies": "redacted", "flush_interval_ms": 100},
        "models": {
            "prod": model("prod"),
            "cand": model("prod"),
            "shadow": model("shadow"),
            "paced": model("paced"),
            "emb": model("emb"),
            "claude": model("claude", "anthropic"),
            "claude-shadow": model("claude-shadow", "anthropic"),
        },
        "routes": {
            "chat": {
                "primary": "prod",
                "shadows": [{"model": "shadow", "sample": 1.0}],
                "canary": {
                    "model": "cand",
                    "steps": [20, 50],
                    "step_interval_s": 86_400,
                    "sticky": "header:x-user-id",
                },
            },
            "paced": {"primary": "paced"},
            "emb": {"primary": "emb"},
            "claude": {"primary": "claude", "shadows": [{"model": "claude-shadow"}]},
        },
        "rules": {
            "terse": {
                "routes": ["chat"],
                "checks": [{"name": "short", "type": "max_chars", "max": 100_000}],
            }
        },
    }


@dataclass
class Tally:
    """What the clients saw."""

    answered: set[str] = field(default_factory=set)
    """Request ids of the answers that were served (they carry `x-mirrorgate-arm`)."""
    statuses: Counter[str] = field(default_factory=Counter)
    """kind/status → count."""
    refused_with_id: int = 0
    client_errors: Counter[str] = field(default_factory=Counter)
    """Requests that got no answer at all (a client-side timeout or a broken connection)."""
    late: int = 0
    """Requests that left later than scheduled because too many were in flight."""
    start: float = field(default_factory=time.monotonic)
    caches_full_at: float | None = None
    """Seconds into the run when the gateway's bounded caches of recent answers were full."""

    def saw(self, kind: str, response: httpx.Response) -> None:
        self.statuses[f"{kind}/{response.status_code}"] += 1
        request_id = response.headers.get("x-mirrorgate-request-id")
        if response.headers.get("x-mirrorgate-arm") and request_id:
            self.answered.add(request_id)
            if self.caches_full_at is None and len(self.answered) >= RECENT_ANSWERS:
                self.caches_full_at = time.monotonic() - self.start


def _chat(stream: bool, model: str = "chat", content: str = "") -> dict[str, Any]:
    return {
        "model": model,
        "stream": stream,
        "messages": [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": content or f"soak question {uuid.uuid4().hex[:8]}"},
        ],
    }


def _messages(stream: bool) -> dict[str, Any]:
    return {
        "model": "claude",
        "max_tokens": 64,
        "stream": stream,
        "messages": [{"role": "user", "content": f"soak question {uuid.uuid4().hex[:8]}"}],
    }


MALFORMED: list[tuple[str, bytes, str]] = [
    ("/v1/chat/completions", b'{"model": "chat", "messages": [', "application/json"),
    ("/v1/chat/completions", b'{"model": 42, "messages": []}', "application/json"),
    ("/v1/chat/completions", b'{"model": "chat", "stream": "yes"}', "application/json"),
    ("/v1/chat/completions", b'{"model": "no-such-route"}', "application/json"),
    ("/v1/chat/completions", b'{"model": "chat"}', "text/plain"),
    ("/v1/messages", b"[1, 2, 3]", "application/json"),
    ("/v1/messages", b'{"model": "chat", "messages": []}', "application/json"),
    ("/v1/embeddings", b"\xff\xfe\x00garbage", "application/json"),
]


async def one_request(client: httpx.AsyncClient, kind: str, rng: random.Random, t: Tally) -> None:
    user = {"x-user-id": f"user-{rng.randrange(500)}"}
    if kind in ("chat", "chat_stream", "big_body"):
        body = _chat(kind == "chat_stream", content=BIG_PROMPT if kind == "big_body" else "")
        await _send(client, kind, "/v1/chat/completions", body, user, t)
    elif kind in ("messages", "messages_stream"):
        headers = {**user, "anthropic-version": "2023-06-01"}
        await _send(client, kind, "/v1/messages", _messages(kind.endswith("stream")), headers, t)
    elif kind == "embeddings":
        body = {"model": "emb", "input": f"soak {rng.random()}"}
        await _send(client, kind, "/v1/embeddings", body, user, t)
    elif kind == "hang_up":
        request = client.build_request(
            "POST", "/v1/chat/completions", json=_chat(True, "paced"), headers=user
        )
        response = await client.send(request, stream=True)
        try:
            t.saw(kind, response)
            async for _chunk in response.aiter_raw():
                break  # the client hangs up after the first chunk
        finally:
            await response.aclose()
    else:
        path, raw, content_type = rng.choice(MALFORMED)
        response = await client.post(path, content=raw, headers={"content-type": content_type})
        t.saw(kind, response)
        if response.headers.get("x-mirrorgate-arm"):
            t.refused_with_id += 1  # a malformed request was served: it should not have been


async def _send(
    client: httpx.AsyncClient,
    kind: str,
    path: str,
    body: dict[str, Any],
    headers: dict[str, str],
    t: Tally,
) -> None:
    if body.get("stream"):
        async with client.stream("POST", path, json=body, headers=headers) as response:
            async for _chunk in response.aiter_raw():
                pass
            t.saw(kind, response)
    else:
        t.saw(kind, await client.post(path, json=body, headers=headers))


async def drive(url: str, rate: float, duration_s: float, seed: int, t: Tally) -> None:
    """Send `rate` requests per second for `duration_s`, open loop, at most 400 in flight."""
    rng = random.Random(seed)
    kinds = [kind for kind, _ in MIX]
    weights = [weight for _, weight in MIX]
    limits = httpx.Limits(max_connections=400, max_keepalive_connections=100)
    timeout = httpx.Timeout(30.0)
    inflight = asyncio.Semaphore(400)
    tasks: set[asyncio.Task[None]] = set()

    async def run(kind: str) -> None:
        try:
            await one_request(client, kind, rng, t)
        except httpx.HTTPError as exc:
            t.client_errors[f"{kind}/{type(exc).__name__}"] += 1
        finally:
            inflight.release()

    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout) as client:
        start = time.monotonic()
        n = 0
        while (due := start + n / rate) < start + duration_s:
            pause = due - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)  # the schedule of an open-loop load
            if inflight.locked():
                t.late += 1
            await inflight.acquire()
            task = asyncio.ensure_future(run(rng.choices(kinds, weights)[0]))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            n += 1
        if tasks:
            await asyncio.wait(set(tasks), timeout=60)


def slope_mib_per_min(samples: list[tuple[float, int]]) -> float:
    """Least-squares slope of RSS over time, MiB per minute."""
    if len(samples) < 2:
        return 0.0
    xs = [s for s, _ in samples]
    ys = [b / 2**20 for _, b in samples]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return 0.0
    return 60 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var


async def sample_rss(gateway: ServerProcess, every_s: float, out: list[tuple[float, int]]) -> None:
    start = time.monotonic()
    while True:
        out.append((time.monotonic() - start, gateway.rss_bytes()))
        await asyncio.sleep(every_s)  # the sampling period


async def soak(gateway: ServerProcess, url: str, args: argparse.Namespace, t: Tally) -> list[Any]:
    samples: list[tuple[float, int]] = []
    t.start = time.monotonic()
    sampler = asyncio.ensure_future(sample_rss(gateway, args.sample_s, samples))
    try:
        await drive(url, args.rate, args.duration, args.seed, t)
    finally:
        sampler.cancel()
    samples.append((samples[-1][0] + args.sample_s if samples else 0.0, gateway.rss_bytes()))
    return samples


def stored_ids(store: str, store_url: str, db: Path, schema: str) -> tuple[set[str], int]:
    """The request ids of the client-path records, and the number of all records."""
    arms = ", ".join(f"'{arm}'" for arm in CLIENT_ARMS)
    query = f"SELECT request_id FROM exchanges WHERE arm IN ({arms})"
    if store == "sqlite":
        with sqlite3.connect(db) as conn:
            ids = [row[0] for row in conn.execute(query)]
            total = conn.execute("SELECT count(*) FROM exchanges").fetchone()[0]
        return set(ids), int(total)
    engine = sa.create_engine(PG_URL)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(f'SET search_path TO "{schema}"'))
            ids = [row[0] for row in conn.execute(sa.text(query))]
            total = conn.execute(sa.text("SELECT count(*) FROM exchanges")).scalar_one()
        return set(ids), int(total)
    finally:
        engine.dispose()


def pg_schema(action: str, schema: str) -> None:
    engine = sa.create_engine(PG_URL)
    with engine.begin() as conn:
        verb = "CREATE SCHEMA" if action == "create" else "DROP SCHEMA IF EXISTS"
        conn.execute(sa.text(f'{verb} "{schema}"{" CASCADE" if action == "drop" else ""}'))
    engine.dispose()


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    for port in (args.mock_port, args.port):
        if not port_free(HOST, port):
            raise SystemExit(f"port {port} is taken")
    schema = f"soak_{uuid.uuid4().hex[:10]}"
    db = work / "soak.db"
    if args.store == "postgres":
        pg_schema("create", schema)
        store_url = f"{PG_URL}?options=-csearch_path%3D{schema}"
    else:
        store_url = f"sqlite:///{db}"
    (work / "behavior.json").write_text(json.dumps(behavior()))
    (work / "mirrorgate.yaml").write_text(json.dumps(config(args.mock_port, args.port, store_url)))
    python = sys.executable
    env = {k: v for k, v in os.environ.items() if k != "MIRRORGATE_ADMIN_TOKEN"}  # loopback admin
    env.setdefault("MALLOC_ARENA_MAX", "2")  # as the image runs the gateway (see the Dockerfile)
    mock = ServerProcess(
        "mock-upstream",
        [python, "-m", "proxy.cli", "--log-level", "warning", "mock-upstream", "--host", HOST,
         "--port", str(args.mock_port), "--behavior", str(work / "behavior.json")],
        ready=http_ok(f"http://{HOST}:{args.mock_port}/healthz"),
        log_path=work / "mock.log",
    )  # fmt: skip
    gateway = ServerProcess(
        "mirrorgate",
        [python, "-m", "proxy.cli", "--log-level", "warning", "serve",
         "--config", str(work / "mirrorgate.yaml")],
        ready=http_ok(f"http://{HOST}:{args.port}/readyz"),
        log_path=work / "gateway.log",
        env=env,
    )  # fmt: skip
    url = f"http://{HOST}:{args.port}"
    tally = Tally()
    try:
        with mock:
            gateway.start()
            try:
                started = httpx.post(
                    f"{url}/admin/rollouts/chat/start", json={"reason": "soak"}, timeout=10
                )
                started.raise_for_status()
                rss_start = gateway.rss_bytes()
                samples = asyncio.run(soak(gateway, url, args, tally))
                rss_end = gateway.rss_bytes()
            finally:
                gateway.stop(grace_s=60)  # SIGTERM: the recorder drains
        ids, total = stored_ids(args.store, store_url, db, schema)
    finally:
        if args.store == "postgres":
            pg_schema("drop", schema)
    window_start = max(args.duration / 2, tally.caches_full_at or args.duration)
    if tally.caches_full_at is None:
        window_start = args.duration / 2  # caches never full: the verdict is skipped below
    window = [s for s in samples if s[0] >= window_start]
    slope = slope_mib_per_min(window)
    judged = tally.caches_full_at is not None and args.duration - window_start >= MIN_WINDOW_S
    curve = [round(b / 2**20, 1) for t, b in samples if int(t) % 60 < args.sample_s]
    missing = tally.answered - ids
    extra = ids - tally.answered
    sent = sum(tally.statuses.values()) + sum(tally.client_errors.values())
    return {
        "store": args.store,
        "duration_s": args.duration,
        "rate_per_s": args.rate,
        "requests_sent": sent,
        "answered": len(tally.answered),
        "records_client_path": len(ids),
        "records_all": total,
        "records_missing": len(missing),
        "records_extra": len(extra),
        "malformed_served": tally.refused_with_id,
        "client_errors": dict(tally.client_errors),
        "late_starts": tally.late,
        "statuses": dict(sorted(tally.statuses.items())),
        "rss_start_mib": round(rss_start / 2**20, 1),
        "rss_end_mib": round(rss_end / 2**20, 1),
        "rss_max_mib": round(max(b for _, b in samples) / 2**20, 1),
        "rss_per_minute_mib": curve,
        "caches_full_at_s": None if tally.caches_full_at is None else round(tally.caches_full_at),
        "slope_window_s": [round(window_start), round(args.duration)],
        "rss_slope_mib_per_min": round(slope, 3),
        "memory_judged": judged,
        "max_slope_mib_per_min": args.max_slope_mib_per_min,
        "rss_samples": len(samples),
        "missing_examples": sorted(missing)[:5],
        "gateway_log_tail": gateway.tail(10),
    }


def verdict(result: dict[str, Any]) -> list[str]:
    """What failed (empty: the soak passed)."""
    failures = []
    if result["records_missing"] or result["records_extra"]:
        failures.append(
            f"records != answered: {result['records_missing']} missing, "
            f"{result['records_extra']} extra"
        )
    if result["malformed_served"]:
        failures.append(f"{result['malformed_served']} malformed requests were served")
    if (
        result["memory_judged"]
        and result["rss_slope_mib_per_min"] > result["max_slope_mib_per_min"]
    ):
        failures.append(
            f"memory grows: {result['rss_slope_mib_per_min']} MiB/min over "
            f"{result['slope_window_s']} s (bound {result['max_slope_mib_per_min']})"
        )
    return failures


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--duration", type=float, default=1200.0, help="seconds of load")
    parser.add_argument("--rate", type=float, default=50.0, help="requests per second")
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--sample-s", type=float, default=5.0, help="RSS sampling period")
    parser.add_argument("--max-slope-mib-per-min", type=float, default=1.0)
    parser.add_argument("--port", type=int, default=18190)
    parser.add_argument("--mock-port", type=int, default=18191)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--out", type=Path, default=None, help="keep logs and configs here")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        result = run(args, args.out)
    else:
        with tempfile.TemporaryDirectory(prefix="mirrorgate-soak-") as tmp:
            result = run(args, Path(tmp))
    failures = verdict(result)
    result["passed"] = not failures
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            if key != "gateway_log_tail":
                print(f"{key:>36}: {value}")
        if failures:
            print("gateway log tail:\n" + result["gateway_log_tail"])
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
