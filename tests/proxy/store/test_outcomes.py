"""Outcomes and the reads of an operation's exchanges, on SQLite and PostgreSQL: one outcome per
(operation, kind) however many posts race for it, and an operation's summary adding up what the
store holds of it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

import pytest
import sqlalchemy as sa

from proxy.core import Arm, OutcomeRecord, Status
from proxy.store import OutcomeStore
from proxy.store.exchanges import Store
from proxy.store.outcomes import outcomes_table
from tests.proxy.store import test_exchanges as test_store
from tests.proxy.store.test_exchanges import T0, make_record

db_url = test_store.db_url
open_store = test_store.open_store


def outcome(kind: str = "completed", **changes: object) -> OutcomeRecord:
    fields: dict[str, object] = {
        "operation_id": "ticket-1", "kind": kind, "caller": "app:1234abcd", "created_at": T0,
        "route": "support-bot", "flag": True,
    }  # fmt: skip
    fields.update(changes)
    return OutcomeRecord(**fields)  # type: ignore[arg-type]


def test_each_kind_is_stored_once_and_reads_back_as_it_was(
    open_store: Callable[..., Store],
) -> None:
    outcomes = OutcomeStore(open_store())
    completed = outcome()
    labels = outcome(
        "labels", flag=None, labels=(("channel", "chat"), ("tier", "gold ✓")),
        created_at=T0 + timedelta(seconds=1),
    )  # fmt: skip
    value = outcome("value", flag=None, value=12.5, created_at=T0 + timedelta(seconds=2))
    assert [outcomes.add(r) for r in (completed, labels, value)] == [True, True, True]
    # A repeat of a kind changes nothing, whatever it says this time.
    assert outcomes.add(outcome(flag=False, created_at=T0 + timedelta(seconds=3))) is False
    assert outcomes.outcomes("ticket-1") == [completed, labels, value]
    assert outcomes.outcomes("ticket-2") == []
    assert outcomes.query(route="support-bot", since=T0 + timedelta(seconds=1)) == [labels, value]


def test_concurrent_posts_of_one_kind_store_one_row(open_store: Callable[..., Store]) -> None:
    store = open_store()
    outcomes = OutcomeStore(store)
    results: list[bool] = []
    start = threading.Barrier(6)

    def post(n: int) -> None:
        start.wait()
        results.append(outcomes.add(outcome(flag=n % 2 == 0, caller=f"app:{n:08d}")))

    threads = [threading.Thread(target=post, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 5 + [True]
    with store.engine.connect() as conn:
        count = conn.execute(sa.select(sa.func.count()).select_from(outcomes_table)).scalar()
    assert count == 1


def test_the_summary_adds_up_client_and_judge_calls_and_keeps_shadows_apart(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    at = T0
    records = [
        # request a: the primary failed before any byte; the fallback answered.
        make_record(request_id="a", operation_id="op", arm=Arm.PRIMARY, started_at=at,
                    duration_s=0.5, status=Status.CONNECT_ERROR, http_status=502, cost_usd=0.0),
        make_record(request_id="a", operation_id="op", arm=Arm.FALLBACK, target="safe",
                    started_at=at, duration_s=1.0, cost_usd=0.002),
        make_record(request_id="a", operation_id="op", arm=Arm.SHADOW, target="cand",
                    started_at=at + timedelta(seconds=1), cost_usd=0.5, pair_id="p1"),
        make_record(request_id="a", operation_id="op", arm=Arm.JUDGE, target="judge",
                    started_at=at + timedelta(seconds=2), cost_usd=0.0003, pair_id="p1"),
        make_record(request_id="a", operation_id="op", arm=Arm.JUDGE, target="judge",
                    started_at=at + timedelta(seconds=3), cost_usd=0.0003, pair_id="p1"),
        # request b, on another route, answered with an error 10 s later.
        make_record(request_id="b", operation_id="op", route="answerer",
                    started_at=at + timedelta(seconds=10), duration_s=2.0, cost_usd=0.01,
                    status=Status.UPSTREAM_ERROR, http_status=500),
        make_record(request_id="b", operation_id="op", arm=Arm.PROBE, target="cand",
                    started_at=at + timedelta(seconds=11), cost_usd=0.25),
        make_record(request_id="c", operation_id="other", cost_usd=7.0),
        make_record(request_id="d", cost_usd=9.0),
    ]  # fmt: skip
    store.write_batch(records)
    outcomes = OutcomeStore(store)
    outcomes.add(outcome(operation_id="op"))
    summary = outcomes.operation("op")
    assert summary is not None
    assert (summary.route, summary.routes) == ("support-bot", ("support-bot", "answerer"))
    assert (summary.arm, summary.arms) == ("primary", ("primary", "fallback"))
    assert (summary.requests, summary.calls, summary.fallbacks, summary.errors) == (2, 3, 1, 1)
    assert (summary.judge_calls, summary.shadow_calls, summary.probe_calls) == (2, 1, 1)
    assert summary.client_cost_usd == pytest.approx(0.012)
    assert summary.judge_cost_usd == pytest.approx(0.0006)
    assert summary.cost_usd == pytest.approx(0.0126)
    assert (summary.shadow_cost_usd, summary.probe_cost_usd) == (0.5, 0.25)
    assert summary.started_at == at
    assert summary.latency_s == pytest.approx(12.0)
    assert summary.outcome("completed") == outcome(operation_id="op")
    assert outcomes.request_ids("op") == ["b", "a"]
    assert outcomes.operation("nobody") is None


def test_an_operation_known_only_by_its_outcome_has_a_summary_without_calls(
    open_store: Callable[..., Store],
) -> None:
    outcomes = OutcomeStore(open_store())
    outcomes.add(outcome(operation_id="early"))
    summary = outcomes.operation("early")
    assert summary is not None
    assert (summary.route, summary.calls, summary.cost_usd, summary.latency_s) == (
        None, 0, 0.0, None
    )  # fmt: skip
