"""The GIL switch interval and the client's tail on the production-shaped route (issue 17).

    .venv/bin/python -m bench.switching                       # 5 1 5 1 ms, 15 s per route
    .venv/bin/python -m bench.switching --intervals 5 1 0.5 --seconds 30
    .venv/bin/python -m bench.switching --intervals 1 --gateway-cpus 0,1   # threads beside the loop
    .venv/bin/python -m bench.switching --intervals 1 1 --mocks 1 2   # the candidate on its own

For each interval in turn it starts the production stage's gateway (`bench.suite.
production_gateway`: PostgreSQL with `bodies: redacted`, OTLP to the span collector, the canary
started) with `MIRRORGATE_SWITCH_INTERVAL_MS` set, and drives five of its routes in turn with the
production stage's paced load (8 clients, each pausing a random 0-80 ms before a request: ~190
req/s): the plain `bench`; `bench-json`, the production route's primary with nothing on it;
`bench-json-checks`, the same with the five checks; `bench-json-shadow`, the same with the 10 %
shadow; and `bench-production`, everything (checks, shadow, canary, probes). The last four get
the production route's system prompt, so that each differs from `bench-json` by one part of the
off-path work. It prints one line per (interval, route): requests, p50, p99, p99.9 and the
gateway's CPU per request, then the same requests' records split as `bench/tail.py` splits them:
the gateway's own time (`overhead_s`) and the rest, its wait for the upstream's answer. The
gateway runs on its own core as in `bench/run.py`; the intervals alternate in the order given, so
that a drift of the machine shows as a difference between repeats of one interval.

`--mocks 1 2` runs each interval twice: once with every model on one mock upstream, once with the
candidate (its shadows and its canary share) on a second mock process, beside the first or where
`--candidate-mock-cpus` puts it. One mock's event loop serves the client's call and the
candidate's in turn, so a client's call that arrives while a shadow is being answered waits for
it there: a wait that is the fake model's, not the gateway's, and that the second mock takes away
(on the gateway's CPU, with the shadows' CPU off the primary mock's too).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import production, targets
from bench.report import percentile
from bench.suite import PG_ADMIN_URL, production_gateway

CLIENTS = 8
THINK_S = 0.08
VARIABLE = "MIRRORGATE_SWITCH_INTERVAL_MS"
DATABASE = "bench_switching"


def paced_load(rig: targets.Rig, route: str, system: str, seconds: float) -> dict[str, float]:
    """One paced load of `seconds` (2 s warm-up first) on `route`; its percentiles in ms."""
    output = rig.work / "switching-load.json"
    output.unlink(missing_ok=True)
    argv = [
        str(rig.python), str(rig.repo / "bench" / "loadgen.py"), "--host", targets.HOST,
        "--port", str(targets.PRODUCTION_PORT), "--model", route, "--concurrency", str(CLIENTS),
        "--seconds", str(seconds), "--warmup", "2", "--think", str(THINK_S),
        "--output", str(output),
    ]  # fmt: skip
    if system:
        argv += ["--system", system]
    subprocess.run(rig.layout.pin(rig.layout.load, argv), cwd=rig.repo, check=True)
    result = json.loads(output.read_text())
    latencies = sorted(result["latencies"])
    return {
        "requests": float(len(latencies)),
        "errors": float(result["errors"]),
        **{
            name: percentile(latencies, q) * 1e3
            for name, q in (("p50", 50), ("p99", 99), ("p99.9", 99.9))
        },
    }


def last_exchange_id(url: str) -> int:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT coalesce(max(id), 0) FROM exchanges")).scalar())
    finally:
        engine.dispose()


def client_records(url: str, after: int, route: str, count: int) -> str:
    """The last `count` client exchanges of `route` stored after id `after` (the measured phase;
    the warm-up's come first), split into the gateway's own time and its wait for the upstream,
    once the recorder has written them (it flushes within 0.2 s; waited for up to 5 s); then the
    same for the primary's share alone when the canary served some."""
    engine = sa.create_engine(url)
    query = sa.text(
        "SELECT duration_s, overhead_s, arm FROM exchanges"
        " WHERE id > :after AND route = :route AND arm IN ('primary', 'canary') ORDER BY id"
    )
    try:
        deadline = time.monotonic() + 5.0
        while True:
            with engine.connect() as conn:
                rows = conn.execute(query, {"after": after, "route": route}).fetchall()
            if len(rows) >= count or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        engine.dispose()
    rows = rows[-count:]

    def cells(values: list[float]) -> str:
        values = sorted(values)
        return " / ".join(f"{percentile(values, q) * 1e3:.2f}" for q in (50, 99, 99.9))

    def split(rows: list[Any]) -> str:
        return (
            f"(p50 / p99 / p99.9 ms, n {len(rows)}): gateway's own {cells([r[1] for r in rows])};"
            f" waiting for the upstream {cells([r[0] - r[1] for r in rows])}"
        )

    lines = [f"records {split(rows)}"]
    primary = [r for r in rows if r[2] == "primary"]
    if len(primary) < len(rows):  # the canary's share apart: its upstream may be another mock
        lines.append(f"of which the primary's {split(primary)}")
    return "\n    ".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--intervals", type=float, nargs="+", default=[5.0, 1.0, 5.0, 1.0])
    parser.add_argument("--seconds", type=float, default=15.0, help="measured seconds per route")
    parser.add_argument("--pg-admin-url", default=PG_ADMIN_URL)
    parser.add_argument("--out", type=Path, default=Path("bench/out/switching"))
    parser.add_argument(
        "--gateway-cpus", default="",
        help="pin the gateway here instead of its own core (taskset -c syntax, e.g. 0,1: its "
        "threads may then run beside the event loop instead of taking turns with it)",
    )  # fmt: skip
    parser.add_argument(
        "--mocks", type=int, nargs="+", choices=(1, 2), default=[1],
        help="mock upstreams per run, in turn for each interval: 2 puts the candidate on its own",
    )  # fmt: skip
    parser.add_argument(
        "--candidate-mock-cpus", default="",
        help="pin the candidate's mock (--mocks 2) here instead of beside the first (taskset -c "
        "syntax; the gateway's CPU takes the shadows' load off the primary's mock and its CPU)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    rig = targets.Rig.create(args.out.resolve())
    if args.gateway_cpus:
        rig = dataclasses.replace(
            rig, layout=dataclasses.replace(rig.layout, gateway=args.gateway_cpus)
        )
    mock = targets.mock_upstream(rig)
    mock.start()
    candidate_mock = None
    if 2 in args.mocks:
        candidate_mock = targets.mock_upstream(
            rig, targets.CANDIDATE_MOCK_PORT, "candidate-mock", args.candidate_mock_cpus
        )
        candidate_mock.start()
    routes = (
        (production.PLAIN, targets.ROUTE, ""),
        (production.BARE, production.BARE_ROUTE, production.SYSTEM_PROMPT),
        (production.CHECKS, production.CHECKS_ROUTE, production.SYSTEM_PROMPT),
        (production.SHADOWED, production.SHADOW_ROUTE, production.SYSTEM_PROMPT),
        (production.PRODUCTION, production.PRODUCTION_ROUTE, production.SYSTEM_PROMPT),
    )
    print("load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    database = (
        sa.make_url(args.pg_admin_url).set(database=DATABASE).render_as_string(hide_password=False)
    )  # what production_gateway's fresh database is
    try:
        for interval, mocks in ((i, m) for i in args.intervals for m in args.mocks):
            os.environ[VARIABLE] = f"{interval:g}"
            candidate_port = targets.CANDIDATE_MOCK_PORT if mocks == 2 else None
            with production_gateway(
                rig, args.pg_admin_url, DATABASE, candidate_mock_port=candidate_port
            ) as (server, *_):
                paced_load(rig, targets.ROUTE, "", 3)  # the warm-up of a new gateway
                for name, route, system in routes:
                    last = last_exchange_id(database)
                    cpu_before, started = server.cpu_seconds(), time.monotonic()
                    cell = paced_load(rig, route, system, args.seconds)
                    # The CPU covers the warm-up too: per request at the measured rate.
                    cpu_us = (server.cpu_seconds() - cpu_before) * 1e6
                    requests = cell["requests"] * (time.monotonic() - started) / args.seconds
                    print(
                        f"switch {interval:g} ms  mocks {mocks}  {name:10}"
                        f"  {cell['requests']:6.0f} requests"
                        f"  errors {cell['errors']:.0f}  p50 {cell['p50']:.2f}"
                        f"  p99 {cell['p99']:.2f}  p99.9 {cell['p99.9']:.2f} ms"
                        f"  CPU {cpu_us / max(requests, 1):,.0f} µs/req",
                        flush=True,
                    )
                    split = client_records(database, last, route, int(cell["requests"]))
                    print(f"    {split}", flush=True)
    finally:
        os.environ.pop(VARIABLE, None)
        mock.stop()
        if candidate_mock is not None:
            candidate_mock.stop()
    print("load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
