"""The `pairs` table's ORM row and its conversion to and from `PairRecord` (used by the store)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from proxy.core import PairRecord, as_utc


class PairRow(SQLModel, table=True):
    """One row of `pairs` (schema: migrations 2 and 8)."""

    __tablename__ = "pairs"

    id: int | None = Field(default=None, primary_key=True)
    pair_id: str
    kind: str
    request_id: str
    route: str
    primary_target: str
    candidate_target: str
    created_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    primary_status: str
    candidate_status: str
    exact_equal: bool
    normalized_equal: bool
    json_equal: bool | None = None
    json_fields: str = Field(default="{}", sa_column=sa.Column(sa.Text(), nullable=False))
    length_ratio: float | None = None
    latency_delta_s: float | None = None
    ttft_delta_s: float | None = None
    cost_delta_usd: float | None = None
    agreement: str | None = None
    sticky_unit: str | None = None
    """The client request's sticky unit (migration 19); NULL without one."""


pairs_table: sa.Table = PairRow.__table__  # type: ignore[attr-defined]


def pair_to_row(pair: PairRecord) -> dict[str, Any]:
    return {
        "pair_id": pair.pair_id,
        "kind": pair.kind,
        "request_id": pair.request_id,
        "route": pair.route,
        "primary_target": pair.primary_target,
        "candidate_target": pair.candidate_target,
        "created_at": as_utc(pair.created_at),
        "primary_status": pair.primary_status,
        "candidate_status": pair.candidate_status,
        "exact_equal": pair.exact_equal,
        "normalized_equal": pair.normalized_equal,
        "json_equal": pair.json_equal,
        "json_fields": json.dumps(dict(pair.json_fields)),
        "length_ratio": pair.length_ratio,
        "latency_delta_s": pair.latency_delta_s,
        "ttft_delta_s": pair.ttft_delta_s,
        "cost_delta_usd": pair.cost_delta_usd,
        "agreement": pair.agreement,
        "sticky_unit": pair.sticky_unit,
    }


def row_to_pair(row: sa.RowMapping) -> PairRecord:
    return PairRecord(
        pair_id=row["pair_id"],
        kind=row["kind"],
        request_id=row["request_id"],
        route=row["route"],
        primary_target=row["primary_target"],
        candidate_target=row["candidate_target"],
        created_at=as_utc(row["created_at"]),
        primary_status=row["primary_status"],
        candidate_status=row["candidate_status"],
        exact_equal=bool(row["exact_equal"]),
        normalized_equal=bool(row["normalized_equal"]),
        json_equal=None if row["json_equal"] is None else bool(row["json_equal"]),
        json_fields=tuple(sorted(json.loads(row["json_fields"]).items())),
        length_ratio=row["length_ratio"],
        latency_delta_s=row["latency_delta_s"],
        ttft_delta_s=row["ttft_delta_s"],
        cost_delta_usd=row["cost_delta_usd"],
        agreement=row["agreement"],
        sticky_unit=row["sticky_unit"],
    )
