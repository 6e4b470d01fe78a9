"""What a reviewer's "next" costs as a route's review history grows.

A store with `history` items already reviewed (by one reviewer each) and 50 still open, all on
one route; then the console's reads for a second reviewer: `ReviewStore.next_item` (the next
pair to show) and `ReviewStore.open_count` (how many are left), and the cost of storing one
review (`ReviewStore.add`, measured while the history is built). On PostgreSQL the database is
analysed before the reads, as autovacuum would have done on a table that size.

    .venv/bin/python -m bench.review_queue [--history 1000 10000] [--url URL]

`--url` defaults to a new SQLite file; with a PostgreSQL URL (a database the role may connect to,
with CREATEDB) each run gets a database of its own, `bench_review_queue`, dropped after it
(`bench.databases`). Figures are wall-clock ms per call, the mean of 50
calls after 3 warm-up ones. To compare with another checkout, run the same command with that
checkout on `PYTHONPATH`.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from bench import databases
from proxy.store import ANY_VERSION, ReviewCandidate, ReviewItem, ReviewRecord, ReviewStore
from proxy.store.exchanges import Store

ROUTE = "support-bot"
OPEN = 50
DATABASE = "bench_review_queue"
AT = datetime(2026, 1, 1, tzinfo=UTC)


def _item(n: int) -> ReviewItem:
    candidate = ReviewCandidate(
        source="shadow", pair_id=f"pair-{n}", request_id=f"req-{n}", route=ROUTE,
        rule="policy", rule_version="v1", primary_target="prod", primary_arm="primary",
        candidate_target="cand", candidate_arm="shadow", agreement="agree", exchanged_at=AT,
    )  # fmt: skip
    return ReviewItem(f"item-{n:09d}", candidate, "A", 1, 1.0, "plain", AT)


def _per_call_ms(call: Callable[[], object], times: int = 50) -> float:
    for _ in range(3):
        call()
    started = time.perf_counter()
    for _ in range(times):
        call()
    return (time.perf_counter() - started) / times * 1000


def measure(url: str, history: int) -> dict[str, float]:
    store = Store(url)
    store.migrate()
    try:
        reviews = ReviewStore(store)
        items = [_item(n) for n in range(history + OPEN)]
        for start in range(0, len(items), 5000):
            reviews.enqueue(items[start : start + 5000])
        started = time.perf_counter()
        for item in items[:history]:
            reviews.add(ReviewRecord(item.item_id, "alice", AT, 4, 3, "A"))
        add_ms = (time.perf_counter() - started) / max(history, 1) * 1000
        if store.engine.dialect.name == "postgresql":
            with store.engine.begin() as conn:
                conn.exec_driver_sql("ANALYZE")
        first = reviews.next_item(ROUTE, ANY_VERSION, "bob")
        assert first is not None and first.item_id == items[history].item_id
        return {
            "next_item": _per_call_ms(lambda: reviews.next_item(ROUTE, ANY_VERSION, "bob")),
            "open_count": _per_call_ms(lambda: reviews.open_count(ROUTE, ANY_VERSION, "bob")),
            "add": add_ms,
        }
    finally:
        store.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--url", default=None, help="a store URL (default: a new SQLite file)")
    args = parser.parse_args(argv)
    print(f"{'store':<11} {'history':>8} {'next_item ms':>13} {'open_count ms':>14} {'add ms':>7}")
    for history in args.history:
        with contextlib.ExitStack() as stack:
            if args.url is None:
                tmp = stack.enter_context(tempfile.TemporaryDirectory())
                url = f"sqlite:///{Path(tmp) / 'reviews.db'}"
            elif args.url.startswith("postgresql"):
                url = stack.enter_context(databases.fresh_database(args.url, DATABASE))
            else:
                url = args.url
            got = measure(url, history)
        kind = url.split(":")[0].split("+")[0]
        print(
            f"{kind:<11} {history:>8,} {got['next_item']:>13.2f} {got['open_count']:>14.2f} "
            f"{got['add']:>7.2f}"
        )


if __name__ == "__main__":
    main()
