"""Feedback rows: corrections and ratings, one per (request id, kind), in the gateway's store,
and `is_correction_clause`, `proxy.core.is_correction` said in SQL."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from proxy.core import Arm, FeedbackRecord, as_utc

from .errors import DuplicateRecordError, translated
from .exchanges import Store


class FeedbackRow(SQLModel, table=True):
    """One row of `feedback` (schema: migrations 3 and 11)."""

    __tablename__ = "feedback"

    id: int | None = Field(default=None, primary_key=True)
    request_id: str
    kind: str
    route: str
    target: str
    arm: str
    created_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    corrected: bool = False
    correction: str | None = Field(default=None, sa_column=sa.Column(sa.Text(), nullable=True))
    score: int | None = None
    label: str | None = None
    rule: str | None = None
    rule_version: str | None = None
    caller: str | None = None


_table: sa.Table = FeedbackRow.__table__  # type: ignore[attr-defined]
feedback_table = _table


def is_correction_clause(table: sa.Table = _table) -> sa.ColumnElement[bool]:
    """True for the rows of `table` (`feedback`) that `proxy.core.is_correction` calls a
    correction: kind `correction` with `corrected` set or a non-empty correction text."""
    c = table.c
    return sa.and_(
        c.kind == "correction",
        sa.or_(c.corrected == sa.true(), sa.func.coalesce(sa.func.length(c.correction), 0) > 0),
    )


class FeedbackStore:
    """Reads and writes `feedback` in the gateway's store (blocking: call from a worker thread).
    Every method raises `StoreError`s only."""

    def __init__(self, store: Store) -> None:
        self._engine = store.engine
        self._text = store.text

    def add(self, record: FeedbackRecord) -> bool:
        """Store `record`; False (and nothing changes) when this request already has feedback of
        this kind. Raises `StoreError`s (`StoreUnavailableError`: worth sending again)."""
        row = {
            "request_id": record.request_id,
            "kind": record.kind,
            "route": record.route,
            "target": record.target,
            "arm": record.arm.value,
            "created_at": as_utc(record.created_at),
            "corrected": record.corrected,
            "correction": self._text.derived(record.correction),
            "score": record.score,
            "label": self._text.text(record.label),
            "rule": record.rule,
            "rule_version": record.rule_version,
            "caller": record.caller,
        }
        try:
            with translated("storing feedback", writing=True), self._engine.begin() as conn:
                conn.execute(sa.insert(_table), [row])
        except DuplicateRecordError:
            return False
        return True

    def query(
        self, *, request_id: str | None = None, route: str | None = None
    ) -> list[FeedbackRecord]:
        """Stored feedback, oldest first, filtered by request id and/or route."""
        statement = sa.select(_table).order_by(_table.c.id)
        if request_id is not None:
            statement = statement.where(_table.c.request_id == request_id)
        if route is not None:
            statement = statement.where(_table.c.route == route)
        with translated("reading feedback"), self._engine.connect() as conn:
            rows = conn.execute(statement).mappings().all()
        return [
            FeedbackRecord(
                request_id=r["request_id"],
                kind=r["kind"],
                route=r["route"],
                target=r["target"],
                arm=Arm(r["arm"]),
                created_at=as_utc(r["created_at"]),
                corrected=bool(r["corrected"]),
                correction=r["correction"],
                score=r["score"],
                label=r["label"],
                rule=r["rule"],
                rule_version=r["rule_version"],
                caller=r["caller"],
            )
            for r in rows
        ]
