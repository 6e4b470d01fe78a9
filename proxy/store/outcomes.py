"""Outcome rows — what happened to each business operation, one per (operation id, kind) — and
the reads of an operation's exchanges that its summary adds up."""

from __future__ import annotations

import json
from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from proxy.core import (
    OperationCall,
    OperationSummary,
    OutcomeRecord,
    Status,
    as_utc,
    summarize,
)

from .errors import DuplicateRecordError, translated
from .exchanges import Store, exchanges_table

MAX_OPERATION_CALLS = 10_000
"""An operation's exchanges read for its summary, at most (oldest first)."""


class OutcomeRow(SQLModel, table=True):
    """One row of `outcomes` (schema: migration 14)."""

    __tablename__ = "outcomes"
    __table_args__ = (
        sa.Index("ix_outcomes_operation_kind", "operation_id", "kind", unique=True),
        sa.Index("ix_outcomes_route_created_at", "route", "created_at"),
    )

    id: int | None = Field(
        default=None,
        sa_column=sa.Column(
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
    )
    operation_id: str
    kind: str
    flag: bool | None = None
    value: float | None = None
    labels: str | None = Field(default=None, sa_column=sa.Column(sa.Text(), nullable=True))
    """JSON object of string labels."""
    route: str | None = None
    caller: str
    created_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))


_outcomes: sa.Table = OutcomeRow.__table__  # type: ignore[attr-defined]
outcomes_table = _outcomes
"""The `outcomes` table, for the store's other query objects (the experiments' per-unit read)."""

_ARM_COLUMNS = ("experiment_arm", "arm")
"""The columns an exchange's operation arm is read from, first non-NULL wins (an experiment's
arm column goes first)."""


class OutcomeStore:
    """Reads and writes `outcomes`, and reads the exchanges of an operation (blocking: call from
    a worker thread). Every method raises `StoreError`s only."""

    def __init__(self, store: Store) -> None:
        self._engine = store.engine

    def add(self, record: OutcomeRecord) -> bool:
        """Store `record`; False (and nothing changes) when its operation already has an outcome
        of this kind — also when another replica stored one a moment earlier. Raises
        `StoreError`s (`StoreUnavailableError`: worth sending again)."""
        row = {
            "operation_id": record.operation_id,
            "kind": record.kind,
            "flag": record.flag,
            "value": record.value,
            "labels": json.dumps(dict(record.labels), sort_keys=True) if record.labels else None,
            "route": record.route,
            "caller": record.caller,
            "created_at": as_utc(record.created_at),
        }
        try:
            with translated("storing an outcome", writing=True), self._engine.begin() as conn:
                conn.execute(sa.insert(_outcomes), [row])
        except DuplicateRecordError:
            return False
        return True

    def outcomes(self, operation_id: str) -> list[OutcomeRecord]:
        """The outcomes of `operation_id`, oldest first."""
        statement = (
            sa.select(_outcomes)
            .where(_outcomes.c.operation_id == operation_id)
            .order_by(_outcomes.c.id)
        )
        with translated("reading outcomes"), self._engine.connect() as conn:
            rows = conn.execute(statement).mappings().all()
        return [_to_outcome(r) for r in rows]

    def calls(self, operation_id: str, *, limit: int = MAX_OPERATION_CALLS) -> list[OperationCall]:
        """The stored exchanges of `operation_id` (every arm), oldest first."""
        c = exchanges_table.c
        served_as = sa.func.coalesce(*(c[name] for name in _ARM_COLUMNS), c.arm)
        columns = (
            c.request_id, c.route, c.target, c.arm, served_as.label("served_as"),
            c.started_at, c.duration_s, c.status, c.cost_usd,
        )  # fmt: skip
        statement = (
            sa.select(*columns)
            .where(c.operation_id == operation_id)
            .order_by(c.started_at, c.id)
            .limit(limit)
        )
        with translated("reading an operation's exchanges"), self._engine.connect() as conn:
            rows = conn.execute(statement).mappings().all()
        return [
            OperationCall(
                request_id=r["request_id"],
                route=r["route"],
                target=r["target"],
                arm=r["arm"],
                served_as=r["served_as"],
                started_at=as_utc(r["started_at"]),
                duration_s=r["duration_s"],
                ok=r["status"] == Status.OK.value,
                cost_usd=r["cost_usd"],
            )
            for r in rows
        ]

    def operation(self, operation_id: str) -> OperationSummary | None:
        """The summary of `operation_id` from what the store holds; None when it holds neither
        an exchange nor an outcome of it."""
        calls = self.calls(operation_id)
        outcomes = self.outcomes(operation_id)
        if not calls and not outcomes:
            return None
        return summarize(operation_id, calls, outcomes)

    def request_ids(self, operation_id: str, *, limit: int = 1000) -> list[str]:
        """The ids of the client requests of `operation_id` (newest first), for checking a
        signed feedback token against the operation."""
        c = exchanges_table.c
        statement = (
            sa.select(c.request_id)
            .where(c.operation_id == operation_id)
            .group_by(c.request_id)
            .order_by(sa.func.max(c.started_at).desc())
            .limit(limit)
        )
        with translated("reading an operation's requests"), self._engine.connect() as conn:
            return [row[0] for row in conn.execute(statement)]

    def query(
        self, *, route: str | None = None, since: datetime | None = None, limit: int = 10_000
    ) -> list[OutcomeRecord]:
        """Stored outcomes, oldest first, filtered by route and `since` (created at or after)."""
        statement = sa.select(_outcomes).order_by(_outcomes.c.id).limit(limit)
        if route is not None:
            statement = statement.where(_outcomes.c.route == route)
        if since is not None:
            statement = statement.where(_outcomes.c.created_at >= as_utc(since))
        with translated("reading outcomes"), self._engine.connect() as conn:
            rows = conn.execute(statement).mappings().all()
        return [_to_outcome(r) for r in rows]


def _to_outcome(row: sa.RowMapping) -> OutcomeRecord:
    labels: dict[str, str] = json.loads(row["labels"]) if row["labels"] else {}
    return OutcomeRecord(
        operation_id=row["operation_id"],
        kind=row["kind"],
        caller=row["caller"],
        created_at=as_utc(row["created_at"]),
        route=row["route"],
        flag=None if row["flag"] is None else bool(row["flag"]),
        value=row["value"],
        labels=tuple(sorted(labels.items())),
    )
