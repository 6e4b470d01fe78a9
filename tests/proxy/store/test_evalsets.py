"""Evaluation runs kept and read back (SQLite and PostgreSQL); sampling's rates per version.
The build on top of the sampling: tests/proxy/replay/test_evalbuild.py."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from proxy.store import EvalRun, EvalStore, Store, StratumScore
from tests.proxy.store import test_exchanges as test_store
from tests.proxy.store.test_exchanges import make_record

db_url = test_store.db_url
open_store = test_store.open_store
NOW = datetime.now(UTC)


def run(group: str, model: str, minutes: int, passed: int = 5) -> EvalRun:
    return EvalRun(
        run_group=group, set_name="support", set_version=1, set_hash="sha256:ab", route="bot",
        model=model, role="primary" if model == "prod" else "candidate",
        config_fingerprint="0123456789abcdef", started_at=NOW - timedelta(minutes=minutes),
        strata={"all": StratumScore(10, passed, 0.5, 0.25, 0.01),
                "difficulty=hard": StratumScore(4, 1)},
    )  # fmt: skip


def test_runs_come_back_equal_oldest_first_and_by_group(open_store: Callable[..., Store]) -> None:
    runs = EvalStore(open_store())
    assert runs.runs() == [] and runs.latest_run("support", "cand") is None
    older = [run("g1", "prod", 60), run("g1", "cand", 60, passed=3)]
    newer = [run("g2", "prod", 5), run("g2", "cand", 5, passed=9)]
    assert runs.add_runs(newer) == 2 and runs.add_runs(older) == 2 and runs.add_runs([]) == 0
    assert runs.runs() == [*older, *newer]
    assert runs.runs(model="cand", limit=1) == [newer[1]]
    assert runs.latest_run("support", "cand") == newer[1]
    assert runs.latest_run("support", "prod", role="primary") == newer[0]
    assert runs.group("g1") == older
    assert runs.runs(set_name="other") == []
    assert newer[1].overall.pass_rate == 0.9


def test_sampling_draws_each_version_at_its_rate_and_counts_the_window(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    at = NOW - timedelta(minutes=1)
    store.write_batch(
        [make_record(started_at=at, rule_version="v1", request_body="{}") for _ in range(300)]
        + [make_record(started_at=at, rule_version="v2", request_body="{}") for _ in range(20)]
        + [make_record(started_at=at, rule_version="v1") for _ in range(50)]  # no body
    )
    evals = EvalStore(store)
    since, until = NOW - timedelta(hours=1), NOW
    assert evals.window_versions("support-bot", since, until) == {"v1": 300, "v2": 20}
    drawn = evals.sample("support-bot", since, until, {"v1": 0.0, "v2": 1.0})
    assert len(drawn) == 20 and {d.rule_version for d in drawn} == {"v2"}
    assert evals.sample("support-bot", since, until, {}) == []
    again = evals.sample("support-bot", since, until, {"v1": 0.2}, seed=7)
    assert again == evals.sample("support-bot", since, until, {"v1": 0.2}, seed=7)
    assert 25 <= len(again) <= 95
