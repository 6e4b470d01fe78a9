"""Experiments in the store, on SQLite and PostgreSQL: one running experiment per route however
many replicas start it at once, stops and arm stops fenced by revision, the decision kept, and
the per-unit read joining exchanges with their operations' outcomes, judge costs and checks."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

from proxy.core import Arm, CheckRecord, ExchangeRecord, ExperimentState, OutcomeRecord, Status
from proxy.store import ExperimentStore, OutcomeStore
from proxy.store.exchanges import Store
from tests.proxy.store import test_exchanges as test_store
from tests.proxy.store.test_exchanges import T0, make_record

db_url = test_store.db_url
open_store = test_store.open_store


def experiment(experiment_id: str = "x1", route: str = "bot") -> ExperimentState:
    return ExperimentState(
        route=route,
        experiment_id=experiment_id,
        running=True,
        weights={"control": 0.5, "b": 0.5},
        control="control",
        fingerprint="f" * 16,
        started_at=T0,
        actor="operator",
        reason="why not",
        models={"control": "prod", "b": "cand"},
    )


def test_one_running_experiment_per_route_however_many_start_it(
    open_store: Callable[..., Store],
) -> None:
    stores = [ExperimentStore(open_store()) for _ in range(4)]
    results: list[ExperimentState] = []
    barrier = threading.Barrier(len(stores))

    def start(n: int) -> None:
        barrier.wait()
        results.append(stores[n].start(experiment(f"x{n}")))

    threads = [threading.Thread(target=start, args=(n,)) for n in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({r.experiment_id for r in results}) == 1
    loaded = stores[0].load()["bot"]
    assert loaded.experiment_id == results[0].experiment_id and loaded.running
    assert loaded.models == {"control": "prod", "b": "cand"}
    assert stores[1].revisions() == {"bot": (loaded.experiment_id, 1)}


def test_stop_and_arm_stop_are_fenced_by_revision(open_store: Callable[..., Store]) -> None:
    store = ExperimentStore(open_store())
    started = store.start(experiment())
    stopped_arm = store.stop_arm(started, "b", metric="error_rate", detail="worse", at=T0)
    assert stopped_arm is not None and stopped_arm.stopped_arms == {"b"}
    # A second decider acting on the old revision does nothing.
    assert store.stop_arm(started, "b", metric="error_rate", detail="again", at=T0) is None
    state, changed = store.stop("bot", actor="operator", reason="done", at=T0 + timedelta(1))
    assert changed and state is not None and not state.running and state.revision == 3
    again, changed = store.stop("bot", actor="operator", reason="done", at=T0)
    assert not changed and again is not None and not again.running
    assert store.stop("nowhere", actor="operator", reason="", at=T0) == (None, False)
    kinds = [e["kind"] for e in store.events("x1")]
    assert kinds == ["stopped", "arm_stopped", "started"]
    assert store.load()["bot"].stopped_arms == {"b"}
    # The next start is a new experiment, the newest one of the route.
    newer = store.start(replace(experiment("x2"), started_at=T0 + timedelta(days=2)))
    assert newer.experiment_id == "x2" and store.load()["bot"].experiment_id == "x2"
    assert [s.experiment_id for s in store.history("bot")] == ["x2", "x1"]


def test_the_decision_is_kept(open_store: Callable[..., Store]) -> None:
    store = ExperimentStore(open_store())
    store.start(experiment())
    assert store.decision("x1") == (None, None)
    store.save_decision("x1", {"text": "not enough data"}, T0)
    decision, at = store.decision("x1")
    assert decision == {"text": "not enough data"} and at == T0


def test_units_sum_calls_outcomes_judge_costs_and_checks(open_store: Callable[..., Store]) -> None:
    base = open_store()
    store = ExperimentStore(base)
    state = store.start(experiment())

    def call(unit: str, x_arm: str, operation: str, **kw: object) -> ExchangeRecord:
        fields: dict[str, object] = {
            "route": "bot", "arm": Arm.EXPERIMENT, "experiment_arm": x_arm,
            "experiment_unit": unit, "operation_id": operation, "cost_usd": 0.01,
            "started_at": T0 + timedelta(seconds=1),
        }  # fmt: skip
        fields.update(kw)
        return make_record(**fields)

    failed = call("u1", "control", "op1", status=Status.UPSTREAM_ERROR, http_status=503)
    saved = call(
        "u1", "control", "op1", arm=Arm.FALLBACK, request_id=failed.request_id,
        started_at=T0 + timedelta(seconds=1.5), duration_s=1.0,
    )  # fmt: skip
    second = call("u1", "control", "op2")
    other = call("u2", "b", "op3", cost_usd=0.02)
    late = call("u2", "control", "op4", started_at=T0 + timedelta(seconds=3))  # arm stopped
    before = call("u3", "b", "op5", started_at=T0 - timedelta(seconds=5))  # before the start
    judge = make_record(
        route="bot", arm=Arm.JUDGE, request_id=other.request_id,
        cost_usd=0.005, started_at=T0 + timedelta(seconds=2),
    )  # fmt: skip
    base.write_batch([failed, saved, second, other, late, before, judge])
    base.write_batch(
        [
            CheckRecord(
                request_id=other.request_id,
                route="bot",
                target="cand",
                arm=Arm.EXPERIMENT,
                rule="r",
                rule_version="v1",
                check="json",
                result=result,
                reason="",
                created_at=T0,
            )
            for result in ("pass", "fail", "error")
        ]
    )
    outcomes = OutcomeStore(base)
    posted = [
        ("op1", "completed", True),
        ("op2", "completed", False),
        ("op2", "corrected", True),
        ("op3", "adopted", True),
    ]
    for operation, kind, flag in posted:
        outcomes.add(
            OutcomeRecord(
                operation_id=operation,
                kind=kind,
                flag=flag,
                caller="app:1",
                created_at=T0,
                route="bot",
            )
        )
    units = {u.arm: u for u in store.units(state)}
    control, b = units["control"], units["b"]
    assert (control.operations, control.requests, control.errors) == (2, 3, 1)
    assert round(control.cost_usd, 6) == 0.03
    assert (control.completed, control.outcomes) == (1, 2)
    assert (control.corrected, control.corrected_known) == (1, 1)
    assert sorted(control.latencies_s)[-1] == 1.5  # op1: from the first call to the fallback's end
    assert (b.operations, b.requests, b.errors, b.completed, b.outcomes) == (1, 1, 0, None, 0)
    assert round(b.cost_usd, 6) == 0.025  # the judge's call about it included
    assert (b.adopted, b.adopted_known) == (1, 1)
    assert b.checks == {"json": (1, 2)}
    assert len(units) == 2  # u3's call came before the start
