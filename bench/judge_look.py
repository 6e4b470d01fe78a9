"""What one look of the rollout judge costs to read: a step of `--users` sticky users and
`--exchanges` exchanges, each answer with one rule check.

The users' activity is lognormal (sigma 1.5), a 10 % canary takes a tenth of the users (by their
key, as the route table does), the exchanges spread over one hour with 1 % errors; every request
records its user's sticky unit where the code has the column (`exchanges.sticky_unit`). Timed:
the look's traffic read (`traffic_windows`: counts, errors and samples of both arms, with their
breakdowns by unit where the code builds them) and its rule-epoch read (`epoch_windows`, or
`check_windows` where the code has no breakdowns), each the mean of `--looks` after one warm-up.

    .venv/bin/python bench/judge_look.py [--users 5000] [--exchanges 100000] [--url URL]
        [--no-units]

`--url` defaults to a new SQLite file; with a PostgreSQL URL (a database the role may connect to,
with CREATEDB) the run gets a database of its own, `bench_judge_look`, dropped after it
(`bench.databases`), analysed before the reads as autovacuum would have. To compare with another
checkout, run this file with that checkout first on `PYTHONPATH` (it reads whichever code it
finds: without `sticky_unit` the records carry no unit).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import random
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import databases
from proxy.core import Arm, CheckRecord, ExchangeRecord, Status
from proxy.rollout import evidence
from proxy.store import Arms, Epoch, JudgeWindows
from proxy.store.exchanges import Store

AT = datetime(2026, 1, 1, tzinfo=UTC)
ARMS = Arms("support-bot", "prod", "cand")
EPOCH = Epoch("shipping", "v1", AT)
DATABASE = "bench_judge_look"
HAS_UNITS = "sticky_unit" in {f.name for f in dataclasses.fields(ExchangeRecord)}
CHECKS_HAVE_UNITS = "sticky_unit" in {f.name for f in dataclasses.fields(CheckRecord)}


def _records(
    users: int, exchanges: int, seed: int, *, units: bool = HAS_UNITS
) -> tuple[list[ExchangeRecord], list[Any]]:
    rng = random.Random(seed)
    weights = [rng.lognormvariate(0.0, 1.5) for _ in range(users)]
    on_canary = [rng.random() < 0.10 for _ in range(users)]
    records: list[ExchangeRecord] = []
    checks: list[CheckRecord] = []
    for i, user in enumerate(rng.choices(range(users), weights=weights, k=exchanges)):
        arm, target = (Arm.CANARY, "cand") if on_canary[user] else (Arm.PRIMARY, "prod")
        request_id = f"{rng.getrandbits(128):032x}"
        started = AT + timedelta(seconds=3600 * i / exchanges)
        fields: dict[str, Any] = {"sticky_unit": f"{user:024x}"} if units else {}
        records.append(
            ExchangeRecord(
                request_id=request_id, route=ARMS.route, target=target, upstream_model="m",
                arm=arm, endpoint="chat.completions", provider="openai", streamed=True,
                started_at=started, duration_s=rng.lognormvariate(0.0, 0.5),
                ttft_s=rng.lognormvariate(-1.5, 0.5), overhead_s=0.0005,
                status=Status.UPSTREAM_ERROR if rng.random() < 0.01 else Status.OK,
                http_status=200, cost_usd=0.001, rule="shipping", rule_version="v1", **fields,
            )
        )  # fmt: skip
        checks.append(
            CheckRecord(
                request_id=request_id, route=ARMS.route, target=target, arm=arm,
                rule="shipping", rule_version="v1", check="max-weight",
                result="pass" if rng.random() < 0.97 else "fail", reason="", created_at=started,
                **(fields if CHECKS_HAVE_UNITS else {}),
            )
        )  # fmt: skip
    return records, checks


def _per_call_ms(call: Callable[[], object], times: int) -> float:
    call()
    started = time.perf_counter()
    for _ in range(times):
        call()
    return (time.perf_counter() - started) / times * 1000


def measure(
    url: str, users: int, exchanges: int, looks: int, *, units: bool = HAS_UNITS
) -> dict[str, float]:
    store = Store(url)
    store.migrate()
    try:
        records, checks = _records(users, exchanges, seed=34, units=units)
        for start in range(0, exchanges, 5000):
            store.write_batch([*records[start : start + 5000], *checks[start : start + 5000]])
        if store.engine.dialect.name == "postgresql":
            with store.engine.begin() as conn:
                conn.exec_driver_sql("ANALYZE")
        windows = JudgeWindows(store)
        epoch_read = getattr(evidence, "epoch_windows", None) or evidence.check_windows
        primary, candidate = evidence.traffic_windows(windows, ARMS, AT)
        return {
            "traffic_ms": _per_call_ms(lambda: evidence.traffic_windows(windows, ARMS, AT), looks),
            "checks_ms": _per_call_ms(lambda: epoch_read(windows, ARMS, EPOCH, AT), looks),
            "primary_samples": len(primary.latencies_s),
            "canary_samples": len(candidate.latencies_s),
            "unit_groups": len(primary.units.get("errors", ())) if units else 0,
        }
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=5000)
    parser.add_argument("--exchanges", type=int, default=100_000)
    parser.add_argument("--looks", type=int, default=5)
    parser.add_argument("--url", default=None)
    parser.add_argument(
        "--no-units", action="store_true", help="record no sticky unit (a route with sticky: none)"
    )
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        if args.url is None:
            folder = stack.enter_context(tempfile.TemporaryDirectory())
            url = f"sqlite:///{Path(folder) / 'look.db'}"
        else:
            url = stack.enter_context(databases.fresh_database(args.url, DATABASE))
        units = HAS_UNITS and not args.no_units
        result = measure(url, args.users, args.exchanges, args.looks, units=units)
    print(
        f"units recorded: {units}  users {args.users}  exchanges {args.exchanges}  "
        + "  ".join(
            f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in result.items()
        )
    )


if __name__ == "__main__":
    main()
