"""`offline_evidence` on a real store: not required, no run, the candidate's newest run compared
with the primary of the same invocation. Through the admin API and the CLI:
tests/proxy/api/test_rollouts_offline_gate.py."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from proxy.config import RouteSpec
from proxy.rollout import offline_evidence, offline_status
from proxy.store import EvalRun, EvalStore, Store, StratumScore
from tests.proxy.store import test_exchanges as test_store

db_url = test_store.db_url
open_store = test_store.open_store
NOW = datetime.now(UTC)


def route(**gate: object) -> RouteSpec:
    return RouteSpec.model_validate(
        {
            "primary": "prod",
            "canary": {"model": "cand", "require_eval": {"set": "support", **gate}},
        }
    )


def pair(group: str, passed: int, minutes: int) -> list[EvalRun]:
    def one(model: str, role: str, ok: int) -> EvalRun:
        return EvalRun(
            run_group=group, set_name="support", set_version=1, set_hash="h", route="bot",
            model=model, role=role, config_fingerprint="f",
            started_at=NOW - timedelta(minutes=minutes),
            strata={"all": StratumScore(50, ok)},
        )  # fmt: skip

    return [one("prod", "primary", 45), one("cand", "candidate", passed)]


def test_the_newest_candidate_run_is_judged_against_its_own_primary(
    open_store: Callable[..., Store],
) -> None:
    runs = EvalStore(open_store())
    verdict, shown = offline_evidence(runs, RouteSpec(primary="prod"), NOW)
    assert verdict is None and shown == {"required": False}
    verdict, shown = offline_evidence(runs, route(), NOW)
    assert verdict is not None and not verdict.allowed and shown["candidate_run"] is None
    runs.add_runs(pair("old", 45, 120))
    runs.add_runs(pair("new", 30, 10))
    verdict, shown = offline_evidence(runs, route(), NOW)
    assert verdict is not None and not verdict.allowed
    assert shown["candidate_run"]["run_group"] == "new"
    assert shown["primary_run"]["run_group"] == "new"
    assert shown["strata"][0] == {
        "stratum": "all", "candidate": {"cases": 50, "passed": 30},
        "primary": {"cases": 50, "passed": 45}, "drop": 0.3, "counted": True, "blocking": True,
    }  # fmt: skip
    verdict, _ = offline_evidence(runs, route(max_drop=0.5), NOW)
    assert verdict is not None and verdict.allowed


def test_the_status_carries_the_current_rollouts_override_only(
    open_store: Callable[..., Store],
) -> None:
    runs = EvalStore(open_store())
    runs.add_runs(pair("g", 30, 10))
    forced = {"reason": "hotfix", "refused": "all: 30/50"}
    events = [  # newest first, as the store lists them
        {"action": "start", "rollout_id": "r2", "evidence": {"offline_override": forced}},
        {"action": "start", "rollout_id": "r1", "evidence": {}},
    ]
    status = offline_status(runs, route(), events, "r2", NOW)
    assert status["allowed"] is False and status["override"] == forced
    assert offline_status(runs, route(), events, "r1", NOW)["override"] is None
    assert offline_status(runs, route(), events, None, NOW)["override"] is None
    hostile = [{"action": "start", "rollout_id": "r3", "evidence": "not a mapping"}]
    assert offline_status(runs, route(), hostile, "r3", NOW)["override"] is None
    no_store = offline_status(None, route(), events, "r2", NOW)
    assert no_store["allowed"] is False and "no store" in no_store["reason"]
    assert offline_status(runs, RouteSpec(primary="prod"), events, "r2", NOW) == {
        "required": False,
        "override": forced,
    }
