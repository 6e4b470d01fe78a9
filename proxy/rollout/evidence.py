"""What the rollout judge reads from the store: each arm's exchanges, check verdicts and
corrections in one window (blocking; called on a worker thread by the controller).

The primary arm is the baseline model serving as `primary`; the candidate arm is the canary model
serving as `canary`, both of the same route over the same window — a concurrent baseline, never a
comparison with the past. Client disconnects are neither errors nor latencies (the client chose
to leave). Rule checks are read per rule epoch: only verdicts on the current version, since that
version's first request (or since the rollout started, if later).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from analyzers.verdicts import ArmWindow, Tally
from proxy.core import Arm, Status, as_utc
from proxy.gateway import rule_events_table
from proxy.store import checks_table, exchanges_table, feedback_table, pairs_table

_exchanges = exchanges_table
_checks = checks_table
_feedback = feedback_table
_pairs = pairs_table
_rule_events = rule_events_table

_NOT_ERRORS = (Status.OK.value, Status.CLIENT_DISCONNECTED.value)


@dataclass(frozen=True, slots=True)
class Epoch:
    """The current version of a rule and when its first request was seen."""

    rule: str
    version: str
    started_at: datetime


@dataclass(frozen=True, slots=True)
class Arms:
    """Which (target, arm) pairs are compared."""

    route: str
    baseline: str
    candidate: str

    def clause(self, table: sa.Table) -> sa.ColumnElement[bool]:
        return sa.and_(
            table.c.route == self.route,
            sa.or_(
                sa.and_(table.c.arm == Arm.PRIMARY.value, table.c.target == self.baseline),
                sa.and_(table.c.arm == Arm.CANARY.value, table.c.target == self.candidate),
            ),
        )


def traffic_windows(engine: Engine, arms: Arms, since: datetime) -> tuple[ArmWindow, ArmWindow]:
    """(primary, candidate) windows of errors, latency, TTFT, cost and corrections since `since`
    (no rule checks: those are judged per epoch by `check_windows`)."""
    query = sa.select(
        _exchanges.c.arm,
        _exchanges.c.status,
        _exchanges.c.duration_s,
        _exchanges.c.ttft_s,
        _exchanges.c.cost_usd,
    ).where(arms.clause(_exchanges), _exchanges.c.started_at >= since)
    corrections = (
        sa.select(_feedback.c.arm, sa.func.count())
        .where(arms.clause(_feedback), _feedback.c.created_at >= since)
        .where(_feedback.c.kind == "correction")
        .group_by(_feedback.c.arm)
    )
    data: dict[str, dict[str, list[float]]] = {
        arm: {"lat": [], "ttft": [], "cost": []} for arm in ("primary", "canary")
    }
    counts = {"primary": [0, 0], "canary": [0, 0]}  # requests, errors
    with engine.connect() as conn:
        rows: list[tuple[Any, ...]] = [tuple(row) for row in conn.execute(query)]
        fixes: list[tuple[Any, ...]] = [tuple(row) for row in conn.execute(corrections)]
    for arm, status, duration, ttft, cost in rows:
        if status == Status.CLIENT_DISCONNECTED.value:
            continue
        bucket = data[arm]
        counts[arm][0] += 1
        if status not in _NOT_ERRORS:
            counts[arm][1] += 1
        bucket["lat"].append(float(duration))
        if ttft is not None:
            bucket["ttft"].append(float(ttft))
        if cost:
            bucket["cost"].append(float(cost))
    corrected = {str(arm): int(n) for arm, n in fixes}

    def window(arm: str) -> ArmWindow:
        requests, errors = counts[arm]
        fixed = min(corrected.get(arm, 0), requests)
        return ArmWindow(
            requests=requests,
            errors=errors,
            latencies_s=tuple(data[arm]["lat"]),
            ttfts_s=tuple(data[arm]["ttft"]),
            costs_usd=tuple(data[arm]["cost"]),
            corrections=(fixed, requests) if corrected else (0, 0),
        )

    return window("primary"), window("canary")


def current_epoch(engine: Engine, rule: str) -> Epoch | None:
    """The newest version of `rule` seen by any replica, and when it was first seen."""
    query = (
        sa.select(_rule_events.c.version, _rule_events.c.first_seen_at)
        .where(_rule_events.c.rule == rule)
        .order_by(_rule_events.c.first_seen_at.desc())
        .limit(1)
    )
    with engine.connect() as conn:
        row = conn.execute(query).first()
    if row is None:
        return None
    started = as_utc(row[1])
    assert started is not None
    return Epoch(rule, str(row[0]), started)


def active_epochs(engine: Engine, arms: Arms, rule: str, recent: datetime) -> list[Epoch]:
    """Every version of `rule` whose checks ran on either arm since `recent` — each is an epoch
    judged on its own (clients may move between versions, and back) — or, when no check ran
    lately, the newest version seen. Each epoch starts at its version's first request."""
    versions_query = (
        sa.select(_checks.c.rule_version, sa.func.min(_checks.c.created_at))
        .where(arms.clause(_checks), _checks.c.rule == rule, _checks.c.created_at >= recent)
        .group_by(_checks.c.rule_version)
    )
    firsts_query = sa.select(_rule_events.c.version, _rule_events.c.first_seen_at).where(
        _rule_events.c.rule == rule
    )
    with engine.connect() as conn:
        active: list[tuple[Any, ...]] = [tuple(row) for row in conn.execute(versions_query)]
        firsts: dict[str, Any] = {
            str(v): t for v, t in (tuple(r) for r in conn.execute(firsts_query))
        }
    if not active:
        newest = current_epoch(engine, rule)
        return [newest] if newest is not None else []
    epochs = []
    for version, earliest in sorted(active, key=lambda row: str(row[0])):
        started = as_utc(firsts.get(str(version), earliest))
        assert started is not None
        epochs.append(Epoch(rule, str(version), started))
    return epochs


