"""The offline gate at `rollout start` (`routes.<name>.canary.require_eval`).

`offline_evidence` reads the candidate's newest evaluation run on the route's set and the
primary's run of the same invocation (same cases, same set version) from the store, and hands
them to `analyzers.evalgate.decide`. The answer is the JSON that `POST .../start` refuses with
and `GET /admin/rollouts/{route}` shows as `offline_evidence` (the console renders it next to
the live verdicts); `offline_status` adds the override the current rollout started with, for
both. Blocking: call from a worker thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from analyzers.evalgate import GateVerdict, StratumResult, decide
from proxy.config import RouteSpec, duration_s
from proxy.store import EvalRun, EvalStore, StoreUnavailableError

OFFLINE_NO_RUNS = "this gateway has no store to read evaluation runs from"
"""The reason when the gate is required and nothing can read the runs."""


def _results(run: EvalRun) -> dict[str, StratumResult]:
    return {name: StratumResult(s.cases, s.passed) for name, s in run.strata.items()}


def _run_json(run: EvalRun | None) -> dict[str, Any] | None:
    if run is None:
        return None
    return {
        "run_group": run.run_group,
        "model": run.model,
        "set_version": run.set_version,
        "set_hash": run.set_hash,
        "config_fingerprint": run.config_fingerprint,
        "started_at": run.started_at.isoformat(),
        "strata": {name: s.as_json() for name, s in run.strata.items()},
    }


def offline_evidence(
    runs: EvalStore, spec: RouteSpec, now: datetime
) -> tuple[GateVerdict | None, dict[str, Any]]:
    """(the verdict, its JSON) for the route's canary; (None, {"required": False}) when the
    route requires no evaluation."""
    canary = spec.canary
    gate = canary.require_eval if canary is not None else None
    if canary is None or gate is None:
        return None, {"required": False}
    set_name = gate.set_name
    candidate = runs.latest_run(set_name, canary.model)
    primary = None
    if candidate is not None:
        primary = next(
            (r for r in runs.group(candidate.run_group) if r.model == spec.primary), None
        )
    age = (now - candidate.started_at).total_seconds() if candidate is not None else None
    verdict = decide(
        _results(candidate) if candidate is not None else None,
        _results(primary) if primary is not None else None,
        age_s=age,
        max_age_s=duration_s(gate.max_age),
        max_drop=gate.max_drop,
        min_cases=gate.min_cases,
        candidate_name=canary.model,
        set_name=set_name,
    )
    return verdict, {
        "required": True,
        "set": set_name,
        "max_drop": gate.max_drop,
        "max_age": gate.max_age,
        "min_cases": gate.min_cases,
        "allowed": verdict.allowed,
        "reason": verdict.reason,
        "candidate_run": _run_json(candidate),
        "primary_run": _run_json(primary),
        "strata": [
            {
                "stratum": c.stratum,
                "candidate": {"cases": c.candidate.cases, "passed": c.candidate.passed},
                "primary": {"cases": c.primary.cases, "passed": c.primary.passed},
                "drop": None if c.drop is None else round(c.drop, 6),
                "counted": c.counted,
                "blocking": c.blocking,
            }
            for c in verdict.strata
        ],
    }


def offline_status(
    runs: EvalStore | None,
    spec: RouteSpec,
    events: Sequence[Mapping[str, Any]],
    rollout_id: str | None,
    now: datetime,
) -> dict[str, Any]:
    """The offline gate's evidence now (`offline_evidence`'s JSON; the store's error as the
    reason when it cannot be read), and `override`: what the current rollout's start recorded
    when it was forced past the gate (None without a rollout or an override). `events` are the
    route's transitions, any order."""
    if spec.canary is None or spec.canary.require_eval is None:
        evidence: dict[str, Any] = {"required": False}
    elif runs is None:
        evidence = {"required": True, "allowed": False, "reason": OFFLINE_NO_RUNS}
    else:
        try:
            _, evidence = offline_evidence(runs, spec, now)
        except StoreUnavailableError as exc:
            evidence = {"required": True, "allowed": None, "reason": f"store: {exc}"}
    started = next(
        (
            e
            for e in reversed(events)
            if e.get("action") == "start" and e.get("rollout_id") == rollout_id
        ),
        None,
    )
    recorded = (started or {}).get("evidence")
    override = recorded.get("offline_override") if isinstance(recorded, Mapping) else None
    return {**evidence, "override": override if rollout_id is not None else None}
