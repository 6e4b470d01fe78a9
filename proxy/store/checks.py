"""The `check_results` and `findings` tables' rows and conversions (used by the store)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from proxy.core import Arm, CheckRecord, FindingRecord, as_utc


class CheckRow(SQLModel, table=True):
    """One row of `check_results` (schema: migration 5)."""

    __tablename__ = "check_results"

    id: int | None = Field(default=None, primary_key=True)
    request_id: str
    route: str
    target: str
    arm: str
    rule: str
    rule_version: str
    check_name: str
    result: str
    reason: str = Field(sa_column=sa.Column(sa.Text(), nullable=False))
    created_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    pair_id: str | None = None
    sticky_unit: str | None = None
    """The checked exchange's sticky unit (migration 19); NULL without one."""


checks_table: sa.Table = CheckRow.__table__  # type: ignore[attr-defined]


def row_to_check(row: sa.RowMapping) -> CheckRecord:
    return CheckRecord(
        request_id=row["request_id"],
        route=row["route"],
        target=row["target"],
        arm=Arm(row["arm"]),
        rule=row["rule"],
        rule_version=row["rule_version"],
        check=row["check_name"],
        result=row["result"],
        reason=row["reason"],
        created_at=as_utc(row["created_at"]),
        pair_id=row["pair_id"],
        sticky_unit=row["sticky_unit"],
    )


_findings = sa.Table(
    "findings",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("request_id", sa.String()),
    sa.Column("route", sa.String()),
    sa.Column("target", sa.String()),
    sa.Column("arm", sa.String()),
    sa.Column("analyzer", sa.String()),
    sa.Column("name", sa.String()),
    sa.Column("created_at", sa.DateTime(timezone=True)),
    sa.Column("value", sa.Float()),
    sa.Column("label", sa.String()),
    sa.Column("detail", sa.Text()),
    sa.Column("pair_id", sa.String()),
    sa.Column("severity", sa.String()),
)
findings_table: sa.Table = _findings
"""The `findings` table (schema: migrations 6 and 10), written with core inserts."""


def finding_to_row(record: FindingRecord) -> dict[str, Any]:
    return {
        "request_id": record.request_id,
        "route": record.route,
        "target": record.target,
        "arm": record.arm.value,
        "analyzer": record.analyzer,
        "name": record.name,
        "created_at": as_utc(record.created_at),
        "value": record.value,
        "label": record.label,
        "detail": record.detail,
        "pair_id": record.pair_id,
        "severity": record.severity,
    }


def row_to_finding(row: sa.RowMapping) -> FindingRecord:
    """The stored finding as a record (a row written before migration 10 has no severity)."""
    return FindingRecord(
        request_id=row["request_id"],
        route=row["route"],
        target=row["target"],
        arm=Arm(row["arm"]),
        analyzer=row["analyzer"],
        name=row["name"],
        created_at=as_utc(row["created_at"]),
        value=row["value"],
        label=row["label"],
        detail=row["detail"],
        pair_id=row["pair_id"],
        severity=row["severity"],
    )