def check_windows(
    engine: Engine, arms: Arms, epoch: Epoch, since: datetime
) -> tuple[dict[str, Tally], dict[str, Tally]]:
    """Per check: (passed, total) for the primary and the candidate, on `epoch`'s version since
    `since`. A check that errored (could not judge the answer) counts as not passed."""
    query = (
        sa.select(_checks.c.arm, _checks.c.check_name, _checks.c.result, sa.func.count())
        .where(arms.clause(_checks))
        .where(_checks.c.rule == epoch.rule, _checks.c.rule_version == epoch.version)
        .where(_checks.c.created_at >= since)
        .group_by(_checks.c.arm, _checks.c.check_name, _checks.c.result)
    )
    tallies: dict[str, dict[str, list[int]]] = {"primary": {}, "canary": {}}
    with engine.connect() as conn:
        rows: list[tuple[Any, ...]] = [tuple(row) for row in conn.execute(query)]
    for arm, check, result, count in rows:
        tally = tallies[arm].setdefault(str(check), [0, 0])
        tally[1] += int(count)
        if result == "pass":
            tally[0] += int(count)
    names = tallies["primary"].keys() | tallies["canary"].keys()

    def side(arm: str) -> dict[str, Tally]:
        return {n: (tallies[arm].get(n, [0, 0])[0], tallies[arm].get(n, [0, 0])[1]) for n in names}

    return side("primary"), side("canary")


def failing_examples(
    engine: Engine, arms: Arms, epoch: Epoch, check: str, since: datetime, limit: int = 5
) -> list[str]:
    """Request ids of candidate answers that failed `check` in the epoch (for the alert)."""
    query = (
        sa.select(_checks.c.request_id)
        .where(_checks.c.route == arms.route, _checks.c.target == arms.candidate)
        .where(_checks.c.arm == Arm.CANARY.value, _checks.c.check_name == check)
        .where(_checks.c.rule == epoch.rule, _checks.c.rule_version == epoch.version)
        .where(_checks.c.result != "pass", _checks.c.created_at >= since)
        .order_by(_checks.c.created_at.desc())
        .limit(limit)
    )
    with engine.connect() as conn:
        return [str(row[0]) for row in conn.execute(query)]


def agreement_tallies(
    engine: Engine, arms: Arms, mode: str, since: datetime
) -> tuple[Tally, Tally]:
    """(disagree, pairs) of the candidate's shadow pairs with the primary, and of the route's
    noise pairs (the primary asked twice), since `since`; only pairs where both answered well.

    The candidate is judged on its shadow pairs: a canary's own answers have no primary answer to
    the same request. `mode` is the route's agreement mode: `exact` and `normalized` read those
    equalities; JSON modes read JSON equality where both answers parsed, else the normalised one.
    """
    equal: Any
    if mode == "exact":
        equal = _pairs.c.exact_equal
    elif mode == "normalized":
        equal = _pairs.c.normalized_equal
    else:
        equal = sa.func.coalesce(_pairs.c.json_equal, _pairs.c.normalized_equal)
    ok = sa.and_(
        _pairs.c.route == arms.route,
        _pairs.c.primary_target == arms.baseline,
        _pairs.c.created_at >= since,
        _pairs.c.primary_status == Status.OK.value,
        _pairs.c.candidate_status == Status.OK.value,
    )
    query = (
        sa.select(_pairs.c.kind, _pairs.c.candidate_target, equal, sa.func.count())
        .where(ok)
        .group_by(_pairs.c.kind, _pairs.c.candidate_target, equal)
    )
    with engine.connect() as conn:
        rows: list[tuple[Any, ...]] = [tuple(row) for row in conn.execute(query)]
    shadow, noise = [0, 0], [0, 0]
    for kind, target, same, count in rows:
        if kind == "noise":
            tally = noise
        elif kind == "shadow" and target == arms.candidate:
            tally = shadow
        else:
            continue
        tally[1] += int(count)
        if not same:
            tally[0] += int(count)
    return (shadow[0], shadow[1]), (noise[0], noise[1])
