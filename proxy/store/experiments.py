"""Online A/B experiments in the store (migration 15): one `experiments` row per started
experiment, its `experiment_events` (started, stopped, an arm stopped by a guardrail, the sample
ratio flagged or cleared), the decider's last decision, and the per-unit read the decision is
made from.

A start is one transaction that inserts the row only while no experiment of the route runs, so
two replicas (or two operators) starting at once make one experiment. A stop, and an arm stopped,
compare-and-swap the row on its `revision`, which every replica polls (`revisions`).

`units` reads one experiment's exchanges (those recorded with its `experiment_arm`, since it
started and until it stopped), joined with the outcomes posted for their operations and the
rule checks of their answers, and sums them per unit: what `analyzers.experiments.Unit` holds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from proxy.core import CUT_SHORT, Arm, ExperimentState, Status, as_utc

from .checks import checks_table
from .errors import DuplicateRecordError, translated
from .exchanges import exchanges_table
from .migrations import SQLITE_BEGIN_OPTION

if TYPE_CHECKING:
    from .exchanges import Store

_meta = sa.MetaData()
experiments_table = sa.Table(
    "experiments",
    _meta,
    sa.Column("id", sa.String(), primary_key=True),
    sa.Column("route", sa.String()),
    sa.Column("fingerprint", sa.String()),
    sa.Column("arms", sa.Text()),
    sa.Column("weights", sa.Text()),
    sa.Column("control", sa.String()),
    sa.Column("state", sa.String()),
    sa.Column("revision", sa.Integer()),
    sa.Column("stopped_arms", sa.Text()),
    sa.Column("started_at", sa.DateTime(timezone=True)),
    sa.Column("stopped_at", sa.DateTime(timezone=True)),
    sa.Column("actor", sa.String()),
    sa.Column("reason", sa.Text()),
    sa.Column("decision", sa.Text()),
    sa.Column("decided_at", sa.DateTime(timezone=True)),
)
experiment_events_table = sa.Table(
    "experiment_events",
    _meta,
    sa.Column("id", sa.Integer(), primary_key=True),
    sa.Column("experiment_id", sa.String()),
    sa.Column("route", sa.String()),
    sa.Column("kind", sa.String()),
    sa.Column("arm", sa.String()),
    sa.Column("metric", sa.String()),
    sa.Column("detail", sa.Text()),
    sa.Column("actor", sa.String()),
    sa.Column("created_at", sa.DateTime(timezone=True)),
)
_outcomes = sa.table(
    "outcomes",
    sa.column("operation_id", sa.String()),
    sa.column("kind", sa.String()),
    sa.column("flag", sa.Boolean()),
)
"""The operations' outcomes (migration 14), read here only."""

START_LOCK_CLASS = 0x6D67_0015
"""First key of the PostgreSQL advisory lock a start holds (the second: the route's hash)."""

_x = experiments_table
_ev = experiment_events_table
_ex = exchanges_table
_checks = checks_table
_CHUNK = 500
_FAILED = frozenset(s.value for s in Status) - {Status.OK.value} - {s.value for s in CUT_SHORT}
"""Statuses that count as an error answer (a call cut short by the client or a stop is none)."""


@dataclass(frozen=True, slots=True)
class UnitTally:
    """One unit of an experiment, summed (the fields of `analyzers.experiments.Unit`)."""

    arm: str
    operations: int
    requests: int
    errors: int
    cost_usd: float
    completed: int | None = None
    outcomes: int = 0
    adopted: int = 0
    adopted_known: int = 0
    corrected: int = 0
    corrected_known: int = 0
    latencies_s: tuple[float, ...] = ()
    checks: Mapping[str, tuple[int, int]] = field(default_factory=dict)


