"""Rollout state in the store: one row per route, an append-only event log, verdicts, and the
ledger of Alertmanager alerts already acted on (migration 7).

Every transition is one transaction: a compare-and-swap of the route's row on its revision, and
the event row, unique on (route, revision). Two replicas (or an operator and the judge) racing on
one route cannot both win: the loser sees `False` and re-reads. The row is written before the
change takes effect anywhere, so a gateway killed at any moment comes back in the phase it
persisted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from analyzers.verdicts import MetricVerdict
from proxy.core import Arm, DeciderMemory, Phase, RolloutState, Transition, as_utc

from .errors import DuplicateRecordError, translated

if TYPE_CHECKING:
    from .exchanges import Store  # which keeps these tables' retention

_meta = sa.MetaData()
rollouts = sa.Table(
    "rollouts",
    _meta,
    sa.Column("route", sa.String(), primary_key=True),
    sa.Column("revision", sa.Integer()),
    sa.Column("phase", sa.String()),
    sa.Column("rollout_id", sa.String()),
    sa.Column("candidate", sa.String()),
    sa.Column("baseline", sa.String()),
    sa.Column("step", sa.Integer()),
    sa.Column("weight", sa.Float()),
    sa.Column("salt", sa.String()),
    sa.Column("override", sa.String()),
    sa.Column("override_arm", sa.String()),
    sa.Column("reason", sa.Text()),
    sa.Column("actor", sa.String()),
    sa.Column("changed_at", sa.DateTime(timezone=True)),
    sa.Column("started_at", sa.DateTime(timezone=True)),
    sa.Column("step_started_at", sa.DateTime(timezone=True)),
)
rollout_events = sa.Table(
    "rollout_events",
    _meta,
    sa.Column("id", sa.Integer(), primary_key=True),
    sa.Column("route", sa.String()),
    sa.Column("revision", sa.Integer()),
    sa.Column("rollout_id", sa.String()),
    sa.Column("action", sa.String()),
    sa.Column("from_phase", sa.String()),
    sa.Column("to_phase", sa.String()),
    sa.Column("step", sa.Integer()),
    sa.Column("weight", sa.Float()),
    sa.Column("reason", sa.Text()),
    sa.Column("actor", sa.String()),
    sa.Column("evidence", sa.Text()),
    sa.Column("created_at", sa.DateTime(timezone=True)),
)
verdicts = sa.Table(
    "verdicts",
    _meta,
    sa.Column("id", sa.Integer(), primary_key=True),
    sa.Column("route", sa.String()),
    sa.Column("rollout_id", sa.String()),
    sa.Column("candidate", sa.String()),
    sa.Column("look", sa.Integer()),
    sa.Column("scope", sa.String()),
    sa.Column("metric", sa.String()),
    sa.Column("outcome", sa.String()),
    sa.Column("estimate", sa.Float()),
    sa.Column("low", sa.Float()),
    sa.Column("high", sa.Float()),
    sa.Column("threshold", sa.Float()),
    sa.Column("n_primary", sa.Integer()),
    sa.Column("n_candidate", sa.Integer()),
    sa.Column("alpha", sa.Float()),
    sa.Column("reason", sa.Text()),
    sa.Column("created_at", sa.DateTime(timezone=True)),
    sa.Column("needs", sa.Integer()),
    sa.Column("eta_s", sa.Float()),
)
decider_memory = sa.Table(
    "decider_memory",
    _meta,
    sa.Column("route", sa.String(), primary_key=True),
    sa.Column("rollout_id", sa.String()),
    sa.Column("looks", sa.Integer()),
    sa.Column("failures", sa.Integer()),
    sa.Column("held_step", sa.Integer()),
    sa.Column("warnings", sa.Text()),
    sa.Column("updated_at", sa.DateTime(timezone=True)),
)
alert_claims = sa.Table(
    "alert_claims",
    _meta,
    sa.Column("id", sa.Integer(), primary_key=True),
    sa.Column("fingerprint", sa.String()),
    sa.Column("starts_at", sa.DateTime(timezone=True)),
    sa.Column("route", sa.String()),
    sa.Column("created_at", sa.DateTime(timezone=True)),
)


def _to_state(row: Any) -> RolloutState:
    return RolloutState(
        route=row["route"],
        revision=int(row["revision"]),
        phase=Phase(row["phase"]) if row["phase"] else None,
        rollout_id=row["rollout_id"],
        candidate=row["candidate"],
        baseline=row["baseline"],
        step=int(row["step"]),
        weight=float(row["weight"]),
        salt=row["salt"],
        override=row["override"],
        override_arm=Arm(row["override_arm"]),
        reason=row["reason"],
        actor=row["actor"],
        changed_at=as_utc(row["changed_at"]),
        started_at=as_utc(row["started_at"]),
        step_started_at=as_utc(row["step_started_at"]),
    )


def _to_row(state: RolloutState) -> dict[str, Any]:
    return {
        "route": state.route,
        "revision": state.revision,
        "phase": state.phase.value if state.phase else None,
        "rollout_id": state.rollout_id,
        "candidate": state.candidate,
        "baseline": state.baseline,
        "step": state.step,
        "weight": state.weight,
        "salt": state.salt,
        "override": state.override,
        "override_arm": state.override_arm.value,
        "reason": state.reason,
        "actor": state.actor,
        "changed_at": state.changed_at,
        "started_at": state.started_at,
        "step_started_at": state.step_started_at,
    }


class RolloutStore:
    """Blocking reads and writes of rollout state: call from a worker thread. Every method
    raises `StoreError`s only (`StoreUnavailableError` while the database cannot be reached)."""

    def __init__(self, store: Store) -> None:
        self._engine = store.engine
        self._text = store.text
        self.text = store.text
        """`store.bodies` for reasons: the manager keeps in memory what the store keeps."""

    def revisions(self) -> dict[str, int]:
        """Route → revision: the cheap query every replica polls to notice changes."""
        with translated("reading rollout revisions"), self._engine.connect() as conn:
            rows: list[tuple[Any, ...]] = [
                tuple(row) for row in conn.execute(sa.select(rollouts.c.route, rollouts.c.revision))
            ]
        return {str(route): int(revision) for route, revision in rows}

    def load(self, routes: Sequence[str] | None = None) -> dict[str, RolloutState]:
        query = sa.select(rollouts)
        if routes is not None:
            query = query.where(rollouts.c.route.in_(list(routes)))
        with translated("reading rollout state"), self._engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return {row["route"]: _to_state(row) for row in rows}

    def commit(self, change: Transition, evidence: Mapping[str, Any] | None = None) -> bool:
        """Persist `change` if the route's row is still at `change.before.revision`.
        False: someone else changed the route first (nothing was written)."""
        before, after = change.before, change.after
        event = {
            "route": after.route,
            "revision": after.revision,
            "rollout_id": after.rollout_id,
            "action": change.action.value,
            "from_phase": before.phase.value if before.phase else None,
            "to_phase": after.phase.value if after.phase else None,
            "step": after.step,
            "weight": after.weight,
            "reason": self._text.text(after.reason),
            "actor": after.actor,
            "evidence": self._text.text(json.dumps(evidence or {}, default=str, sort_keys=True)),
            "created_at": after.changed_at or datetime.now(UTC),
        }
        try:
            with translated("writing rollout state", writing=True), self._engine.begin() as conn:
                row = _to_row(after) | {"reason": self._text.text(after.reason)}
                if before.revision == 0:
                    conn.execute(sa.insert(rollouts), [row])
                else:
                    done = conn.execute(
                        sa.update(rollouts)
                        .where(rollouts.c.route == after.route)
                        .where(rollouts.c.revision == before.revision)
                        .values(row)
                    )
                    if done.rowcount != 1:
                        return False
                conn.execute(sa.insert(rollout_events), [event])
        except DuplicateRecordError:  # the route's row or this revision's event: someone was first
            return False
        return True

    def events(self, route: str, limit: int = 50) -> list[dict[str, Any]]:
        """The route's latest transitions, newest first."""
        query = (
            sa.select(rollout_events)
            .where(rollout_events.c.route == route)
            .order_by(rollout_events.c.revision.desc())
            .limit(limit)
        )
        with translated("reading rollout events"), self._engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [{**_transition(row), "at": _iso(row["created_at"])} for row in rows]

    def add_verdicts(
        self,
        state: RolloutState,
        look: int,
        scoped: Sequence[tuple[str, MetricVerdict]],
        at: datetime,
        etas: Sequence[float | None] = (),
    ) -> None:
        """Append one look's verdicts; `etas` (one per verdict, or none) the seconds each needs
        at the route's current rate."""
        if not scoped:
            return
        etas = list(etas) or [None] * len(scoped)
        rows = [
            {
                "route": state.route,
                "rollout_id": state.rollout_id or "",
                "candidate": state.candidate or "",
                "look": look,
                "scope": scope,
                "metric": v.metric,
                "outcome": v.outcome.value,
                "estimate": v.estimate,
                "low": v.low,
                "high": v.high,
                "threshold": v.threshold,
                "n_primary": v.n_primary,
                "n_candidate": v.n_candidate,
                "alpha": v.alpha,
                "reason": self._text.text(v.reason),
                "created_at": at,
                "needs": v.needs,
                "eta_s": eta,
            }
            for (scope, v), eta in zip(scoped, etas, strict=True)
        ]
        with translated("writing verdicts", writing=True), self._engine.begin() as conn:
            conn.execute(sa.insert(verdicts), rows)

    def recent_verdicts(self, route: str, limit: int = 100) -> list[dict[str, Any]]:
        query = (
            sa.select(verdicts)
            .where(verdicts.c.route == route)
            # Newest first along the (route, created_at) index; the id breaks ties between the
            # verdicts of one look. SQLite's index ends in the rowid, so it needs no sort at all;
            # ordered by id alone, it sorted the route's whole verdict history on every call.
            .order_by(verdicts.c.created_at.desc(), verdicts.c.id.desc())
            .limit(limit)
        )
        with translated("reading verdicts"), self._engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [
            {
                "rollout_id": row["rollout_id"],
                "candidate": row["candidate"],
                "look": row["look"],
                "scope": row["scope"],
                "metric": row["metric"],
                "verdict": row["outcome"],
                "estimate": row["estimate"],
                "low": row["low"],
                "high": row["high"],
                "threshold": row["threshold"],
                "n_primary": row["n_primary"],
                "n_candidate": row["n_candidate"],
                "alpha": row["alpha"],
                "reason": row["reason"],
                "needs": row["needs"],
                "eta_s": row["eta_s"],
                "at": _iso(row["created_at"]),
            }
            for row in rows
        ]

    def history(
        self, route: str | None = None, since: datetime | None = None, limit: int = 100_000
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(transitions, verdicts) of every route (or one) since `since`, each oldest first, with
        `at` an aware UTC datetime: what the report draws on its time axis. At most `limit` of
        each, the newest."""
        events_query = sa.select(rollout_events).order_by(rollout_events.c.id.desc()).limit(limit)
        verdicts_query = sa.select(verdicts).order_by(verdicts.c.id.desc()).limit(limit)
        if route is not None:
            events_query = events_query.where(rollout_events.c.route == route)
            verdicts_query = verdicts_query.where(verdicts.c.route == route)
        if since is not None:
            events_query = events_query.where(rollout_events.c.created_at >= since)
            verdicts_query = verdicts_query.where(verdicts.c.created_at >= since)
        with translated("reading rollout history"), self._engine.connect() as conn:
            event_rows = conn.execute(events_query).mappings().all()
            verdict_rows = conn.execute(verdicts_query).mappings().all()
        events = [
            {"route": row["route"], **_transition(row), "at": as_utc(row["created_at"])}
            for row in reversed(event_rows)
        ]
        found = [
            {
                "route": row["route"],
                "rollout_id": row["rollout_id"],
                "candidate": row["candidate"],
                "look": row["look"],
                "scope": row["scope"],
                "metric": row["metric"],
                "verdict": row["outcome"],
                "estimate": row["estimate"],
                "low": row["low"],
                "high": row["high"],
                "threshold": row["threshold"],
                "reason": row["reason"],
                "at": as_utc(row["created_at"]),
            }
            for row in reversed(verdict_rows)
        ]
        return events, found

    def load_memory(self, route: str) -> DeciderMemory | None:
        """What the decider remembered of the route's rollout at its last look, if anything."""
        query = sa.select(decider_memory).where(decider_memory.c.route == route)
        with translated("reading the decider's memory"), self._engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        if row is None:
            return None
        return DeciderMemory(
            rollout_id=row["rollout_id"],
            looks=int(row["looks"]),
            failures=int(row["failures"]),
            held_step=row["held_step"],
            warnings=tuple(json.loads(row["warnings"] or "[]")),
        )

    def save_memory(self, route: str, memory: DeciderMemory) -> None:
        """Replace the route's remembered decision state (one row per route)."""
        row = {
            "route": route,
            "rollout_id": memory.rollout_id,
            "looks": memory.looks,
            "failures": memory.failures,
            "held_step": memory.held_step,
            "warnings": json.dumps(list(memory.warnings)),
            "updated_at": datetime.now(UTC),
        }
        with translated("writing the decider's memory", writing=True), self._engine.begin() as conn:
            done = conn.execute(
                sa.update(decider_memory).where(decider_memory.c.route == route).values(row)
            )
            if done.rowcount == 0:
                conn.execute(sa.insert(decider_memory), [row])

    def claim_alert(self, fingerprint: str, starts_at: datetime, route: str) -> bool:
        """Record one firing of one Alertmanager alert as acted on; False if it already was."""
        try:
            with translated("claiming an alert", writing=True), self._engine.begin() as conn:
                conn.execute(
                    sa.insert(alert_claims),
                    [
                        {
                            "fingerprint": fingerprint,
                            "starts_at": starts_at,
                            "route": route,
                            "created_at": datetime.now(UTC),
                        }
                    ],
                )
        except DuplicateRecordError:
            return False
        return True

    def alert_seen(self, fingerprint: str, starts_at: datetime) -> bool:
        """Whether this firing of this alert was already acted on (by any replica)."""
        query = (
            sa.select(sa.func.count())
            .select_from(alert_claims)
            .where(alert_claims.c.fingerprint == fingerprint)
            .where(alert_claims.c.starts_at == starts_at)
        )
        with translated("reading alert claims"), self._engine.connect() as conn:
            return bool(conn.execute(query).scalar())


def _iso(moment: Any) -> str | None:
    value = as_utc(moment)
    return value.isoformat() if value else None


def _transition(row: sa.RowMapping) -> dict[str, Any]:
    """One `rollout_events` row as the admin API and the report read it (`at` is theirs)."""
    return {
        "revision": row["revision"],
        "rollout_id": row["rollout_id"],
        "action": row["action"],
        "from_phase": row["from_phase"],
        "to_phase": row["to_phase"],
        "step": row["step"],
        "weight": row["weight"],
        "reason": row["reason"],
        "actor": row["actor"],
        "evidence": json.loads(row["evidence"] or "{}"),
    }