def _to_state(row: Any) -> ExperimentState:
    return ExperimentState(
        route=row["route"],
        experiment_id=row["id"],
        running=row["state"] == "running",
        weights=json.loads(row["weights"]),
        control=row["control"],
        fingerprint=row["fingerprint"],
        revision=int(row["revision"]),
        stopped_arms=frozenset(json.loads(row["stopped_arms"])),
        started_at=as_utc(row["started_at"]),
        stopped_at=as_utc(row["stopped_at"]) if row["stopped_at"] is not None else None,
        actor=row["actor"],
        reason=row["reason"],
        models=json.loads(row["arms"]),
    )


class ExperimentStore:
    """Blocking reads and writes of experiments: call from a worker thread. Every method raises
    `StoreError`s only (`StoreUnavailableError` while the database cannot be reached)."""

    def __init__(self, store: Store) -> None:
        self._engine = store.engine
        self.text = store.text
        """`store.bodies` for reasons: the manager keeps in memory what the store keeps."""

    # --- state ------------------------------------------------------------------------------------

    def _latest(self, routes: Sequence[str] | None) -> sa.Select[Any]:
        newest = sa.select(_x.c.route, sa.func.max(_x.c.started_at).label("at")).group_by(
            _x.c.route
        )
        if routes is not None:
            newest = newest.where(_x.c.route.in_(list(routes)))
        sub = newest.subquery()
        return sa.select(_x).join(
            sub, sa.and_(_x.c.route == sub.c.route, _x.c.started_at == sub.c.at)
        )

    def revisions(self) -> dict[str, tuple[str, int]]:
        """Route → (latest experiment id, its revision): what every replica polls."""
        query = self._latest(None).with_only_columns(_x.c.route, _x.c.id, _x.c.revision)
        with translated("reading experiment revisions"), self._engine.connect() as conn:
            rows = conn.execute(query).all()
        return {str(r[0]): (str(r[1]), int(r[2])) for r in rows}

    def load(self, routes: Sequence[str] | None = None) -> dict[str, ExperimentState]:
        """Route → its latest experiment (running or stopped)."""
        with translated("reading experiments"), self._engine.connect() as conn:
            rows = conn.execute(self._latest(routes)).mappings().all()
        return {row["route"]: _to_state(row) for row in rows}

    def get(self, experiment_id: str) -> ExperimentState | None:
        with translated("reading an experiment"), self._engine.connect() as conn:
            row = conn.execute(sa.select(_x).where(_x.c.id == experiment_id)).mappings().first()
        return _to_state(row) if row is not None else None

    def history(
        self, route: str | None = None, since: datetime | None = None, limit: int = 20
    ) -> list[ExperimentState]:
        """Experiments newest first (of `route`; running since, or stopped after, `since`)."""
        query = sa.select(_x).order_by(_x.c.started_at.desc()).limit(limit)
        if route is not None:
            query = query.where(_x.c.route == route)
        if since is not None:
            query = query.where(sa.or_(_x.c.stopped_at.is_(None), _x.c.stopped_at >= since))
        with translated("reading experiments"), self._engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [_to_state(row) for row in rows]

    def start(self, state: ExperimentState) -> ExperimentState:
        """Persist `state` (running) unless an experiment of its route already runs; return the
        running one either way (idempotent: a second start changes nothing)."""
        assert state.started_at is not None
        reason = self.text.text(state.reason) or ""
        row: dict[str, Any] = {
            "id": state.experiment_id,
            "route": state.route,
            "fingerprint": state.fingerprint,
            "arms": json.dumps(dict(state.models)),
            "weights": json.dumps(dict(state.weights)),
            "control": state.control,
            "state": "running",
            "revision": state.revision,
            "stopped_arms": "[]",
            "started_at": state.started_at,
            "stopped_at": None,
            "actor": state.actor,
            "reason": reason,
            "decision": None,
            "decided_at": None,
        }
        running = sa.select(_x).where(_x.c.route == state.route, _x.c.state == "running")
        for _ in range(3):
            try:
                with (
                    translated("starting an experiment", writing=True),
                    self._engine.connect() as c,
                ):
                    # Read and write in one writer's transaction: on SQLite the write lock is
                    # taken at BEGIN (a read lock upgraded later could not wait for it).
                    c.execution_options(**{SQLITE_BEGIN_OPTION: "IMMEDIATE"})
                    with c.begin():
                        if c.dialect.name == "postgresql":  # one starter per route at a time
                            c.execute(
                                sa.text("SELECT pg_advisory_xact_lock(:cls, hashtext(:route))"),
                                {"cls": START_LOCK_CLASS, "route": state.route},
                            )
                        found = c.execute(running).mappings().first()
                        if found is not None:
                            return _to_state(found)
                        c.execute(sa.insert(_x), [row])
                        c.execute(sa.insert(_ev), [self._event(state, "started", state.reason)])
                return replace(state, reason=reason)
            except DuplicateRecordError:
                continue
        raise RuntimeError(f"could not start an experiment on {state.route}")  # pragma: no cover

    def stop(
        self, route: str, *, actor: str, reason: str, at: datetime
    ) -> tuple[ExperimentState | None, bool]:
        """Stop the route's running experiment: (its state now, whether this call stopped it).
        (None, False): the route has no experiment at all."""
        for _ in range(5):
            latest = self.load([route]).get(route)
            if latest is None or not latest.running:
                return latest, False
            after = replace(
                latest,
                running=False,
                revision=latest.revision + 1,
                stopped_at=at,
                actor=actor,
                reason=self.text.text(reason) or "",
            )
            values = {
                "state": "stopped",
                "revision": after.revision,
                "stopped_at": at,
                "actor": actor,
                "reason": after.reason,
            }
            if self._swap(latest, values, self._event(after, "stopped", reason, at=at)):
                return after, True
        raise RuntimeError(f"experiment of {route} kept changing")  # pragma: no cover

    def stop_arm(
        self, state: ExperimentState, arm: str, *, metric: str, detail: str, at: datetime
    ) -> ExperimentState | None:
        """Stop one arm of the running `state` (a guardrail breach), if the row is still at
        `state.revision`; the new state, or None when it changed meanwhile."""
        after = replace(state, revision=state.revision + 1, stopped_arms=state.stopped_arms | {arm})
        values = {
            "revision": after.revision,
            "stopped_arms": json.dumps(sorted(after.stopped_arms)),
        }
        event = self._event(after, "arm_stopped", detail, arm=arm, metric=metric, at=at)
        event["actor"] = "decider"
        return after if self._swap(state, values, event) else None

    def _swap(
        self, before: ExperimentState, values: Mapping[str, Any], event: Mapping[str, Any]
    ) -> bool:
        with translated("changing an experiment", writing=True), self._engine.begin() as conn:
            done = conn.execute(
                sa.update(_x)
                .where(_x.c.id == before.experiment_id, _x.c.revision == before.revision)
                .values(dict(values))
            )
            if done.rowcount != 1:
                return False
            conn.execute(sa.insert(_ev), [dict(event)])
        return True

    def _event(
        self,
        state: ExperimentState,
        kind: str,
        detail: str,
        *,
        arm: str | None = None,
        metric: str | None = None,
        at: datetime | None = None,
    ) -> dict[str, Any]:
        return {
            "experiment_id": state.experiment_id,
            "route": state.route,
            "kind": kind,
            "arm": arm,
            "metric": metric,
            "detail": self.text.text(detail) or "",
            "actor": state.actor,
            "created_at": at or state.started_at or datetime.now(UTC),
        }

    def add_event(
        self,
        state: ExperimentState,
        kind: str,
        detail: str,
        *,
        metric: str | None = None,
        at: datetime | None = None,
    ) -> None:
        """Append an event the decider noticed (`srm_flagged`, `srm_cleared`)."""
        event = self._event(state, kind, detail, metric=metric, at=at) | {"actor": "decider"}
        with translated("writing an experiment event", writing=True), self._engine.begin() as c:
            c.execute(sa.insert(_ev), [event])

    def events(self, experiment_id: str, limit: int = 50) -> list[dict[str, Any]]:
        """The experiment's events, newest first."""
        query = (
            sa.select(_ev)
            .where(_ev.c.experiment_id == experiment_id)
            .order_by(_ev.c.id.desc())
            .limit(limit)
        )
        with translated("reading experiment events"), self._engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [
            {
                "kind": r["kind"],
                "arm": r["arm"],
                "metric": r["metric"],
                "detail": r["detail"],
                "actor": r["actor"],
                "at": as_utc(r["created_at"]).isoformat(),
            }
            for r in rows
        ]

    def save_decision(self, experiment_id: str, decision: Mapping[str, Any], at: datetime) -> None:
        """Keep the decider's latest decision on the experiment's row (status shows it)."""
        text = json.dumps(decision, default=str, sort_keys=True)
        with translated("writing an experiment decision", writing=True), self._engine.begin() as c:
            c.execute(
                sa.update(_x).where(_x.c.id == experiment_id).values(decision=text, decided_at=at)
            )

    def decision(self, experiment_id: str) -> tuple[dict[str, Any] | None, datetime | None]:
        """The latest decision persisted for the experiment and when it was made."""
        query = sa.select(_x.c.decision, _x.c.decided_at).where(_x.c.id == experiment_id)
        with translated("reading an experiment decision"), self._engine.connect() as conn:
            row = conn.execute(query).first()
        if row is None or row[0] is None:
            return None, None
        return json.loads(row[0]), as_utc(row[1]) if row[1] is not None else None

    # --- the decision's evidence ------------------------------------------------------------------

    def units(self, state: ExperimentState, until: datetime | None = None) -> list[UnitTally]:
        """Every unit of the experiment so far, summed (see the module docstring). A unit
        counts in the arm of its first call; calls it made on another arm later (its arm was
        stopped and control served it) are left out, so control stays control."""
        assert state.started_at is not None
        has_operation = "operation_id" in _ex.c
        columns = [
            _ex.c.experiment_unit,
            _ex.c.experiment_arm,
            _ex.c.request_id,
            _ex.c.status,
            _ex.c.cost_usd,
            _ex.c.started_at,
            _ex.c.duration_s,
            _ex.c.operation_id if has_operation else sa.null().label("operation_id"),
        ]
        end = until or state.stopped_at
        where = [
            _ex.c.route == state.route,
            _ex.c.experiment_arm.is_not(None),
            _ex.c.experiment_unit.is_not(None),
            _ex.c.started_at >= state.started_at,
            _ex.c.arm.in_([Arm.EXPERIMENT.value, Arm.FALLBACK.value]),
        ]
        if end is not None:
            where.append(_ex.c.started_at <= end)
        query = sa.select(*columns).where(*where).order_by(_ex.c.started_at)
        with translated("reading experiment exchanges"), self._engine.connect() as conn:
            rows = conn.execute(query).all()
        first_arm: dict[str, str] = {}
        kept: list[Any] = []
        for row in rows:
            arm = first_arm.setdefault(row[0], row[1])
            if arm == row[1]:
                kept.append(row)
        requests = {row[2] for row in kept}
        operations = {row[7] for row in kept if row[7] is not None}
        judged = self._judge_costs(state.route, requests, state.started_at)
        outcomes = self._outcomes(operations) if has_operation else {}
        checks = self._checks(requests)
        return _tally(kept, first_arm, judged, outcomes, checks)

    def _in_chunks(self, values: Iterable[str], query: Any, column: Any) -> list[Any]:
        out: list[Any] = []
        values = sorted(values)
        with self._engine.connect() as conn:
            for i in range(0, len(values), _CHUNK):
                chunk = values[i : i + _CHUNK]
                out.extend(conn.execute(query.where(column.in_(chunk))).all())
        return out

    def _judge_costs(self, route: str, requests: set[str], since: datetime) -> dict[str, float]:
        """Request id → the cost of the LLM judge's calls about it."""
        query = sa.select(_ex.c.request_id, _ex.c.cost_usd).where(
            _ex.c.route == route, _ex.c.arm == Arm.JUDGE.value, _ex.c.started_at >= since
        )
        costs: dict[str, float] = {}
        with translated("reading judge costs"):
            for request_id, cost in self._in_chunks(requests, query, _ex.c.request_id):
                costs[request_id] = costs.get(request_id, 0.0) + float(cost or 0.0)
        return costs

    def _outcomes(self, operations: set[str]) -> dict[str, dict[str, bool | None]]:
        """Operation id → kind → flag, for the kinds a rate is made of."""
        query = sa.select(_outcomes.c.operation_id, _outcomes.c.kind, _outcomes.c.flag).where(
            _outcomes.c.kind.in_(["completed", "adopted", "corrected"])
        )
        found: dict[str, dict[str, bool | None]] = {}
        with translated("reading outcomes"):
            for operation_id, kind, flag in self._in_chunks(
                operations, query, _outcomes.c.operation_id
            ):
                found.setdefault(operation_id, {})[kind] = None if flag is None else bool(flag)
        return found

    def _checks(self, requests: set[str]) -> dict[str, list[tuple[str, str]]]:
        """Request id → (check, result) of its answers' rule checks."""
        query = sa.select(_checks.c.request_id, _checks.c.check_name, _checks.c.result)
        found: dict[str, list[tuple[str, str]]] = {}
        with translated("reading check results"):
            for request_id, check, result in self._in_chunks(requests, query, _checks.c.request_id):
                found.setdefault(request_id, []).append((check, result))
        return found


def _tally(
    rows: Sequence[Any],
    arms: Mapping[str, str],
    judged: Mapping[str, float],
    outcomes: Mapping[str, Mapping[str, bool | None]],
    checks: Mapping[str, Sequence[tuple[str, str]]],
) -> list[UnitTally]:
    """Sum rows (unit, arm, request, status, cost, started_at, duration_s, operation) per unit."""
    by_unit: dict[str, list[Any]] = {}
    for row in rows:
        by_unit.setdefault(row[0], []).append(row)
    out: list[UnitTally] = []
    for unit, calls in by_unit.items():
        spans: dict[str, tuple[float, float]] = {}
        requests = {row[2] for row in calls}
        for row in calls:
            operation = row[7] if row[7] is not None else f"request:{row[2]}"
            start = as_utc(row[5]).timestamp()
            end = start + float(row[6] or 0.0)
            low, high = spans.get(operation, (start, end))
            spans[operation] = (min(low, start), max(high, end))
        known = [outcomes[op] for op in spans if op in outcomes]
        completed = [o["completed"] for o in known if o.get("completed") is not None]
        adopted = [o["adopted"] for o in known if o.get("adopted") is not None]
        corrected = [o["corrected"] for o in known if o.get("corrected") is not None]
        tallies: dict[str, tuple[int, int]] = {}
        for request_id in requests:
            for check, result in checks.get(request_id, ()):
                if result not in ("pass", "fail"):
                    continue
                passed, evaluated = tallies.get(check, (0, 0))
                tallies[check] = (passed + (result == "pass"), evaluated + 1)
        out.append(
            UnitTally(
                arm=arms[unit],
                operations=len(spans),
                requests=len(calls),
                errors=sum(1 for row in calls if row[3] in _FAILED),
                cost_usd=sum(float(row[4] or 0.0) for row in calls)
                + sum(judged.get(r, 0.0) for r in requests),
                completed=sum(1 for c in completed if c) if completed else None,
                outcomes=len(completed),
                adopted=sum(1 for a in adopted if a),
                adopted_known=len(adopted),
                corrected=sum(1 for c in corrected if c),
                corrected_known=len(corrected),
                latencies_s=tuple(round(high - low, 6) for low, high in spans.values()),
                checks=tallies,
            )
        )
    return out
